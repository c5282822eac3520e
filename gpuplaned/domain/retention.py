"""Which of a run's checkpoints retention keeps, and why: a pure rule, no files, no store.

``choose`` is given the run's checkpoints still on disk (oldest step first), each with its
ranking value (the metric at its step), what still uses it, and whether its file is
GPUPlane's to delete at all; it keeps

- the best ``keep_best`` steps by the metric's direction (``run_records.rank_checkpoints``:
  a NaN or infinite value never ranks), and the best one always, even with ``keep_best``
  0: the best is protected by construction, not by a count that a bug can get wrong (HF
  Trainer lost it to rotation, transformers#39476; Lightning kept the first k for the best
  k, lightning#19844);
- the last ``keep_last`` steps; a step's every checkpoint goes together (a model and its
  optimizer state saved at one step are one resume point);
- everything in use (an unfinished evaluation, a resume, another run's row on the same
  file), everything whose file GPUPlane may not delete, and everything without a step
  (its place among the others is unknown);
- everything, when ``keep_best`` asks for a best and none can be told (no direction, or no
  finite value yet): deleting then could lose the best.

The rest is deleted. Each kept checkpoint carries every reason that keeps it.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from gpuplaned.domain.run_records import rank_checkpoints

BEST = "best"  # the run's best checkpoint by the metric
NO_STEP = "no step: its place among the run's checkpoints is unknown"
NO_RANKING = "no best can be told yet (the metric has no direction, or no checkpoint has a finite value)"


@attrs.frozen
class Candidate:
    """One of the run's checkpoints still on disk."""

    id: str
    step: int | None
    value: float | None = None  # the ranking metric at its step
    in_use: tuple[str, ...] = ()  # what still uses it, in words
    not_ours: str | None = None  # why its file is not GPUPlane's to delete


@attrs.frozen
class Choice:
    kept: dict[str, tuple[str, ...]]  # id -> every reason it stays, in the candidates' order
    deleted: tuple[str, ...]  # in the candidates' order


def choose(candidates: Sequence[Candidate], direction: str | None, keep_best: int, keep_last: int) -> Choice:
    """Keep the best ``keep_best`` and the last ``keep_last`` steps and everything protected;
    delete the rest. ``direction``: the ranking metric's ("minimize", "maximize"), None for none."""
    ranked = rank_checkpoints({c.id: c.value for c in candidates if c.step is not None}, direction or "")
    step_of = {c.id: c.step for c in candidates}
    best_steps = _distinct([step_of[ck_id] for ck_id in ranked])[:max(keep_best, 1)]
    last_steps = sorted({c.step for c in candidates if c.step is not None}, reverse=True)[:keep_last]
    keep_all = keep_best > 0 and not ranked
    kept: dict[str, tuple[str, ...]] = {}
    deleted = []
    for c in candidates:
        reasons = []
        if best_steps and c.step == best_steps[0]:
            reasons.append(BEST)
        elif c.step in best_steps:
            reasons.append(f"best {keep_best}")
        if c.step in last_steps:
            reasons.append(f"last {keep_last}")
        if c.step is None:
            reasons.append(NO_STEP)
        reasons += [f"in use: {why}" for why in c.in_use]
        if c.not_ours is not None:
            reasons.append(f"not GPUPlane's to delete: {c.not_ours}")
        if keep_all:
            reasons.append(NO_RANKING)
        if reasons:
            kept[c.id] = tuple(reasons)
        else:
            deleted.append(c.id)
    return Choice(kept, tuple(deleted))


def _distinct(steps: Sequence[int | None]) -> list[int | None]:
    """``steps`` in their order, each once."""
    return list(dict.fromkeys(steps))
