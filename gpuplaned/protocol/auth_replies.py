"""What the web UI's sign-in routes answer beside the caller's session (``/api/v1/auth/*``)."""

from __future__ import annotations

import attrs

from gpuplaned.protocol.fields import doc


@attrs.frozen(kw_only=True)
class LogoutReply:
    logged_out: bool = doc("whether a session was ended")
