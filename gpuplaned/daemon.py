"""The daemon: claim the endpoint, run the role's actors, and shut down along one path.

Every way to stop (SIGINT/SIGTERM, ``POST /api/v1/daemon/shutdown``, owner death, a crash
of the serve loop) goes through ``request_shutdown``: the lifecycle moves to STOPPING, the
supervisor stops actors in reverse start order within ``STOP_DEADLINE``, and the cleanup
that must happen (port-file removed if it is still ours, socket unlinked if it is still
ours, lock released) runs shielded in ``finally``. A second signal skips the graceful part.

The daemon builds what the actors get as ``ctx.shared``: the server side's capabilities
(``DaemonContext``, typed by its users as ``gpuplaned.service.context.ServerContext`` and
its parts) and the node side's ``NodeContext``, whose node link is in memory where the
server runs (role ``all``, role ``server --also-node``: ``LocalNodeLink``) and the uplink in
role ``agent`` (``UplinkNodeLink``, over the spool in ``<home>/uplink/``, which the daemon
holds open for its whole life so that an uplink restart loses nothing).

A permanent failure an actor cannot get past (a remote agent's refused token) asks for an
exit with a status of its own (``DaemonContext.fail``): ``serve`` returns it.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import attrs
import trio

from gpuplaned import __version__
from gpuplaned.actors import NODE_ACTORS
from gpuplaned.config import Config
from gpuplaned.endpoint import ClaimedEndpoint, claim_endpoint, publish_portfile, remove_portfile_if_ours
from gpuplaned.home import prepare_home
from gpuplaned.lifecycle import DaemonState, Lifecycle
from gpuplaned.node_context import LogsPort, NodeContext, RunningJobs
from gpuplaned.node_link import NodeLink
from gpuplaned.owner import watch_owner
from gpuplaned.runtime.broadcast import Broadcast
from gpuplaned.runtime.spec import ActorSpec
from gpuplaned.runtime.supervisor import Supervisor
from gpuplaned.service.link.log_feeds import LogFeeds
from gpuplaned.service.link.metric_feeds import MetricFeeds
from gpuplaned.service.link.registry import NodeRegistry, now_ms
from gpuplaned.store.event_rows import EventRow
from gpuplaned.store.readers import Readers
from gpuplaned.uplink.link import UplinkContext, UplinkNodeLink
from gpuplaned.uplink.spool import Spool

log = logging.getLogger("gpuplaned")

STOP_DEADLINE = 20.0


@attrs.define
class DaemonContext:
    """The server side's share of the daemon: what the server-side actors, the HTTP app and
    the service functions get (``ServerContext``: config, lifecycle, actors, readers, nodes, feeds)."""

    config: Config
    lifecycle: Lifecycle
    endpoint: ClaimedEndpoint
    started_at: float  # trio clock
    started_wall: float
    readers: Readers | None = None
    wall_ms: Callable[[], int] = now_ms  # the wall clock expiry is judged by (tokens, browser sessions)
    supervisor: Supervisor = attrs.field(default=None)
    # What each commit changed, by topic (the store actor's and the node registry's), for the changes stream.
    changes: Broadcast[frozenset[str]] = attrs.field(factory=Broadcast)
    nodes: NodeRegistry = attrs.field(  # reach each node's runner
        default=attrs.Factory(lambda self: NodeRegistry(self.changes), takes_self=True))
    event_feed: Broadcast[EventRow] = attrs.field(factory=Broadcast)  # newly recorded events, for followers
    log_feeds: LogFeeds = attrs.field(factory=LogFeeds)  # running jobs' new output, for live followers
    metric_feeds: MetricFeeds = attrs.field(factory=MetricFeeds)  # runs' newly committed points, for live charts
    uplink: UplinkNodeLink | None = None  # role agent: the link to the server (the agent's control app shows it)
    # This machine's runner, whose jobs' processes the control socket tells from the user (none in role server).
    runner: Callable[[], RunningJobs | None] = attrs.field(default=lambda: None)
    exit_status: int = 0  # what ``serve`` returns: non-zero after ``fail``
    exit_message: str | None = None
    _shutdown: trio.Event = attrs.field(factory=trio.Event)
    _startup_scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)

    def request_shutdown(self, reason: str) -> None:
        """Begin shutdown (idempotent; the first reason is the one kept)."""
        if self.lifecycle.stopping(reason):
            log.info("shutting down: %s", reason)
            self._startup_scope.cancel()
            self._shutdown.set()

    def fail(self, reason: str, status: int) -> None:
        """Shut down, and exit with ``status`` (``reason`` is printed by the CLI)."""
        if self.exit_message is None:
            self.exit_status, self.exit_message = status, reason
        self.request_shutdown(reason)


async def serve(cfg: Config, specs: list[ActorSpec], *, task_status: trio.TaskStatus[DaemonContext] = trio.TASK_STATUS_IGNORED) -> int:
    """Run the daemon until it is told to stop; returns the exit status (0, or the one
    ``DaemonContext.fail`` asked for).

    Raises:
        EndpointBusy: another daemon owns the endpoint (nothing was touched).
        EndpointError: the endpoint could not be claimed.
        HomeError: the data dir cannot be made private.
        ActorStartError: an actor failed before it first became ready.
    """
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        endpoint = claim_endpoint(cfg.runtime_dir, cfg.listen, group_access=cfg.group_access)
        shared = DaemonContext(cfg, Lifecycle(), endpoint, trio.current_time(), time.time())
        supervisor = shared.supervisor = Supervisor(specs, shared, on_started=_publish_when_control(shared))
        serves = any(spec.name == "store" for spec in specs)
        if serves:
            # Imported by the roles that serve only: an agent has no use for the service layer.
            from gpuplaned.service.link.nodes import LocalNodeLink

            shared.readers = Readers(cfg.db_path, cfg.store.read_connections)
            # Role all: the node side reaches this server through the in-memory link.
            node = _node_context(cfg, endpoint, LocalNodeLink(shared), supervisor)
            shared.runner = node.runner
            supervisor.shared_for.update({name: node for name in NODE_ACTORS})
        try:
            prepare_home(cfg.home)  # once the endpoint is ours: a second daemon touches nothing
            if any(spec.name == "uplink" for spec in specs):
                _agent_context(cfg, endpoint, shared, supervisor)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_watch_signals, signals, shared, nursery.cancel_scope)
                if cfg.owner_pid is not None:
                    nursery.start_soon(watch_owner, cfg.owner_pid, shared.request_shutdown)
                with shared._startup_scope:
                    await nursery.start(supervisor.run)
                    shared.lifecycle.ready()
                    # What start-up made (imports, the app, the actors) lives as long as the
                    # daemon: out of the collector's sight, so that a full collection no
                    # longer walks ~120k objects (tens of ms with the event loop stopped).
                    gc.freeze()
                    if serves:
                        from gpuplaned.service.passes import folder_removal, spool_replay

                        nursery.start_soon(spool_replay.replay_at_start, shared)  # SDK spools left by ended processes
                        # removed jobs' folders a stop cut short (the agents' go at their hello)
                        nursery.start_soon(folder_removal.run, shared, {folder_removal.HERE})
                    log.info("gpuplaned %s ready (pid %d, role %s, %s)", __version__, os.getpid(),
                             cfg.role, endpoint.portfile().endpoint)
                    task_status.started(shared)
                await shared._shutdown.wait()
                if supervisor.booted:
                    with trio.move_on_after(STOP_DEADLINE) as deadline:
                        await supervisor.stop_all()
                    if deadline.cancelled_caught:
                        log.warning("actors did not stop within %g s; cancelling them", STOP_DEADLINE)
                nursery.cancel_scope.cancel()
        except BaseException as exc:
            if shared.lifecycle.state is not DaemonState.STOPPING:
                shared.lifecycle.stopping(f"serve loop failed: {type(exc).__name__}")
            raise
        finally:
            remove_portfile_if_ours(cfg.runtime_dir)
            endpoint.release()
            if shared.readers is not None:
                shared.readers.close()
            if shared.uplink is not None:
                shared.uplink.close()
            shared.lifecycle.closed()
            log.info("gpuplaned stopped (%s)", shared.lifecycle.stop_reason or "done")
    if shared.exit_message is not None:
        log.error("exiting with status %d: %s", shared.exit_status, shared.exit_message)
    return shared.exit_status


def _node_context(cfg: Config, endpoint: ClaimedEndpoint, link: NodeLink, supervisor: Supervisor) -> NodeContext:
    """What the node-side actors get: the link to the server, and each other through ports."""

    def runner() -> RunningJobs | None:
        return supervisor.handle("runner") if "runner" in supervisor.ports else None

    return NodeContext(cfg, endpoint, link, LogsPort(supervisor.ports.get("logs")), runner)


def _agent_context(cfg: Config, endpoint: ClaimedEndpoint, shared: DaemonContext, supervisor: Supervisor) -> None:
    """Role agent: the node actors reach the server through the uplink, over the spool."""
    up = cfg.uplink
    spool = Spool(cfg.home / "uplink", max_bytes=up.spool_max_bytes, max_age_s=up.spool_max_age_s, fsync=up.fsync,
                  fsync_interval_s=up.fsync_interval_s)
    assert cfg.server is not None  # load_config refuses role agent without one
    link = shared.uplink = UplinkNodeLink(spool, cfg.server)
    node = _node_context(cfg, endpoint, link, supervisor)
    shared.runner = node.runner
    shared_for: dict[str, Any] = {name: node for name in NODE_ACTORS}
    shared_for["uplink"] = UplinkContext(cfg, link, shared.fail)
    supervisor.shared_for.update(shared_for)


def _publish_when_control(shared: DaemonContext) -> Callable[[str], None]:
    def on_started(name: str) -> None:
        # The port-file goes out once something answers on the endpoint.
        if name == "control":
            publish_portfile(shared.endpoint)

    return on_started


async def _watch_signals(signals: AsyncIterator[int], shared: DaemonContext, everything: trio.CancelScope) -> None:
    """The first signal starts a graceful shutdown; a second one skips the waiting.

    Only signals count: owner death may arrive both through its pidfd and as the
    PDEATHSIG SIGTERM, and that is still one request to stop.
    """
    received = 0
    async for signum in signals:
        received += 1
        name = signal.Signals(signum).name
        if received > 1:
            log.warning("second signal (%s): stopping now, without waiting for actors", name)
            everything.cancel()
            return
        shared.request_shutdown(f"received {name}")
