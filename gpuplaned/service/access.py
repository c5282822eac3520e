"""Where a service reads and writes: the store actor's port and the read-only connections.

A daemon whose role keeps no such data (an agent) answers ``unavailable`` naming what it
lacks, instead of failing on a missing port. A request's writes while the store actor is
down are 503 ``store_unavailable`` at once, and change nothing (``store.writer.RequestPort``);
reads go on from the read-only connections.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.store.writer import STORE_UP, RequestPort, store_unavailable

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext
    from gpuplaned.store.run_owners import RunOwnership


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


# --------------------------------------------------------------- who may write to a run
# The local Unix socket is trusted (its folder is the user's own); on the HTTP front an SDK
# credential writes only to the runs it owns (issue 29 item 2): a token's sessions, metric
# batches, events, checkpoints and finishes cannot reach another's run (its NaN would stop
# their job; its checkpoint paths would be retention's to delete).


class Caller(Protocol):
    """What the checks below read of a network caller (``ui_sessions.Caller``)."""

    scopes: Sequence[str]
    key: str
    name: str
    token_id: str | None


def credential_of(caller: Caller | None) -> str | None:
    """The key a network caller's runs are recorded under (an API token's id, a browser
    session's key); None for the trusted local socket and for an admin, who may write anywhere."""
    if caller is None or "admin" in caller.scopes:
        return None
    return caller.token_id or caller.key


def credential_job(caller: Caller | None) -> str | None:
    """The job a caller's credential belongs to: a job's own credential owns that job's runs.
    None today: tokens belong to no job (issue 29 item 6 may give each job its own)."""
    return getattr(caller, "job_id", None)


def owns_run(caller: Caller | None, run: RunOwnership) -> bool:
    """Whether ``caller`` may write to ``run``: the trusted socket or an admin always, else a
    credential that created the run, or the credential of the run's own job."""
    credential = credential_of(caller)
    if credential is None:
        return True
    if run.created_by is not None and run.created_by == credential:
        return True
    job = credential_job(caller)
    return job is not None and run.job_id == job


def require_run_owner(caller: Caller | None, run: RunOwnership) -> None:
    """Raises:
        ApiError: forbidden naming the run, when ``owns_run`` says no.
    """
    if not owns_run(caller, run):
        whose = f"job {run.job_id}'s run" if run.job_id else "a run another credential created"
        raise ApiError(ErrorCode.FORBIDDEN,
                       f"{caller.name if caller else 'this caller'} may not write to run {run.run_id}: it is {whose}; "
                       "an SDK token writes only to the runs it created (open a session without run_id)",
                       {"run_id": run.run_id})
