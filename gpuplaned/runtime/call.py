"""Request/reply over channels: the gen_server ``call`` of our actors.

A message that wants an answer carries a ``Reply``; the actor resolves it. Callers own
their timeouts: wrap ``call`` in ``trio.fail_after``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

import trio

from gpuplaned.runtime import eager

T = TypeVar("T")
T_contra = TypeVar("T_contra", contravariant=True)


class Answer(Protocol[T_contra]):
    """How an actor answers a message: a ``Reply``, for a caller that waits on it, or another
    with these two (a report nobody waits on: ``service.link.nodes``)."""

    def resolve(self, value: T_contra) -> None: ...

    def fail(self, error: BaseException) -> None: ...


class Reply(Generic[T]):
    """A one-shot answer slot, resolved from the trio thread."""

    def __init__(self) -> None:
        self._done = trio.Event()
        self._value: Any = None
        self._error: BaseException | None = None

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def resolve(self, value: T) -> None:
        if not self._done.is_set():
            self._value = value
            self._done.set()

    def fail(self, error: BaseException) -> None:
        if not self._done.is_set():
            self._error = error
            self._done.set()

    async def wait(self) -> T:
        if not self._done.is_set():  # answered already: no turn of the scheduler
            await self._done.wait()
        if self._error is not None:
            raise self._error
        return self._value

    async def settled(self) -> None:
        """Wait until it is answered, without taking the answer (``wait`` raises a failure)."""
        await self._done.wait()


async def call(port: trio.MemorySendChannel[Any], make_message: Callable[[Reply[T]], Any]) -> T:
    """Send ``make_message(reply)`` to ``port`` and wait for the answer.

    Sent without a turn of the scheduler when the inbox has room (the answer is waited for
    anyway): a job's reports and its scheduling pass each took one more task step for it.
    A caller cancelled before sending sends nothing, as with ``send``."""
    reply: Reply[T] = Reply()
    await eager.send(port, make_message(reply))
    return await reply.wait()
