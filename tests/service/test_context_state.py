"""PerContext: one state per daemon context, never shared, gone with its context."""

from __future__ import annotations

import gc

import attrs

from gpuplaned.service.context_state import PerContext


@attrs.define
class Context:  # compares by value, like the daemon's
    name: str


def test_each_context_gets_its_own_state_even_when_they_compare_equal():
    table: PerContext[dict[str, int]] = PerContext(dict)
    a, b = Context("same"), Context("same")
    table.of(a)["x"] = 1
    assert table.of(a) == {"x": 1} and table.of(a) is table.of(a)
    assert table.of(b) == {}


def test_the_state_goes_with_its_context():
    table: PerContext[list[int]] = PerContext(list)
    context = Context("gone")
    table.of(context).append(1)
    del context
    gc.collect()
    assert table._entries == {}  # this table's own: no other context used it
    assert table.of(Context("new")) == []  # an id reused by a new context is not the old one's
