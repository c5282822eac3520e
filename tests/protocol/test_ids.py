"""Ids sort in the order this process made them (the ULID spec's monotonic variant): a batch's
jobs share their time, and the queue breaks ties by id."""

from __future__ import annotations

import time

from gpuplaned.protocol import ids


def test_ids_made_one_after_another_sort_in_that_order():
    made = [ids.new_id("job") for _ in range(20_000)]  # thousands a millisecond
    assert made == sorted(made) and len(set(made)) == len(made)


def test_a_clock_set_back_does_not_break_the_order(monkeypatch):
    first = ids.new_id("job")
    monkeypatch.setattr(time, "time", lambda: 1_000_000.0)  # 1970: far behind the last id
    later = [ids.new_id("job") for _ in range(3)]
    assert [first, *later] == sorted([first, *later])


def test_an_id_for_a_given_time_carries_that_time():
    made = ids.ulid(1_700_000_000_000)
    value = 0
    for char in made:
        value = value * 32 + "0123456789ABCDEFGHJKMNPQRSTVWXYZ".index(char)
    assert value >> 80 == 1_700_000_000_000
