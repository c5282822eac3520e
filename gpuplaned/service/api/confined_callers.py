"""Callers confined to one job's runs, or one node's: a job's own processes on the control
socket, and an agent's forwarding of its host's SDK calls (issue 29 item 6).

The control socket trusts the user it belongs to, and jobs run as that user. A process that
GPUPlane started for a job (``gpuplaned.launching.peers``: by its ancestors, never by what
it says) is therefore not the user: it is its job's credential, which may use the SDK's
routes (sessions, and its own run's summary) and write only to its job's runs and to those
it created. It cannot create tokens, submit jobs or read anything else: its job may have been
submitted by a limited token, which must not become the owner through its own job.

A job on a Slurm node, whose host may not be the daemon's, carries the same credential as an
``sdk`` token of its job (``job_tokens``) over the HTTP front, held the same way.

An agent forwards the SDK calls its socket took (``SessionCall``), naming the job whose
process made one; the server holds it to that job, which must be on the agent's node, or,
for a process on that host that is no job's (the host's user), to the node's jobs' runs and
the runs it created.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuplaned.launching import peers
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.service import access
from gpuplaned.service.api.ui_sessions import Caller
from gpuplaned.store import run_owners
from gpuplaned.store.run_owners import NODE_CREDENTIAL

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext

SDK_SCOPES = ("sdk",)
SDK_PREFIX = "/api/v1/sessions"  # the SDK's sessions (``gpuplaned.http.scopes``: the sdk scope's routes)
SDK_READS = ("/api/v1/runs/<run_id>/summary",)  # what the SDK reads, of its own run
VIA_JOB = "job"  # a job's process, on the control socket
VIA_NODE = "node"  # a process on an agent's host, forwarded by the agent


def of_peer(shared: ServerContext, scope: dict[str, Any]) -> Caller | None:
    """The caller of a control-socket request: None for the user (trusted), else the job
    whose process sent it (which ``require_sdk_route`` holds to the SDK's routes).

    Raises:
        ApiError: forbidden, for a process GPUPlane started that no running job claims.
    """
    cred = scope.get(peers.PEER)
    if cred is None:  # not a Unix socket: the loopback-TCP fallback, behind its secret
        return None
    peer = peers.identify_once(cred, shared.runner)
    if peer is None:
        return None
    if peer.job_id is None:
        raise peers.unclaimed(peer)
    return job_caller(peer.job_id, peer.pid)


def require_sdk_route(caller: Caller, rule: str | None, scope: dict[str, Any]) -> None:
    """Raises:
        ApiError: forbidden, when a job's process asks for more than the SDK's routes (``rule``
            None: no route, or the MCP mount).
    """
    method = scope.get("method", "GET")
    if sdk_route(rule, method):
        return
    if caller.via == "token":
        raise ApiError(ErrorCode.FORBIDDEN, f"{caller.name} is job {caller.job_id}'s SDK token: it may use only the "
                       f"SDK's routes (its sessions, and its run's summary), not {method} {scope.get('path', '')}",
                       {"job_id": caller.job_id})
    raise peers.beyond_sdk(caller.name, caller.job_id or "", method, scope.get("path", ""))


def sdk_route(rule: str | None, method: str) -> bool:
    """Whether the route ``rule`` (None: no route) is one the SDK uses: all a job's process may call."""
    if rule is None:
        return False
    return rule == SDK_PREFIX or rule.startswith(SDK_PREFIX + "/") or (rule in SDK_READS and method in ("GET", "HEAD"))


def job_caller(job_id: str, pid: int | None = None) -> Caller:
    process = f"process {pid}" if pid is not None else "a process"
    return Caller(VIA_JOB, SDK_SCOPES, None, f"job:{job_id}", f"job {job_id}'s {process}", job_id=job_id)


def node_caller(node_id: str, job_id: str | None) -> Caller:
    """An SDK call an agent forwarded: from ``job_id``'s process (the caller of this checks that
    the job is on the node), or from a process on the host that is no job's."""
    if job_id is not None:
        return Caller(VIA_NODE, SDK_SCOPES, None, f"job:{job_id}", f"job {job_id}'s process on node {node_id}",
                      job_id=job_id, node_id=node_id)
    return Caller(VIA_NODE, SDK_SCOPES, None, f"{NODE_CREDENTIAL}{node_id}", f"a process on node {node_id}",
                  node_id=node_id)


def files_here(caller: Any) -> bool:
    """Whether the files a caller names are on this host: the user's, or a local job's."""
    return caller is None or getattr(caller, "via", None) == VIA_JOB


def confined(caller: Any) -> bool:
    """Whether ``caller`` reads only its own runs (a job's process, or a node's)."""
    return getattr(caller, "via", None) in (VIA_JOB, VIA_NODE)


async def require_own_run(shared: ServerContext, run_id: str, caller: Any) -> None:
    """A confined caller, or a job's SDK token, reads only the runs it may write to (the SDK reads
    its run's summary).

    Raises:
        ApiError: forbidden naming the run.
    """
    if not confined(caller) and access.credential_job(caller) is None:
        return
    run = await access.readers(shared, "runs").run(lambda conn: run_owners.ownership(conn, run_id))
    if run is not None:
        access.require_run_owner(caller, run)
