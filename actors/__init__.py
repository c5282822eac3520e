"""The actors, one module each, and REGISTRY: the only place that lists actors, roles and dependencies."""

from __future__ import annotations

import importlib
from typing import Any

import attrs
import trio

from gpuplaned.runtime.spec import ActorSpec


def _run_of(name: str) -> Any:
    """Actor ``name``'s ``run``, from its module (which ``specs_for_role`` imports): a daemon
    imports only what its role runs (a remote agent would otherwise carry the server's
    store, service layer and HTTP app, ~240 modules and ~30 MB it never uses)."""

    async def run(ctx: Any, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        module = importlib.import_module(f"gpuplaned.actors.{name}")
        await module.run(ctx, task_status=task_status)

    run.__name__ = run.__qualname__ = f"{name}.run"
    return run

SERVER = frozenset({"all", "server"})
EVERY_ROLE = frozenset({"all", "server", "agent"})
# The node actors: a workstation's, a remote agent's, and a server's with --also-node.
NODE = frozenset({"all", "agent"})

REGISTRY: tuple[ActorSpec, ...] = (
    # control first: it answers 503 not_ready while the rest start, and stops last.
    ActorSpec("control", _run_of("control"), EVERY_ROLE, graceful_stop=True, stop_grace=5.0, stoppable=False),
    # A remote agent's link to its server: up before the runner, whose hello it carries, and
    # down after it, so that the runner's goodbye still goes out.
    ActorSpec("uplink", _run_of("uplink"), frozenset({"agent"}), graceful_stop=True, stop_grace=3.0),
    ActorSpec("store", _run_of("store"), SERVER, depends_on=(), graceful_stop=True, stop_grace=10.0,
              inbox_size=1024),
    ActorSpec("scheduler", _run_of("scheduler"), SERVER, depends_on=("store",)),
    # The node actors talk to the server through a node link: in memory where the server is
    # (role all, or server --also-node), the uplink's WebSocket in role agent. A dependency
    # on an actor the role does not run (the store, in role agent) is dropped.
    ActorSpec("logs", _run_of("logs"), NODE, depends_on=("store",), inbox_size=1024),
    ActorSpec("runner", _run_of("runner"), NODE, depends_on=("store", "scheduler", "logs", "uplink"), inbox_size=256),
    ActorSpec("rollup", _run_of("rollup"), SERVER, depends_on=("store",)),
    # Node telemetry reaches the server through the same node link as the runner's reports.
    ActorSpec("monitor", _run_of("monitor"), NODE, depends_on=("runner",)),
    # Checkpoints jobs save on their own, found in their folders and registered through the link.
    ActorSpec("ckptwatch", _run_of("ckptwatch"), NODE, depends_on=("runner",)),
    # TensorBoard event files jobs write, read as they grow; their scalars become the runs' points.
    ActorSpec("tbtail", _run_of("tbtail"), NODE, depends_on=("runner",)),
    # Notifications from the outbox the events' trigger fills (0013_events_policies.sql).
    ActorSpec("webhooks", _run_of("webhooks"), SERVER, depends_on=("store",)),
    # The jobs' failure policies, once per trigger (policy_actions, 0013_events_policies.sql).
    ActorSpec("policies", _run_of("policies"), SERVER, depends_on=("store", "scheduler")),
    # The time-based event rules (RUN_STALLED) over running jobs; the metric rules run at ingest.
    ActorSpec("detector", _run_of("detector"), SERVER, depends_on=("store",)),
    ActorSpec("http", _run_of("http"), SERVER, depends_on=("store",), graceful_stop=True, stop_grace=5.0),
)
# Their names: the actors that share the node context (gpuplaned.daemon) and never import the server.
NODE_ACTORS = tuple(spec.name for spec in REGISTRY if spec.roles == NODE)


def specs_for_role(role: str, *, http: bool = True, also_node: bool = False) -> list[ActorSpec]:
    """The actors a daemon of ``role`` runs (``http``: False when the HTTP front is off;
    ``also_node``: a server that runs the node actors too, as role all does), each without
    the dependencies on actors that it does not run.

    Raises:
        ValueError: a dependency names no actor at all.
    """
    known = {spec.name for spec in REGISTRY}
    chosen = [spec for spec in REGISTRY
              if (role in spec.roles or (also_node and role == "server" and spec.roles == NODE))
              and (http or spec.name != "http")]
    names = {spec.name for spec in chosen}
    for spec in chosen:
        for dep in spec.depends_on:
            if dep not in known:
                raise ValueError(f"actor {spec.name!r} depends on unknown actor {dep!r}")
    for spec in chosen:  # imported now, before the event loop runs: a run then only looks its module up
        importlib.import_module(f"gpuplaned.actors.{spec.name}")
    return [attrs.evolve(spec, depends_on=tuple(dep for dep in spec.depends_on if dep in names)) for spec in chosen]
