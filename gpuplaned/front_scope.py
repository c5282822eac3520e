"""What the daemon's HTTP servers put in a request's ASGI scope for the apps they serve.

``VOUCH``: on the TCP front, ``vouch(holder, agent=...)`` for the request's connection, which the
app calls once the request authenticated, so that the connection cap holds its slot
(``gpuplaned.http.connections.ConnectionCap``). Here, below both apps that call it (the Quart
app and the ``/mcp`` mount), so that neither reaches into the other's layer for it.
"""

from __future__ import annotations

from typing import Any

VOUCH = "gpuplane.vouch"  # ASGI scope key: ``vouch(holder, agent=...)`` for the request's connection


def vouch_for(scope: dict[str, Any], holder: str, *, agent: bool = False) -> None:
    """Tell the front that the request of ``scope`` authenticated as ``holder`` (no-op off the TCP front)."""
    vouch = scope.get(VOUCH)
    if vouch is not None:
        vouch(holder, agent=agent)
