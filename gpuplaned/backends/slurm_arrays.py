"""The Slurm backend's sweeps: the trials of a sweep that a pooled node is handed together
become one Slurm array job (issue 32 item 4).

A trial's dispatch carries ``ArrayTask(sweep_id, index, throttle)``. Its start joins the
sweep's open ``_Batch``; the batch stays open until no trial of that sweep has joined for
``window_s`` (one scheduling pass hands a node all of a sweep's trials it may take, one
dispatch after another), then it is submitted as one ``sbatch --array=<indexes>%K``
(``gpuplaned.slurm.arrays``) and every trial's start returns its task, ``A_i``. A trial that
joins after the batch closed opens the sweep's next batch: a second array of the same sweep.

Each member's attempt dir gets ``array.json`` (the array's name, the trial's index, its sweep)
before sbatch: after a restart, the attempt is found by that name, as a single job is by
``gp-<job id>-<attempt>``.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import trio

from gpuplaned.backends.base import AttemptRequest, StartRefused
from gpuplaned.shim.records import write_json_atomic
from gpuplaned.slurm.arrays import ArrayMember, ArraySpec

log = logging.getLogger("gpuplaned.runner")

ARRAY_RECORD = "array.json"  # in a member's attempt dir: which array holds it
Submit = Callable[["ArraySpec"], Awaitable[str]]  # submits the spec, retrying until Slurm answers; its array id


@attrs.frozen
class ArrayRecord:
    """What ``array.json`` says: the array's name, the trial's task index, its sweep."""

    name: str
    index: int
    sweep_id: str


def write_array_record(job_dir: Path, record: ArrayRecord) -> None:
    write_json_atomic(os.fspath(job_dir / ARRAY_RECORD), attrs.asdict(record), sync=True)  # read on another host


def read_array_record(job_dir: Path) -> ArrayRecord | None:
    """The attempt's array (None: it is no array's task)."""
    try:
        with open(job_dir / ARRAY_RECORD) as file:
            found = json.load(file)
        return ArrayRecord(str(found["name"]), int(found["index"]), str(found["sweep_id"]))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{job_dir / ARRAY_RECORD} is not an array record: {error}") from None


@attrs.define
class _Batch:
    """A sweep's trials gathering for one array."""

    sweep_id: str
    throttle: int
    members: list[AttemptRequest] = attrs.field(factory=list)
    joined: trio.Event = attrs.field(factory=trio.Event)  # a member joined since the window began
    done: trio.Event = attrs.field(factory=trio.Event)
    array_id: str | None = None
    refusal: str | None = None


class ArrayGatherer:
    """Gathers each sweep's trials for ``window_s`` of quiet, then submits them as one array.

    Args:
        spec_of: the array of the gathered members (their options, from the backend's config).
        submit: submits it (``SlurmBackend._submit_array``), raising ``StartRefused``.
        nursery: where each batch's window and submission run (the backend's: a trial's own
            start may be cancelled without taking its sweep's array with it).
    """

    def __init__(self, spec_of: Callable[[str, int, list[AttemptRequest]], ArraySpec], submit: Submit,
                 nursery: trio.Nursery, blocking: Callable[..., Awaitable[Any]], window_s: float = 0.1) -> None:
        self.spec_of = spec_of
        self.submit = submit
        self.nursery = nursery
        self.blocking = blocking
        self.window_s = window_s
        self.open: dict[str, _Batch] = {}  # by sweep id: the batch still gathering

    def throttle(self, sweep_id: str, max_parallel: int) -> None:
        """An array of the sweep not yet submitted is submitted with the new limit."""
        batch = self.open.get(sweep_id)
        if batch is not None:
            batch.throttle = max_parallel

    async def join(self, attempt: AttemptRequest) -> str:
        """The array id of the trial's task (its index is its ``ArrayTask.index``).

        Raises:
            StartRefused: the array could not be submitted.
        """
        task = attempt.array
        assert task is not None
        batch = self.open.get(task.sweep_id)
        if batch is None:
            batch = self.open[task.sweep_id] = _Batch(task.sweep_id, task.throttle)
            self.nursery.start_soon(self._gather, batch)
        batch.members.append(attempt)
        batch.joined.set()
        await batch.done.wait()
        if batch.array_id is None:
            raise StartRefused(batch.refusal or "the sweep's array was not submitted")
        return batch.array_id

    async def _gather(self, batch: _Batch) -> None:
        try:
            while True:
                batch.joined = trio.Event()
                with trio.move_on_after(self.window_s):
                    await batch.joined.wait()
                    continue
                break
            del self.open[batch.sweep_id]  # a trial joining from now on opens the next array
            try:
                spec = self.spec_of(batch.sweep_id, batch.throttle, batch.members)
                for member in batch.members:
                    assert member.array is not None
                    await self.blocking(write_array_record, Path(member.spawn.job_dir),
                                        ArrayRecord(spec.name, member.array.index, batch.sweep_id))
                batch.array_id = await self.submit(spec)
                log.info("sweep %s: trials %s are Slurm array %s", batch.sweep_id,
                         ", ".join(str(i) for i in spec.indexes), batch.array_id)
            except StartRefused as refused:
                batch.refusal = refused.message
            except (ValueError, OSError) as error:
                batch.refusal = f"cannot submit the sweep's array to Slurm: {error}"
        finally:
            batch.done.set()


def members_of(batch: list[AttemptRequest], argv_of: Callable[[AttemptRequest], list[str]]) -> list[ArrayMember]:
    """Each gathered trial as its task: its index and its one-shot shim's command."""
    out = []
    for member in batch:
        assert member.array is not None
        out.append(ArrayMember(member.array.index, argv_of(member)))
    return out
