"""The reply shapes still declared for the document only, until their contents move to ``protocol/``.

The reply types live in ``gpuplaned.protocol`` (``job_replies``, ``run_replies``,
``checkpoint_replies``, ``diagnosis_replies``...), where the services build them. The wrappers
left here hold a store's row or a service's value (``{"run": Run}``), which ``protocol/`` cannot
import: they are declared so that ``gpuplaned.http.openapi`` can generate every schema from a
class, and ``tests/http/test_openapi.py`` checks real replies against them.
"""

from __future__ import annotations

import attrs

from gpuplaned.protocol.fields import doc
from gpuplaned.protocol.reply_words import next_cursor_field as _next
from gpuplaned.service.tokens import TokenInfo
from gpuplaned.service.ui_sessions import UiSession

# --- jobs and runs ---------------------------------------------------------------------------


# --- SDK sessions and checkpoints ------------------------------------------------------------


# --- nodes and events --------------------------------------------------------------------------


# --- tokens, projects, the web UI's sign-in --------------------------------------------------


@attrs.frozen(kw_only=True)
class TokenCreated:
    token: TokenInfo
    secret: str = doc("shown only in this reply", pattern="^gpp_[0-9A-HJKMNP-TV-Z]{26}_[A-Za-z0-9_-]{43}$")


@attrs.frozen(kw_only=True)
class TokenReply:
    token: TokenInfo


@attrs.frozen(kw_only=True)
class TokenList:
    tokens: list[TokenInfo]
    next_cursor: str | None = _next()


@attrs.frozen(kw_only=True)
class UiSessionReply:
    session: UiSession


# --- webhooks (issue 16) -------------------------------------------------------------------


# --- capability tokens: the dry run and the audit log (issue 17) ---------------------------
