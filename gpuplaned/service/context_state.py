"""``PerContext``: state a service keeps per daemon context, made on first use and gone with it.

A service that caches or coordinates in memory (the token cache, browser sessions, the
checkpoint policies' pending passes) must not share that state between two daemon contexts
in one process (tests run several), nor keep a context alive. The context compares by value
(attrs), so it cannot key a ``WeakKeyDictionary``: entries are keyed by ``id()``, and a weak
reference checks that the id still means that context and drops the entry with it.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class PerContext(Generic[T]):
    def __init__(self, factory: Callable[[], T]) -> None:
        self._factory = factory
        self._entries: dict[int, tuple[weakref.ref[Any], T]] = {}

    def of(self, shared: Any) -> T:
        """This context's state, made by the factory on first use."""
        key = id(shared)
        found = self._entries.get(key)
        if found is not None and found[0]() is shared:
            return found[1]

        def drop(ref: weakref.ref[Any]) -> None:
            if self._entries.get(key, (None,))[0] is ref:
                del self._entries[key]

        state = self._factory()
        self._entries[key] = (weakref.ref(shared, drop), state)
        return state
