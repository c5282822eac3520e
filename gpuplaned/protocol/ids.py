"""Identifiers: ULIDs with a type prefix (``job_01JD...``), sortable by creation time."""

from __future__ import annotations

import os
import threading
import time

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
PREFIXES = ("job", "run", "nd", "ev", "slot", "tok", "prj", "exp", "ck", "art", "eval", "wh", "swp")


_RANDOM = (1 << 80) - 1
_last = [0, 0]  # the last ULID made here: [ms, its random part]
_lock = threading.Lock()  # ids are made on the event loop and on store and reader threads


def ulid(now_ms: int | None = None) -> str:
    """A 26-character ULID: 48 bits of milliseconds, 80 random bits, Crockford base32.

    Monotonic within this process on its own clock, as the ULID spec's monotonic variant: an
    id made in the same millisecond as the one before (or with the clock set back) is that one
    plus 1, so ids made one after another sort in the order they were made (a batch's jobs,
    which share their time, queue in the order they came in: the queue breaks ties by id).
    An id for a given ``now_ms`` carries that time, and random bits.
    """
    if now_ms is not None:
        return _encode((now_ms << 80) | int.from_bytes(os.urandom(10), "big"))
    ms = int(time.time() * 1000)
    with _lock:
        last_ms, last_random = _last
        if ms <= last_ms and last_random < _RANDOM:
            ms, random = last_ms, last_random + 1
        else:
            ms, random = max(ms, last_ms + 1), int.from_bytes(os.urandom(10), "big")
        _last[:] = [ms, random]
    return _encode((ms << 80) | random)


def _encode(value: int) -> str:
    chars = []
    for _ in range(26):
        chars.append(_CROCKFORD[value & 31])
        value >>= 5
    return "".join(reversed(chars))


def new_id(prefix: str) -> str:
    if prefix not in PREFIXES:
        raise ValueError(f"unknown id prefix {prefix!r}")
    return f"{prefix}_{ulid()}"


def uuid7(now_ms: int | None = None) -> str:
    """A UUIDv7 (RFC 9562): 48 bits of milliseconds first, so session ids sort by creation."""
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | (rand >> 68 & 0xFFF) << 64 | 0b10 << 62 | rand & ((1 << 62) - 1)
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
