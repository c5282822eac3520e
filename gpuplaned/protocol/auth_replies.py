"""What the web UI's sign-in routes answer (``/api/v1/auth/*``): the caller's session, a logout."""

from __future__ import annotations

import attrs

from gpuplaned.protocol.fields import doc
from gpuplaned.protocol.token_replies import SCOPES

# How a request was authenticated (local: the trusted control endpoint; job: a job's process
# on it; node: a process on an agent's host, forwarded: gpuplaned.service.api.confined_callers).
VIAS = ("cookie", "token", "local", "job", "node")


@attrs.frozen
class UiSession:
    """What ``/api/v1/auth/*`` shows of the caller: never a secret."""

    expires_at: int | None = doc("when the session (or the token) stops working, ms since the epoch; null: never")
    scopes: tuple[str, ...] = doc(items={"enum": list(SCOPES)})
    via: str = doc("how this request was authenticated: the session cookie, an API token, or nothing needed "
                   "(local: the control socket)", enum=VIAS)


@attrs.frozen(kw_only=True)
class UiSessionReply:
    session: UiSession


@attrs.frozen(kw_only=True)
class LogoutReply:
    logged_out: bool = doc("whether a session was ended")
