"""Groups and the queue's pause, pure (issue 31 item 2, pueue-style): what holds a queued job
back before the scheduler looks for a slot for it.

- ``queue pause`` holds every queued job ("queue paused"); running jobs go on.
- ``group pause NAME`` holds the group's queued jobs ("group NAME paused"); its running jobs go on.
- A group with a parallel limit K runs at most K jobs at once ("group NAME: K of K running");
  jobs on a node count (DISPATCHING, RUNNING, LOST: they hold their slots).
- A job in no group (the default) has no limit.
- A sweep's trials (issue 31 item 3) are held the same way by their sweep: "sweep NAME paused",
  and "sweep max-parallel K reached" while K of its trials are on a node (Slurm's ``%K``). Not
  the limit on a pooled node: Slurm's array throttle holds the trials there (``queue.place``).

A held job books no slot and reserves no node, so the jobs behind it in the queue may run.
The store reads the state (``gpuplaned.store.group_rows.holds``); ``gpuplaned.domain.queue.place``
applies it, counting the jobs it places in this pass against their group's limit.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import attrs

from gpuplaned.protocol.group_wire import GROUP_MESSAGE, GROUP_PATTERN

GROUP_NAME = re.compile(GROUP_PATTERN)
QUEUE_PAUSED = "queue paused"


@attrs.frozen
class Group:
    name: str
    parallel: int | None = None  # None: no limit
    paused: bool = False
    running: int = 0  # its jobs on a node now


@attrs.frozen
class SweepHold:
    """A sweep that holds its trials back: paused, or with a parallel limit."""

    name: str
    paused: bool = False
    max_parallel: int | None = None  # None: no limit
    running: int = 0  # its trials on a node now


@attrs.frozen
class Holds:
    """What holds queued jobs back in one pass: the queue's pause, each named group, and each
    sweep paused or limited (by id)."""

    queue_paused: bool = False
    groups: Mapping[str, Group] = attrs.field(factory=dict)
    sweeps: Mapping[str, SweepHold] = attrs.field(factory=dict)

    def settled(self, pooled_room: bool = False) -> dict[str, str]:
        """Each sweep (by id) that holds every trial of it for a whole pass, with the reason it
        gives: paused, or max-parallel trials on a node already (a pass places none of it then;
        unless ``pooled_room``: a pooled node with a free job slot takes trials past the limit).
        A trial whose stored reason is that one already has nothing to learn from the pass, so the
        store leaves it out of the queue read: a long held sweep costs a pass nothing, and cannot
        hide the jobs queued behind it past the read's limit."""
        if self.queue_paused:
            return {}
        out = {}
        for sweep_id, hold in self.sweeps.items():
            if hold.paused:
                out[sweep_id] = sweep_paused(hold.name)
            elif hold.max_parallel is not None and hold.running >= hold.max_parallel and not pooled_room:
                out[sweep_id] = sweep_full(hold.max_parallel)
        return out


def sweep_paused(name: str) -> str:
    return f"sweep {name} paused"


def sweep_full(max_parallel: int) -> str:
    return f"sweep max-parallel {max_parallel} reached"


def name_problem(name: str) -> str | None:
    """Why ``name`` is no group name (None: it is one)."""
    if GROUP_NAME.match(name):
        return None
    return f"{name!r} is not a group name: it {GROUP_MESSAGE}"


class GroupGate:
    """One pass's view of the holds: why a job is held, and the jobs placed so far per group."""

    __slots__ = ("holds", "placed", "placed_trials")

    def __init__(self, holds: Holds | None) -> None:
        self.holds = holds or Holds()
        self.placed: dict[str, int] = {}
        self.placed_trials: dict[str, int] = {}

    def held(self, group: str | None, sweep: str | None = None, *, sweep_limit: bool = True) -> str | None:
        """Why a job of ``group`` (a trial of ``sweep``) may not be placed now (None: it may);
        ``sweep_limit=False``: but for its sweep's max-parallel (a pooled node's Slurm holds it)."""
        if self.holds.queue_paused:
            return QUEUE_PAUSED
        trials = self.holds.sweeps.get(sweep) if sweep is not None else None
        if trials is not None and trials.paused:
            return sweep_paused(trials.name)
        found = self.holds.groups.get(group) if group is not None else None
        if not sweep_limit:
            trials = None
        if found is None:
            return self._sweep_full(sweep, trials)
        if found.paused:
            return f"group {found.name} paused"
        if found.parallel is not None:
            running = found.running + self.placed.get(found.name, 0)
            if running >= found.parallel:
                return f"group {found.name}: {running} of {found.parallel} running"
        return self._sweep_full(sweep, trials)

    def _sweep_full(self, sweep: str | None, trials: SweepHold | None) -> str | None:
        if sweep is None or trials is None or trials.max_parallel is None:
            return None
        if trials.running + self.placed_trials.get(sweep, 0) >= trials.max_parallel:
            return sweep_full(trials.max_parallel)
        return None

    def holding(self) -> tuple[frozenset[str], frozenset[str], dict[str, str]]:
        """The groups and sweeps (by id) that hold their jobs now: paused, or at their limit
        with the jobs placed in this pass (a job in none of them is held by nothing but the
        queue's pause); and of those sweeps, each whose reason is every one of its trials' reason
        now (paused; or full while no group holds), with that reason."""
        groups = frozenset(name for name, g in self.holds.groups.items() if g.paused or (
            g.parallel is not None and g.running + self.placed.get(name, 0) >= g.parallel))
        sweeps: set[str] = set()
        said: dict[str, str] = {}
        for sweep, trials in self.holds.sweeps.items():
            if trials.paused:  # said before any group's reason
                sweeps.add(sweep)
                said[sweep] = sweep_paused(trials.name)
            elif trials.max_parallel is not None and (
                    trials.running + self.placed_trials.get(sweep, 0) >= trials.max_parallel):
                sweeps.add(sweep)
                if not groups:  # said after a group's
                    said[sweep] = sweep_full(trials.max_parallel)
        return groups, frozenset(sweeps), said

    def count(self, group: str | None, sweep: str | None = None) -> None:
        """A job of ``group`` (a trial of ``sweep``) was placed in this pass."""
        if group is not None:
            self.placed[group] = self.placed.get(group, 0) + 1
        if sweep is not None and sweep in self.holds.sweeps:
            self.placed_trials[sweep] = self.placed_trials.get(sweep, 0) + 1
