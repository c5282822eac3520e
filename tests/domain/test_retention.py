"""The retention rule, table-driven: the best K and the last K steps kept, the best never lost
(not to HF Trainer's rotation, transformers#39476, nor to Lightning's first-k-for-best-k,
lightning#19844), NaN never best, and everything protected kept with every reason."""

from __future__ import annotations

import math

import pytest

from gpuplaned.domain.retention import BEST, NO_RANKING, NO_STEP, Candidate, choose

NAN = math.nan


def _run(values, steps=None):
    """Candidates ck1.. at steps 100, 200, ... (or ``steps``) with these metric values."""
    steps = steps or [100 * (i + 1) for i in range(len(values))]
    return [Candidate(f"ck{i + 1}", step, value) for i, (step, value) in enumerate(zip(steps, values))]


CASES = [
    # (name, candidates, direction, keep_best, keep_last, deleted)
    ("best and last of a falling loss overlap", _run([5, 4, 3, 2, 1]), "minimize", 1, 1, ["ck1", "ck2", "ck3", "ck4"]),
    # transformers#39476: the best (an early step) falls out of a save_total_limit=2 window; kept.
    ("hf: the early best outlives rotation", _run([0.9, 0.2, 0.5, 0.6, 0.7]), "minimize", 1, 2,
     ["ck1", "ck3"]),
    # lightning#19844: top-k kept the first k saved, not the best k.
    ("lightning: the best k, not the first k", _run([5, 1, 4, 2, 3, 6]), "minimize", 2, 1, ["ck1", "ck3", "ck5"]),
    ("maximize keeps the highest", _run([0.1, 0.9, 0.5, 0.3]), "maximize", 1, 1, ["ck1", "ck3"]),
    # HF PR #11748: rotation deleted the newest instead of the oldest: last means the greatest step,
    # not the last registered.
    ("last is by step, not by registration", _run([2, 3, 1], steps=[300, 100, 200]), "minimize", 0, 1, ["ck2"]),
    ("NaN is never best", _run([NAN, 3, 2, NAN, 4]), "minimize", 1, 1, ["ck1", "ck2", "ck4"]),
    ("infinity is never best", _run([-math.inf, 3, 2, 5]), "minimize", 1, 1, ["ck1", "ck2"]),
    ("ties keep the earliest", _run([2, 1, 1, 3]), "minimize", 1, 1, ["ck1", "ck3"]),
    ("keep_best 0 still keeps the best", _run([1, 2, 3, 4]), "minimize", 0, 1, ["ck2", "ck3"]),
    ("no direction: nothing is deleted while a best is asked for", _run([1, 2, 3]), None, 1, 1, []),
    ("no direction, no best asked for: the last only", _run([1, 2, 3]), None, 0, 1, ["ck1", "ck2"]),
    ("no finite value yet: nothing deleted", _run([NAN, None, NAN]), "minimize", 1, 1, []),
    ("a step's files go together", _run([3, 3, 2, 2, 1, 1], steps=[1, 1, 2, 2, 3, 3]), "minimize", 1, 1,
     ["ck1", "ck2", "ck3", "ck4"]),
    ("more asked than there are", _run([3, 2, 1]), "minimize", 5, 5, []),
    ("an empty run", [], "minimize", 1, 1, []),
]


@pytest.mark.parametrize(("candidates", "direction", "keep_best", "keep_last", "deleted"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_retention_keeps_the_best_and_the_last(candidates, direction, keep_best, keep_last, deleted):
    choice = choose(candidates, direction, keep_best, keep_last)
    assert list(choice.deleted) == deleted
    assert [*choice.kept] == [c.id for c in candidates if c.id not in deleted]  # in the run's order
    assert set(choice.kept) | set(choice.deleted) == {c.id for c in candidates}
    assert not set(choice.kept) & set(choice.deleted)
    assert all(choice.kept.values())  # every kept one says why


def test_every_reason_is_recorded():
    candidates = [Candidate("ck1", 100, 0.1, in_use=("evaluation ev_1 (job job_e) is not finished",)),
                  Candidate("ck2", 200, 0.5, not_ours="imported"),
                  Candidate("ck3", None, None),
                  Candidate("ck4", 300, 0.4, in_use=("job job_r will resume from it",)),
                  Candidate("ck5", 400, 0.3),
                  Candidate("ck6", 500, 0.9),
                  Candidate("ck7", 600, 0.8)]
    choice = choose(candidates, "minimize", 2, 1)
    assert choice.deleted == ("ck6",)
    assert choice.kept == {
        "ck1": (BEST, "in use: evaluation ev_1 (job job_e) is not finished"),
        "ck2": ("not GPUPlane's to delete: imported",),
        "ck3": (NO_STEP,),
        "ck4": ("in use: job job_r will resume from it",),
        "ck5": ("best 2",),
        "ck7": ("last 1",),
    }
    assert choose(candidates[:1], None, 1, 1).kept["ck1"][-1] == NO_RANKING


def test_the_rule_has_no_memory():
    # lightning#5173: top-k state lost on resume left more than k; this rule is given the
    # whole run each time, so a second pass over what the first kept deletes nothing more.
    candidates = _run([5, 1, 4, 2, 3, 6])
    first = choose(candidates, "minimize", 2, 1)
    left = [c for c in candidates if c.id in first.kept]
    assert choose(left, "minimize", 2, 1).deleted == ()
