"""Which token scope each route needs on the HTTP front (the Unix socket needs none).

One rule for every route, so a new route cannot go unguarded: reading needs ``read``,
anything else ``write``; tokens, daemon shutdown, actor commands and the audit log need ``admin``; the
agent WebSocket needs ``agent``; SDK sessions need ``sdk``. ``admin`` grants everything and ``write`` grants ``read``
(``gpuplaned.service.api.tokens.grants``).

Signing out needs only ``read``, so every browser session can end itself; so does
``POST /api/v1/runs/metrics:query``, a read with its (long) list of runs in a body, so a
read-only browser session can compare runs (a cookie-authenticated POST still needs the CSRF
header: ``gpuplaned.service.api.ui_sessions``). Forgetting a node (``DELETE /api/v1/nodes/{node}``)
is a write like any other. Nothing at all is
needed to sign in or for the web UI's own files (``PUBLIC_RULES``): the page holds no data,
and everything it shows comes from ``/api/``. That list names each such route: a new route
anywhere else needs credentials.
"""

from __future__ import annotations

READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
ADMIN_RULES = (
    "/api/v1/tokens",
    "/api/v1/daemon/shutdown",
    "/api/v1/actors/<name>/<verb>",
    "/api/v1/auth/login-links",
    "/api/v1/webhooks",  # a Slack or Bark URL is itself a credential
    "/api/v1/audit",  # every caller's calls and arguments
)
# POSTs that change nothing; a view (a short link's state) is kept for whoever reads a page
# (at most 64 KiB: gpuplaned.service.api.views), and its creator may delete it.
READ_RULES = ("/api/v1/auth/logout", "/api/v1/runs/metrics:query", "/api/v1/workspace/runs", "/api/v1/views",
              "/api/v1/views/<view_id>")
UI_RULES = ("/", "/login", "/assets/<path:name>", "/<ui_path:path>")  # gpuplaned.http.ui_routes
PUBLIC_RULES = ("/api/v1/auth/login", *UI_RULES)
AGENT_RULES = ("/api/v1/agent/ws",)
SDK_PREFIX = "/api/v1/sessions"  # what training scripts send: the sdk scope, and nothing else needs it


def required_scope(rule: str | None, method: str) -> str:
    """The scope a request needs; ``rule`` is the matched route template (None: no route)."""
    if rule is not None:
        if any(rule == r or rule.startswith(r + "/") for r in ADMIN_RULES):
            return "admin"
        if rule in AGENT_RULES:
            return "agent"
        if rule == SDK_PREFIX or rule.startswith(SDK_PREFIX + "/"):
            return "sdk"
        if rule in READ_RULES:
            return "read"
    return "read" if method.upper() in READ_METHODS else "write"


def is_public(rule: str | None) -> bool:
    """Whether a request to the route ``rule`` (None: no route) needs no credentials at all."""
    return rule in PUBLIC_RULES
