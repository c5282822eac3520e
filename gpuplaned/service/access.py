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
# The user on the local Unix socket is trusted (its folder is the user's own); every other
# credential writes only to the runs it owns (issue 29 items 2 and 6): a token's, a job's
# process's or an agent host's sessions, metric batches, events, checkpoints and finishes
# cannot reach another's run (its NaN would stop their job; its checkpoint paths would be
# retention's to delete).


class Caller(Protocol):
    """What the checks below read of a network caller (``ui_sessions.Caller``)."""

    scopes: Sequence[str]
    key: str
    name: str
    token_id: str | None
    job_id: str | None
    node_id: str | None


def credential_of(caller: Caller | None) -> str | None:
    """The key a network caller's runs are recorded under (an API token's id, a browser
    session's key); None for the trusted local socket and for an admin, who may write anywhere."""
    if caller is None or "admin" in caller.scopes:
        return None
    return caller.token_id or caller.key


def credential_job(caller: Caller | None) -> str | None:
    """The job a caller's credential belongs to (a job's process: ``confined_callers``); None for a token."""
    return getattr(caller, "job_id", None)


def owns_run(caller: Caller | None, run: RunOwnership) -> bool:
    """Whether ``caller`` may write to ``run``: the trusted socket or an admin always, else a
    credential that created the run; a job's process also its job's runs, and an agent host's
    process (no job's) the runs of that node's jobs."""
    credential = credential_of(caller)
    if credential is None:
        return True
    if run.created_by is not None and run.created_by == credential:
        return True
    job = credential_job(caller)
    if job is not None:
        return run.job_id == job
    node = getattr(caller, "node_id", None)
    return node is not None and run.job_id is not None and run.node_id == node


def may_report_to_job(caller: Caller | None, job_id: str, job_node: str | None) -> bool:
    """Whether ``caller`` may open a session for ``job_id`` (on ``job_node``): the user; the
    job's own processes; a process on the job's node that is no job's (the host's user)."""
    if credential_of(caller) is None:
        return True
    job = credential_job(caller)
    if job is not None:
        return job == job_id
    node = getattr(caller, "node_id", None)
    return node is not None and node == job_node


def require_run_owner(caller: Caller | None, run: RunOwnership) -> None:
    """Raises:
        ApiError: forbidden naming the run, when ``owns_run`` says no.
    """
    if not owns_run(caller, run):
        whose = f"job {run.job_id}'s run" if run.job_id else "a run another credential created"
        raise ApiError(ErrorCode.FORBIDDEN,
                       f"{caller.name if caller else 'this caller'} may not write to run {run.run_id}: it is {whose}; "
                       "a token writes only to the runs it created (open a session without run_id), and a job's "
                       "process only to its job's",
                       {"run_id": run.run_id})
