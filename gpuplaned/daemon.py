"""The daemon: claim the endpoint, run the role's actors, and shut down along one path.

Every way to stop (SIGINT/SIGTERM, ``POST /api/v1/daemon/shutdown``, owner death, a crash
of the serve loop) goes through ``request_shutdown``: the lifecycle moves to STOPPING, the
supervisor stops actors in reverse start order within ``STOP_DEADLINE``, and the cleanup
that must happen (port-file removed if it is still ours, socket unlinked if it is still
ours, lock released) runs shielded in ``finally``. A second signal skips the graceful part.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import time
from typing import Any

import attrs
import trio

from gpuplaned import __version__
from gpuplaned.config import Config
from gpuplaned.endpoint import ClaimedEndpoint, claim_endpoint, publish_portfile, remove_portfile_if_ours
from gpuplaned.home import prepare_home
from gpuplaned.lifecycle import DaemonState, Lifecycle
from gpuplaned.owner import watch_owner
from gpuplaned.runtime.broadcast import Broadcast
from gpuplaned.runtime.spec import ActorSpec
from gpuplaned.runtime.supervisor import Supervisor
from gpuplaned.service import spool_replay
from gpuplaned.service.log_feeds import LogFeeds
from gpuplaned.service.nodes import LocalNodeLink
from gpuplaned.service.registry import NodeRegistry
from gpuplaned.store.readers import Readers

log = logging.getLogger("gpuplaned")

STOP_DEADLINE = 20.0


@attrs.define
class DaemonContext:
    """What every actor and handler may see of the daemon (``ctx.shared``)."""

    config: Config
    lifecycle: Lifecycle
    endpoint: ClaimedEndpoint
    started_at: float  # trio clock
    started_wall: float
    readers: Readers | None = None
    supervisor: Supervisor = attrs.field(default=None)
    nodes: NodeRegistry = attrs.field(factory=NodeRegistry)  # server side: reach each node's runner
    node_link: Any = None  # node side: how the runner reaches the server
    event_feed: Broadcast[Any] = attrs.field(factory=Broadcast)  # newly recorded events, for followers
    log_feeds: LogFeeds = attrs.field(factory=LogFeeds)  # running jobs' new output, for live followers
    _shutdown: trio.Event = attrs.field(factory=trio.Event)
    _startup_scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)

    def request_shutdown(self, reason: str) -> None:
        """Begin shutdown (idempotent; the first reason is the one kept)."""
        if self.lifecycle.stopping(reason):
            log.info("shutting down: %s", reason)
            self._startup_scope.cancel()
            self._shutdown.set()


async def serve(cfg: Config, specs: list[ActorSpec], *, task_status: trio.TaskStatus[DaemonContext] = trio.TASK_STATUS_IGNORED) -> None:
    """Run the daemon until it is told to stop.

    Raises:
        EndpointBusy: another daemon owns the endpoint (nothing was touched).
        EndpointError: the endpoint could not be claimed.
        HomeError: the data dir cannot be made private.
        ActorStartError: an actor failed before it first became ready.
    """
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        endpoint = claim_endpoint(cfg.runtime_dir, cfg.listen)
        shared = DaemonContext(cfg, Lifecycle(), endpoint, trio.current_time(), time.time())
        if any(spec.name == "store" for spec in specs):
            shared.readers = Readers(cfg.db_path, cfg.store.read_connections)
            shared.node_link = LocalNodeLink(shared)
        supervisor = shared.supervisor = Supervisor(specs, shared, on_started=_publish_when_control(shared))
        try:
            prepare_home(cfg.home)  # once the endpoint is ours: a second daemon touches nothing
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
                    nursery.start_soon(spool_replay.replay_at_start, shared)  # SDK spools left by ended processes
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
            shared.lifecycle.closed()
            log.info("gpuplaned stopped (%s)", shared.lifecycle.stop_reason or "done")


def _publish_when_control(shared: DaemonContext) -> Any:
    def on_started(name: str) -> None:
        # The port-file goes out once something answers on the endpoint.
        if name == "control":
            publish_portfile(shared.endpoint)

    return on_started


async def _watch_signals(signals: Any, shared: DaemonContext, everything: trio.CancelScope) -> None:
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
