"""Views (issue 33 item 1): a UI page's URL state kept under a short id, for links (``/v/<id>``)
and saved views."""

from __future__ import annotations

import attrs

from gpuplaned.protocol.fields import doc


@attrs.frozen
class View:
    id: str = doc("url-safe and random (the short link is /v/<id>)", minLength=8)
    page: str = doc("the UI page the state is for")
    state: str = doc("the page's query string, without '?'")
    name: str | None = doc("a saved view's name; null: a short link")
    created_at: int = doc("ms since the epoch")


@attrs.frozen(kw_only=True)
class ViewReply:
    view: View


@attrs.frozen(kw_only=True)
class ViewList:
    views: list[View] = doc("newest first")
