"""A job's checkpoint policies as its checkpoints arrive: in a task of its own, one pass at a
time per run; arrivals while a pass runs are gathered for one more pass, not one each; the
evaluate policy goes first, with the new checkpoints, then retention; a part that fails is
logged and the next arrival runs again; events that register no job's checkpoint schedule
nothing."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from gpuplaned.service.passes import checkpoint_arrival
from gpuplaned.service.passes.checkpoint_arrival import checkpoints_arrived
from gpuplaned.store.event_rows import EventRow


class _Daemon:
    """Stands for the daemon context: the policies are replaced, so nothing of it is used."""


SHARED = _Daemon()


@pytest.fixture(autouse=True)
def evaluated(monkeypatch):
    """What the evaluate policy was given, in order (its own effect: tests/e2e/test_e2e_evaluations.py)."""
    seen: list[tuple[str, list[str]]] = []

    async def apply_policy(shared, job_id, new):
        seen.append((job_id, list(new)))

    monkeypatch.setattr(checkpoint_arrival.evaluations, "apply_policy", apply_policy)
    return seen


def _created(run_id: str, job_id: str | None = "job_a", kind: str = "CHECKPOINT_CREATED",
             checkpoint_id: str = "ck_1") -> EventRow:
    return EventRow("ev_1", 1, kind, "info", None, job_id, run_id, 10, "checkpoint", {"checkpoint_id": checkpoint_id})


async def test_arrivals_during_a_pass_ask_for_one_more(monkeypatch, evaluated):
    passes, gate = [], trio.Event()

    async def apply_policy(shared, job_id, run_id):
        passes.append((job_id, run_id))
        await gate.wait()

    monkeypatch.setattr(checkpoint_arrival.retention, "apply_policy", apply_policy)
    checkpoints_arrived(SHARED, [_created("run_a", checkpoint_id="ck_0")])
    await trio.testing.wait_all_tasks_blocked()  # its pass has started
    for n in (1, 2):
        checkpoints_arrived(SHARED, [_created("run_a", checkpoint_id=f"ck_{n}")])
    checkpoints_arrived(SHARED, [_created("run_b"), _created("run_c", job_id=None), _created("run_d", kind="USER_EVENT")])
    await trio.testing.wait_all_tasks_blocked()
    assert sorted(passes) == [("job_a", "run_a"), ("job_a", "run_b")]  # one pass each so far
    gate.set()
    await trio.testing.wait_all_tasks_blocked()
    assert sorted(passes) == [("job_a", "run_a"), ("job_a", "run_a"), ("job_a", "run_b")]  # run_a: one more
    # Each checkpoint is offered to the evaluate policy once, before the retention pass that sees it.
    assert sorted(evaluated) == [("job_a", ["ck_0"]), ("job_a", ["ck_1"]), ("job_a", ["ck_1", "ck_2"])]
    assert checkpoint_arrival._pending_of.of(SHARED) == {}


async def test_the_evaluate_policy_runs_before_retention(monkeypatch, evaluated):
    order = []

    async def retain(shared, job_id, run_id):
        order.append(("retention", list(evaluated)))

    monkeypatch.setattr(checkpoint_arrival.retention, "apply_policy", retain)
    checkpoints_arrived(SHARED, [_created("run_a", checkpoint_id="ck_9")])
    await trio.testing.wait_all_tasks_blocked()
    assert order == [("retention", [("job_a", ["ck_9"])])]


async def test_a_failed_pass_is_logged_and_the_next_arrival_runs_again(monkeypatch, caplog):
    passes = []

    async def apply_policy(shared, job_id, run_id):
        passes.append(run_id)
        raise RuntimeError("store gone")

    monkeypatch.setattr(checkpoint_arrival.retention, "apply_policy", apply_policy)
    checkpoints_arrived(SHARED, [_created("run_a")])
    await trio.testing.wait_all_tasks_blocked()
    checkpoints_arrived(SHARED, [_created("run_a")])
    await trio.testing.wait_all_tasks_blocked()
    assert passes == ["run_a", "run_a"]
    assert "retention of run run_a (job job_a) failed" in caplog.text
