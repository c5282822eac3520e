"""The actors, one module each, and REGISTRY: the only place that lists actors, roles and dependencies."""

from __future__ import annotations

from gpuplaned.actors import (ckptwatch, control, detector, http, logs, monitor, policies, rollup, runner, scheduler,
                              store, tbtail, webhooks)

from gpuplaned.runtime.spec import ActorSpec

SERVER = frozenset({"all", "server"})
EVERY_ROLE = frozenset({"all", "server", "agent"})

REGISTRY: tuple[ActorSpec, ...] = (
    # control first: it answers 503 not_ready while the rest start, and stops last.
    ActorSpec("control", control.run, EVERY_ROLE, graceful_stop=True, stop_grace=5.0, stoppable=False),
    ActorSpec("store", store.run, SERVER, depends_on=(), graceful_stop=True, stop_grace=10.0,
              inbox_size=1024),
    ActorSpec("scheduler", scheduler.run, SERVER, depends_on=("store",)),
    # The runner talks to the server through a node link; role agent gets one with the
    # uplink, so for now the runner runs where the server does.
    ActorSpec("logs", logs.run, frozenset({"all"}), depends_on=("store",), inbox_size=1024),
    ActorSpec("runner", runner.run, frozenset({"all"}), depends_on=("store", "scheduler", "logs"), inbox_size=256),
    ActorSpec("rollup", rollup.run, SERVER, depends_on=("store",)),
    # Node telemetry reaches the server through the same node link as the runner's reports.
    ActorSpec("monitor", monitor.run, frozenset({"all"}), depends_on=("runner",)),
    # Checkpoints jobs save on their own, found in their folders and registered through the link.
    ActorSpec("ckptwatch", ckptwatch.run, frozenset({"all"}), depends_on=("runner",)),
    # TensorBoard event files jobs write, read as they grow; their scalars become the runs' points.
    ActorSpec("tbtail", tbtail.run, frozenset({"all"}), depends_on=("runner",)),
    # Notifications from the outbox the events' trigger fills (0013_events_policies.sql).
    ActorSpec("webhooks", webhooks.run, SERVER, depends_on=("store",)),
    # The jobs' failure policies, once per trigger (policy_actions, 0013_events_policies.sql).
    ActorSpec("policies", policies.run, SERVER, depends_on=("store", "scheduler")),
    # The time-based event rules (RUN_STALLED) over running jobs; the metric rules run at ingest.
    ActorSpec("detector", detector.run, SERVER, depends_on=("store",)),
    ActorSpec("http", http.run, SERVER, depends_on=("store",), graceful_stop=True, stop_grace=5.0),
)


def specs_for_role(role: str, *, http: bool = True) -> list[ActorSpec]:
    """The actors a daemon of ``role`` runs (``http``: False when the HTTP front is off)."""
    return [spec for spec in REGISTRY if role in spec.roles and (http or spec.name != "http")]
