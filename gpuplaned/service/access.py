"""Where a service reads and writes: the store actor's port and the read-only connections.

A daemon whose role keeps no such data (an agent) answers ``unavailable`` naming what it
lacks, instead of failing on a missing port. A request's writes while the store actor is
down are 503 ``store_unavailable`` at once, and change nothing (``store.writer.RequestPort``);
reads go on from the read-only connections.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.store.writer import STORE_UP, RequestPort, store_unavailable

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext


def store_port(shared: ServerContext, what: str) -> RequestPort:
    """The store, for a request's ``store.writer.write``.

    Raises:
        ApiError: ``unavailable`` when the role keeps no ``what``; ``store_unavailable``
            while the store actor is not running (stopped, restarting after a crash, FATAL).
    """
    port = shared.supervisor.ports.get("store") if shared.supervisor is not None else None
    if port is None:
        raise ApiError(ErrorCode.UNAVAILABLE, f"this daemon's role keeps no {what}")
    state = shared.supervisor.state("store")
    if state not in STORE_UP:
        raise store_unavailable(f"the store actor is {state.value}, so nothing can be written; nothing was "
                                "changed: retry once it runs again (`gpuplanectl status`; "
                                "`gpuplanectl actor start store`)", state=state.value)
    return RequestPort(port, lambda: shared.supervisor.state("store"))


def readers(shared: ServerContext, what: str) -> Any:
    """The pool of read-only connections (``shared.readers.run(fn)``)."""
    if shared.readers is None:
        raise ApiError(ErrorCode.UNAVAILABLE, f"this daemon's role keeps no {what}")
    return shared.readers
