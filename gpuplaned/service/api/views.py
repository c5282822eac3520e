"""Views (issue 33 item 1): a UI page's URL state kept under a short id, so a long state
travels as ``/v/<id>``; a named one is a saved view.

- The id is url-safe and random (``secrets``: 11 characters), so no one reaches another's view
  by counting; the same page, name and state posted again answers the id it got first.
- A state is at most ``MAX_STATE_BYTES`` (64 KiB of UTF-8), and a token or browser session keeps
  at most ``MAX_VIEWS_EACH`` views (64 MiB): a read scope may create views (sharing a link is
  reading), and these bounds keep it from filling the disk. The local socket (the user) has none.
- Deleting: the local socket and a write (or admin) scope delete any; a read-only caller only
  the views it created.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import TYPE_CHECKING, Any

import attrs

from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.fields import field
from gpuplaned.protocol.view_replies import View, ViewList, ViewReply
from gpuplaned.service import access
from gpuplaned.service.link.registry import now_ms
from gpuplaned.store import view_rows
from gpuplaned.store.writer import write

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext

MAX_STATE_BYTES = 64 * 1024
ID_BYTES = 8  # 11 url-safe characters
PAGE_PATTERN = r"^[a-z][a-z0-9-]{0,39}$"
MAX_LISTED = 500
MAX_VIEWS_EACH = 1_000


def _state_fault(state: str) -> str | None:
    size = len(state.encode("utf-8", "surrogatepass"))
    if size > MAX_STATE_BYTES:
        return f"at most 64 KiB ({MAX_STATE_BYTES} bytes of UTF-8); this one is {size} bytes"
    if state.startswith("?"):
        return "the query string without its leading '?'"
    return None


@attrs.frozen(kw_only=True)
class ViewCreate:
    state: str = field(min_length=1, check=_state_fault, description="the page's URL query string, without '?' "
                                                                     "(at most 64 KiB)")
    name: str | None = field(default=None, min_length=1, max_length=200, description="a saved view's name; "
                                                                                      "absent: a short link")
    page: str = field(default="experiments", pattern=PAGE_PATTERN, message="a page's name (lower-case letters, digits "
                                                                           "and '-')",
                      description="the UI page the state is for")


@attrs.frozen(kw_only=True)
class ViewsQuery:
    saved: str = field(default="false", enum=("true", "false"), description="true: the saved (named) views only")
    page: str | None = field(default=None, pattern=PAGE_PATTERN, description="only this page's views")
    limit: int = field(default=100, minimum=1, maximum=MAX_LISTED, description="at most this many, newest first")


def _hash(page: str, name: str | None, state: str) -> str:
    key = "\0".join((page, "" if name is None else "n:" + name, state))
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def _store(shared: ServerContext) -> Any:
    return access.store_port(shared, "views")


def _readers(shared: ServerContext) -> Any:
    return access.readers(shared, "views")


async def create_view(shared: ServerContext, body: ViewCreate, caller: Any = None) -> tuple[ViewReply, bool]:
    """The view of ``body``, and whether it is new (False: the same was posted before)."""
    state_hash = _hash(body.page, body.name, body.state)
    owner = access.credential_of(caller)
    made_at = now_ms()

    def apply(conn: Any) -> tuple[View, bool]:
        found = view_rows.find_by_hash(conn, state_hash)
        if found is not None:
            return found, False
        if owner is not None and (made := view_rows.count_of(conn, owner)) >= MAX_VIEWS_EACH:
            raise ApiError(ErrorCode.CONFLICT, f"this caller has {made} views, the most one may keep "
                           f"({MAX_VIEWS_EACH}); delete some (DELETE /api/v1/views/{{id}}) to make more",
                           {"limit": MAX_VIEWS_EACH, "views": made})
        view_id = secrets.token_urlsafe(ID_BYTES)
        while view_rows.id_taken(conn, view_id):
            view_id = secrets.token_urlsafe(ID_BYTES)
        view = View(view_id, body.page, body.state, body.name, made_at)
        view_rows.insert_view(conn, view, state_hash, owner)
        return view, True

    view, new = await write(_store(shared), apply)
    return ViewReply(view=view), new


def _not_found(view_id: str) -> ApiError:
    return ApiError(ErrorCode.NOT_FOUND, f"no view {view_id!r}", {"view_id": view_id})


async def get_view(shared: ServerContext, view_id: str) -> ViewReply:
    found = await _readers(shared).run(lambda conn: view_rows.get_view(conn, view_id))
    if found is None:
        raise _not_found(view_id)
    return ViewReply(view=found[0])


async def list_views(shared: ServerContext, query: ViewsQuery) -> ViewList:
    return ViewList(views=await _readers(shared).run(lambda conn: view_rows.list_views(
        conn, saved=query.saved == "true", page=query.page, limit=query.limit)))


def _may_delete(caller: Any, owner: str | None) -> bool:
    if caller is None or {"write", "admin"} & set(caller.scopes):
        return True
    return owner is not None and access.credential_of(caller) == owner


async def delete_view(shared: ServerContext, view_id: str, caller: Any = None) -> ViewReply:
    """Raises:
        ApiError: not_found; forbidden for a read-only caller and a view it did not create.
    """
    def apply(conn: Any) -> View:
        found = view_rows.get_view(conn, view_id)
        if found is None:
            raise _not_found(view_id)
        view, owner = found
        if not _may_delete(caller, owner):
            raise ApiError(ErrorCode.FORBIDDEN, f"view {view_id} is another caller's: a read-only "
                           f"{getattr(caller, 'name', 'caller')} may delete only the views it created",
                           {"view_id": view_id, "needed": "write"})
        view_rows.delete_view(conn, view_id)
        return view

    return ViewReply(view=await write(_store(shared), apply))
