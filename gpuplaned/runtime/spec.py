"""What the supervisor needs to know about an actor, and the pure restart policy."""

from __future__ import annotations

import collections
import enum
from collections.abc import Awaitable, Callable

import attrs


class Restart(enum.Enum):
    PERMANENT = "permanent"  # always restarted, also after a clean return
    TRANSIENT = "transient"  # restarted only after a crash
    TEMPORARY = "temporary"  # never restarted


@attrs.frozen
class ActorSpec:
    """One actor: its entry point and how it is supervised.

    ``run`` is ``async def run(ctx, *, task_status)``; it calls ``task_status.started(handle)``
    once truly ready, where ``handle`` may offer ``statistics()`` for ``gpuplanectl status``.
    """

    name: str
    run: Callable[..., Awaitable[None]]
    roles: frozenset[str]
    depends_on: tuple[str, ...] = ()
    restart: Restart = Restart.PERMANENT
    startsecs: float = 1.0  # uptime before STARTING counts as RUNNING
    max_restarts: int = 5  # restarts allowed within max_seconds before FATAL
    max_seconds: float = 60.0
    backoff_initial: float = 0.5
    backoff_max: float = 30.0
    # Set when the actor watches ctx.stop_requested and returns on its own (drains,
    # answers in-flight requests); otherwise a stop cancels it straight away.
    graceful_stop: bool = False
    stop_grace: float = 5.0
    inbox_size: int = 64
    stoppable: bool = True  # False: the control API refuses to stop it (it is the API)


@attrs.frozen
class RestartDecision:
    restart: bool
    delay: float = 0.0
    reason: str = ""


class RestartPolicy:
    """Backoff and budget bookkeeping for one actor; pure, times are passed in.

    A crash is allowed a restart while fewer than ``max_restarts`` restarts happened within
    the last ``max_seconds``; the delay doubles with each restart in that window.

    A crash for want of file descriptors (``shortage``) is the machine's state, not the
    actor's fault: it spends no budget, so however long the shortage lasts the actor is
    restarted (same doubling delay, its own window) and is back once descriptors are.
    """

    def __init__(self, spec: ActorSpec) -> None:
        self._spec = spec
        self._recent: collections.deque[float] = collections.deque()
        self._shortages: collections.deque[float] = collections.deque()

    def reset(self) -> None:
        self._recent.clear()
        self._shortages.clear()

    def on_exit(self, now: float, *, crashed: bool, shortage: bool = False) -> RestartDecision:
        spec = self._spec
        if spec.restart is Restart.TEMPORARY:
            return RestartDecision(False, reason="temporary actor")
        if spec.restart is Restart.TRANSIENT and not crashed:
            return RestartDecision(False, reason="returned normally")
        window = self._shortages if shortage else self._recent
        while window and now - window[0] > spec.max_seconds:
            window.popleft()
        if not shortage and len(window) >= spec.max_restarts:
            return RestartDecision(
                False,
                reason=f"{len(window)} restarts within {spec.max_seconds:g} s",
            )
        delay = min(spec.backoff_initial * 2 ** len(window), spec.backoff_max)
        window.append(now)
        return RestartDecision(True, delay=delay)


def order_by_dependencies(specs: list[ActorSpec]) -> list[ActorSpec]:
    """Topological order that keeps the given order among independent actors.

    Raises:
        ValueError: an unknown dependency or a cycle.
    """
    by_name = {spec.name: spec for spec in specs}
    ordered: list[ActorSpec] = []
    visiting: set[str] = set()
    done: set[str] = set()

    def visit(spec: ActorSpec, chain: tuple[str, ...]) -> None:
        if spec.name in done:
            return
        if spec.name in visiting:
            raise ValueError("actor dependency cycle: " + " -> ".join(chain + (spec.name,)))
        visiting.add(spec.name)
        for dep in spec.depends_on:
            if dep not in by_name:
                raise ValueError(f"actor {spec.name!r} depends on unknown actor {dep!r}")
            visit(by_name[dep], chain + (spec.name,))
        visiting.discard(spec.name)
        done.add(spec.name)
        ordered.append(spec)

    for spec in specs:
        visit(spec, ())
    return ordered

