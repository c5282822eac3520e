"""What the server side may use of the daemon, as typed capabilities: ``ServerContext``.

The daemon builds one object that has them all (``gpuplaned.daemon.DaemonContext``) and
hands it to the server-side actors, the HTTP app and every service function; they are
typed with these protocols, never with the daemon's class, so nothing here or in the
service layer imports ``gpuplaned.daemon``. An actor names the part it uses
(``ActorContext[Configured]`` for the store, ``ActorContext[Dispatching]`` for the scheduler);
the node-side actors get ``gpuplaned.node_context.NodeContext`` instead, which has none of this.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from gpuplaned.config import Config
    from gpuplaned.endpoint import ClaimedEndpoint
    from gpuplaned.lifecycle import Lifecycle
    from gpuplaned.node_context import RunningJobs
    from gpuplaned.runtime.broadcast import Broadcast
    from gpuplaned.runtime.supervisor import Supervisor
    from gpuplaned.service.link.log_feeds import LogFeeds
    from gpuplaned.service.link.metric_feeds import MetricFeeds
    from gpuplaned.service.link.registry import NodeRegistry
    from gpuplaned.store.event_rows import EventRow
    from gpuplaned.store.readers import Readers


class Configured(Protocol):
    """The daemon's configuration (paths, limits, the node's and the actors' settings)."""

    config: Config


class Changes(Protocol):
    """What each committed write changed, by topic (``gpuplaned.protocol.change_replies.TOPICS``):
    the store actor publishes each commit's, the node registry ``nodes`` for each live snapshot."""

    changes: Broadcast[frozenset[str]]


class Storing(Configured, Changes, Protocol):
    """What the store actor uses."""


class Running(Protocol):
    """The daemon itself: its state, its endpoint, when it started, its wall clock, and the one
    way to stop it."""

    lifecycle: Lifecycle
    endpoint: ClaimedEndpoint
    started_at: float  # trio clock
    started_wall: float
    # Wall-clock ms (``registry.now_ms``) by which a token or a browser session has expired:
    # their ends are dates kept as data. Tests swap it for a clock they move.
    wall_ms: Callable[[], int]

    def request_shutdown(self, reason: str) -> None: ...


class Actors(Protocol):
    """The actors: their inboxes (``supervisor.ports``: the store's above all), states and handles."""

    supervisor: Supervisor


class Reading(Protocol):
    """The pool of read-only store connections (None in a role that keeps no data)."""

    readers: Readers | None


class Nodes(Protocol):
    """The connected nodes: how to reach each one's runner, and their latest readings; and
    this machine's own runner, whose jobs' processes the control socket tells from the user."""

    nodes: NodeRegistry
    runner: Callable[[], RunningJobs | None]


class Feeds(Changes, Protocol):
    """Live fan-out to followers: what changed, newly recorded events, running jobs' new output, runs' new points."""

    event_feed: Broadcast[EventRow]
    log_feeds: LogFeeds
    metric_feeds: MetricFeeds


class Dispatching(Actors, Nodes, Protocol):
    """What the scheduler's passes and their deliveries use."""


class ServerContext(Configured, Running, Actors, Reading, Nodes, Feeds, Protocol):
    """Everything of the server side: what the HTTP app and the service functions get."""
