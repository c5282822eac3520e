"""The supervisor: starts actors in dependency order, restarts crashed ones, stops them in reverse.

Every actor runs in its own nursery inside its own cancel scope, so an exception stops at
the supervisor boundary: the actor moves to BACKOFF and is started again after a growing
delay, or to FATAL once its restart budget is spent (a crash for want of file descriptors
spends none: ``RestartPolicy``). The daemon and the other actors go on either way.

A failure before the *first* ``started()`` of an actor is different: the daemon is still
booting, so it propagates from ``Supervisor.run`` as ``ActorStartError`` and the daemon
exits with the actor's error instead of looping on a broken configuration.
"""

from __future__ import annotations

import errno
import logging
import time
from collections.abc import Callable
from typing import Any

import attrs
import trio

from gpuplaned.runtime.context import ActorContext
from gpuplaned.runtime.spec import ActorSpec, RestartPolicy, order_by_dependencies
from gpuplaned.runtime.states import ActorState, check_transition

log = logging.getLogger("gpuplaned.supervisor")


class ActorStartError(Exception):
    """An actor failed before it first became ready."""

    def __init__(self, name: str, error: BaseException) -> None:
        super().__init__(f"actor {name!r} failed to start: {describe_error(error)}")
        self.name = name
        self.error = error


class UnknownActor(KeyError):
    pass


class ActorNotStoppable(Exception):
    pass


def describe_error(error: BaseException) -> str:
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


_SHORTAGE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE})  # out of file descriptors: the process's, the system's


def is_shortage(error: BaseException | None, depth: int = 0) -> bool:
    """Whether ``error``, or one it holds or was raised from, is running out of file descriptors."""
    if error is None or depth > 10:
        return False
    if isinstance(error, OSError) and error.errno in _SHORTAGE_ERRNOS:
        return True
    if isinstance(error, BaseExceptionGroup) and any(is_shortage(e, depth + 1) for e in error.exceptions):
        return True
    return is_shortage(error.__cause__ or error.__context__, depth + 1)


def unwrap_error(error: BaseException) -> BaseException:
    """The single leaf of a chain of one-member exception groups, else the group itself."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


@attrs.frozen
class ActorSnapshot:
    name: str
    state: ActorState
    uptime_s: float
    restarts: int
    last_error: str | None
    last_error_at: float | None  # wall clock, seconds
    depends_on: tuple[str, ...]
    stats: Any  # the handle's statistics(), or None


class _Child:
    """Supervisor-side bookkeeping for one actor."""

    def __init__(self, spec: ActorSpec, inbox_send: trio.MemorySendChannel[Any],
                 inbox_receive: trio.MemoryReceiveChannel[Any]) -> None:
        self.spec = spec
        self.inbox_send = inbox_send
        self.inbox_receive = inbox_receive
        self.policy = RestartPolicy(spec)
        self.state = ActorState.STOPPED
        self.restarts = 0
        self.last_error: str | None = None
        self.last_error_at: float | None = None
        self.started_at: float | None = None  # trio clock
        self.handle: Any = None
        self.ctx: ActorContext | None = None
        self.scope: trio.CancelScope | None = None
        self.finished = trio.Event()  # set when the current incarnation has ended
        self.settled = trio.Event()  # set when a start attempt got to started() or ended
        self.idle = trio.Event()  # set while the keeper waits for a start request
        self.start_requested = trio.Event()
        self.stop_flag = False

    def transition(self, new: ActorState, why: str = "") -> None:
        check_transition(self.state, new)
        log.info("actor %s: %s -> %s%s", self.spec.name, self.state.value, new.value,
                 f" ({why})" if why else "")
        self.state = new


class Supervisor:
    """Runs a fixed set of actors. Use ``await nursery.start(supervisor.run)``."""

    def __init__(self, specs: list[ActorSpec], shared: Any = None,
                 on_started: Callable[[str], None] | None = None) -> None:
        """Args:
            specs: the actors to run; started in dependency order, else in the given order.
            shared: handed to every actor as ``ctx.shared``, but those named in ``shared_for``
                (which may be filled in after construction, once the ports exist).
            on_started: called with an actor's name when it first becomes ready.
        """
        self._on_started = on_started
        self.booted = False
        self._order = order_by_dependencies(list(specs))
        self._children: dict[str, _Child] = {}
        for spec in self._order:
            send, receive = trio.open_memory_channel[Any](spec.inbox_size)
            self._children[spec.name] = _Child(spec, send, receive)
        self.ports = {name: child.inbox_send for name, child in self._children.items()}
        self.shared = shared
        self.shared_for: dict[str, Any] = {}  # actor name -> its own ``ctx.shared``
        self._nursery: trio.Nursery | None = None

    @property
    def names(self) -> list[str]:
        return [spec.name for spec in self._order]

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Start every actor in dependency order; ready once all of them are.

        Raises:
            ActorStartError: an actor failed before its first ``started()``.
        """
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                for spec in self._order:
                    await nursery.start(self._keep, self._children[spec.name])
                    if self._on_started is not None:
                        self._on_started(spec.name)
                self.booted = True
                task_status.started()
        except BaseExceptionGroup as group:
            error = unwrap_error(group)
            if isinstance(error, ActorStartError):
                raise error from None
            raise

    # --- queries ---------------------------------------------------------

    def snapshot(self, name: str) -> ActorSnapshot:
        child = self._child(name)
        uptime = 0.0
        if child.state in (ActorState.STARTING, ActorState.RUNNING) and child.started_at is not None:
            uptime = trio.current_time() - child.started_at
        stats = None
        statistics = getattr(child.handle, "statistics", None)
        if callable(statistics) and child.state in (ActorState.STARTING, ActorState.RUNNING):
            stats = statistics()
        return ActorSnapshot(
            name=name,
            state=child.state,
            uptime_s=uptime,
            restarts=child.restarts,
            last_error=child.last_error,
            last_error_at=child.last_error_at,
            depends_on=child.spec.depends_on,
            stats=stats,
        )

    def snapshots(self) -> list[ActorSnapshot]:
        return [self.snapshot(name) for name in self.names]

    def state(self, name: str) -> ActorState:
        """The actor's state (cheap; ``snapshot`` also gathers statistics).

        Raises:
            UnknownActor: no such actor.
        """
        return self._child(name).state

    def handle(self, name: str) -> Any:
        """The value the actor passed to ``started()``, or None while it is not running."""
        return self._child(name).handle

    # --- commands --------------------------------------------------------

    async def start(self, name: str) -> ActorSnapshot:
        """Start a STOPPED, EXITED or FATAL actor (resetting its restart budget).

        Returns once the new incarnation reached ``started()`` or failed; a no-op for an
        actor that is already active.
        """
        child = self._child(name)
        if child.state is ActorState.STOPPING:
            await child.idle.wait()
        if child.state in (ActorState.STOPPED, ActorState.EXITED, ActorState.FATAL):
            child.policy.reset()
            child.settled = trio.Event()
            child.start_requested.set()
            await child.settled.wait()
        return self.snapshot(name)

    async def stop(self, name: str, *, force: bool = False) -> ActorSnapshot:
        """Stop an actor and wait until it has ended.

        A graceful actor gets ``stop_requested`` and ``stop_grace`` seconds to return on its
        own before it is cancelled.

        Raises:
            ActorNotStoppable: the actor serves the API itself (unless ``force``).
        """
        child = self._child(name)
        if not child.spec.stoppable and not force:
            raise ActorNotStoppable(f"actor {name!r} serves this API and cannot be stopped through it")
        if child.state in (ActorState.STARTING, ActorState.RUNNING, ActorState.BACKOFF):
            child.stop_flag = True
            was_backoff = child.state is ActorState.BACKOFF
            child.transition(ActorState.STOPPING, "stop requested")
            if was_backoff:
                assert child.scope is not None
                child.scope.cancel()
            else:
                await self._end_incarnation(child)
        if child.state is ActorState.STOPPING:
            await child.idle.wait()
        return self.snapshot(name)

    async def restart(self, name: str) -> ActorSnapshot:
        await self.stop(name)
        return await self.start(name)

    async def stop_all(self) -> None:
        """Stop every actor in reverse dependency order (leaves first, the store last)."""
        for spec in reversed(self._order):
            await self.stop(spec.name, force=True)

    # --- the keeper ------------------------------------------------------

    def _child(self, name: str) -> _Child:
        try:
            return self._children[name]
        except KeyError:
            raise UnknownActor(name) from None

    async def _end_incarnation(self, child: _Child) -> None:
        if child.spec.graceful_stop and child.ctx is not None:
            child.ctx.stop_requested.set()
            with trio.move_on_after(child.spec.stop_grace):
                await child.finished.wait()
        if child.scope is not None:
            child.scope.cancel()
        await child.finished.wait()

    async def _keep(self, child: _Child, *, task_status: trio.TaskStatus[None]) -> None:
        booted = False

        def on_started() -> None:
            nonlocal booted
            if not booted:
                booted = True
                task_status.started()

        while True:
            error = await self._incarnation(child, on_started)
            if not booted:
                assert error is not None, "an actor ended before it started"
                raise ActorStartError(child.spec.name, error)
            if error is not None:
                child.last_error = describe_error(error)
                child.last_error_at = time.time()
                log.error("actor %s crashed: %s", child.spec.name, child.last_error,
                          exc_info=error if log.isEnabledFor(logging.DEBUG) else None)
            if not child.stop_flag:
                decision = child.policy.on_exit(trio.current_time(), crashed=error is not None,
                                                shortage=is_shortage(error))
                if decision.restart:
                    child.restarts += 1
                    child.transition(ActorState.BACKOFF, f"restart in {decision.delay:g} s")
                    with trio.CancelScope() as child.scope:
                        await trio.sleep(decision.delay)
                    if not child.stop_flag:
                        continue
                elif error is not None:
                    child.transition(ActorState.FATAL, decision.reason)
                else:
                    child.transition(ActorState.EXITED, decision.reason)
            if child.stop_flag:
                child.transition(ActorState.STOPPED)
            child.settled.set()
            await self._wait_for_start(child)

    async def _wait_for_start(self, child: _Child) -> None:
        child.start_requested = trio.Event()
        child.idle.set()
        await child.start_requested.wait()
        child.idle = trio.Event()

    async def _incarnation(self, child: _Child, on_started: Callable[[], None]) -> BaseException | None:
        """Run the actor once; return what it raised (None for a clean return or a stop)."""
        spec = child.spec
        child.stop_flag = False
        child.finished = trio.Event()
        child.ctx = ActorContext(spec.name, child.inbox_receive, self.ports, self.shared_for.get(spec.name, self.shared))
        child.transition(ActorState.STARTING)
        error: BaseException | None = None

        async def run_actor(*, task_status: trio.TaskStatus[Any]) -> None:
            try:
                await spec.run(child.ctx, task_status=task_status)
            finally:
                child.finished.set()

        try:
            with trio.CancelScope() as child.scope:
                async with trio.open_nursery() as nursery:
                    child.handle = await nursery.start(run_actor)
                    child.started_at = trio.current_time()
                    on_started()
                    child.settled.set()
                    with trio.move_on_after(spec.startsecs):
                        await child.finished.wait()
                    if not child.finished.is_set() and child.state is ActorState.STARTING:
                        child.transition(ActorState.RUNNING)
        except Exception as exc:  # noqa: BLE001 - the supervision boundary
            error = unwrap_error(exc)
        finally:
            child.finished.set()
            child.handle = None
            child.settled.set()
        return error

    def cancel(self) -> None:
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()
