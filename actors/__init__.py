"""The actors, one module each, and REGISTRY: the only place that lists actors, roles and dependencies."""

from __future__ import annotations

from gpuplaned.actors import control, store
from gpuplaned.runtime.spec import ActorSpec

SERVER = frozenset({"all", "server"})
EVERY_ROLE = frozenset({"all", "server", "agent"})

REGISTRY: tuple[ActorSpec, ...] = (
    # control first: it answers 503 not_ready while the rest start, and stops last.
    ActorSpec("control", control.run, EVERY_ROLE, graceful_stop=True, stop_grace=5.0, stoppable=False),
    ActorSpec("store", store.run, SERVER, depends_on=(), graceful_stop=True, stop_grace=10.0,
              inbox_size=1024),
)


def specs_for_role(role: str) -> list[ActorSpec]:
    return [spec for spec in REGISTRY if role in spec.roles]
