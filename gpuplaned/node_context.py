"""What a node-side actor (runner, logs, monitor, ckptwatch, tbtail) gets as ``ctx.shared``: ``NodeContext``.

Nothing in it reaches the store, the service layer or the HTTP app: the server is the
``NodeLink``. The other node actors are reached through small typed ports built by the
daemon, never by importing them: the runner tells the logs actor which attempts to tail
(``LogsPort``), and the monitor, the checkpoint watcher and the TensorBoard tailer read the
runner's live jobs (``RunningJobs``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Protocol

import attrs
import trio

from gpuplaned.config import Config
from gpuplaned.domain.node_conditions import NodeConditions
from gpuplaned.endpoint import ClaimedEndpoint
from gpuplaned.launching.peers import LiveJob
from gpuplaned.node_link import NodeLink

log = logging.getLogger("gpuplaned.logs")


@attrs.frozen
class FollowLogs:
    """Runner to logs: tail this attempt's two log files until ``LogsEnded``."""

    job_id: str
    attempt: int
    job_dir: str
    resume: bool = True  # False for an attempt that just started: nothing is stored for it yet


@attrs.frozen
class LogsEnded:
    """Runner to logs: the attempt has ended; read what is left of its files, then stop."""

    job_id: str
    attempt: int


class LogsPort:
    """The logs actor's inbox, as the runner uses it: best effort, never blocking."""

    def __init__(self, port: trio.MemorySendChannel[object] | None) -> None:
        self._port = port

    def follow(self, message: FollowLogs | LogsEnded) -> None:
        if self._port is None:  # no logs actor in this role: the files still have everything
            return
        try:
            self._port.send_nowait(message)
        except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
            log.warning("logs actor is not keeping up; %r dropped (the files still have everything)", message)


class LiveJobView(LiveJob, Protocol):
    """What the monitor, the checkpoint watcher and the TensorBoard tailer read of one of the
    runner's live jobs: what tells its processes (``peers.LiveJob``), and where and on what it runs."""

    @property
    def cwd(self) -> str | None: ...

    @property
    def env(self) -> Mapping[str, str]: ...

    @property
    def gpu_indexes(self) -> tuple[int, ...]: ...

    @property
    def started_here(self) -> bool: ...  # this runner started it, rather than adopting it after a restart

    @property
    def pid(self) -> int | None: ...  # its main process, where known

    @property
    def started_at(self) -> float | None: ...  # when its main process was started (wall clock), where known


@attrs.frozen
class JobStart:
    """How an attempt started, as its readers need it: its clock (its files are those written
    since) and its processes (whose files are its own). What its ``runtime.json`` holds."""

    started_at: float  # wall clock, epoch seconds
    pgid: int
    shim_pid: int
    pid: int

    @classmethod
    def told(cls, job: LiveJobView) -> JobStart | None:
        """The runner's word for an attempt it started (the values the shim wrote to
        ``runtime.json`` and reported): no file to read. None: not started here (adopted after
        a restart), or not all of it known: read its ``runtime.json``."""
        if not job.started_here or job.started_at is None or not job.pgid or not job.shim_pid or not job.pid:
            return None
        return cls(job.started_at, job.pgid, job.shim_pid, job.pid)


ENDS_KEPT = 256  # the attempts that ended lately that the runner lists (``RunningJobs.recent_ends``)


class RunningJobs(Protocol):
    """The runner's handle, as the monitor sees it: the node's id and its live jobs; and, for
    the tailer and the watcher, the attempts that ended lately (oldest first), those that
    ended while the daemon was away included."""

    @property
    def node_id(self) -> str: ...

    @property
    def live(self) -> Mapping[str, LiveJobView]: ...

    @property
    def recent_ends(self) -> Mapping[tuple[str, int], LiveJobView]: ...

    @property
    def changed(self) -> trio.Event:
        """Set when ``live`` or ``recent_ends`` next changes (then replaced by a new one): a
        reader with nothing to watch waits on it instead of looking again and again."""

    @property
    def ends_listed(self) -> int:
        """How many attempts ``recent_ends`` has taken in so far: a reader that took in the
        list when this was n, and finds it more than ``ENDS_KEPT`` past n, has missed some."""


def _no_runner() -> RunningJobs | None:
    return None


@attrs.define
class NodeContext:
    """The node-side actors' share of the daemon."""

    config: Config
    endpoint: ClaimedEndpoint  # this machine's control endpoint, which jobs get in their environment
    link: NodeLink
    logs: LogsPort = attrs.field(factory=lambda: LogsPort(None))
    # The runner's handle while it runs (None before its hello, or while it restarts).
    runner: Callable[[], RunningJobs | None] = _no_runner
    # What is wrong with the node for now, raised and cleared by its parts (the Slurm backend's
    # slurm_unreachable): the monitor sends each change's event and puts them in its snapshots.
    conditions: NodeConditions = attrs.field(factory=NodeConditions)
