"""Where a service reads and writes: the store actor's port and the read-only connections.

A daemon whose role keeps no such data (an agent) answers ``unavailable`` naming what it
lacks, instead of failing on a missing port.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuplaned.protocol.errors import ApiError, ErrorCode

if TYPE_CHECKING:
    from gpuplaned.daemon import DaemonContext


def store_port(shared: DaemonContext, what: str) -> Any:
    """The store actor's port, for ``store.writer.write``."""
    port = shared.supervisor.ports.get("store") if shared.supervisor is not None else None
    if port is None:
        raise ApiError(ErrorCode.UNAVAILABLE, f"this daemon's role keeps no {what}")
    return port


def readers(shared: DaemonContext, what: str) -> Any:
    """The pool of read-only connections (``shared.readers.run(fn)``)."""
    if shared.readers is None:
        raise ApiError(ErrorCode.UNAVAILABLE, f"this daemon's role keeps no {what}")
    return shared.readers
