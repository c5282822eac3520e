"""The sweep corpus: sweeps whose trials early stopping is judged on
(``bench/early_stop_bench.py``, ``tests/domain/test_early_stopping.py``).

Each trial is planted as one of:

- must keep (a stop is a false alarm):
  - ``best``: the trial that ends best (its floor 8-15 % under the good trials', normal pace);
  - ``noisy``: noisy but good: a floor within 5 % of the best's, with a minibatch loss's noise:
    log-normal, three times the others' spread, and one batch in fifty two to three times as
    hard (a heavy upper tail);
  - ``slow``: a slow starter that ends best: its floor 5-15 % under every other trial's, its
    decay 1.5-2 times slower, so it trails the field for the first part of the run;
  - ``real best``: the best of the real PyTorch runs (the alarm corpus' quick start seeds).
- must stop (a miss when it runs to its end):
  - ``worse``: a floor 2.2-4 times the best's (a learning rate far off);
  - ``flat``: never learns (stays near its first loss);
  - ``diverging``: falls a little, then climbs back past its start (too high a learning rate);
  - ``real worse``: the alarm corpus' "noisy twin" runs (a harder task: their loss stays
    10-100 times the quick start's for most of the run).
- neither (counted, not judged): ``good`` (8-15 % worse than the best), ``middle`` (20-60 %
  worse), and the other real quick start seeds.

A sweep runs ``max_parallel`` trials at once in a shuffled order, each at its own pace
(steps per second, 0.7-1.4 times the sweep's), logging every ``every`` steps; a third of
the sweeps report an accuracy to maximise (``1 - loss / 2.5``) instead of a loss. The same
seeds give the same sweeps.
"""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import numpy as np

REAL = Path(__file__).resolve().parent.parent / "alarm_corpus" / "real_runs.json"
KEEP = ("best", "noisy", "slow", "real best")
STOP = ("worse", "flat", "diverging", "real worse")
INIT = 2.3  # a classifier's first loss (ln 10)
SWEEPS = 40


@attrs.frozen
class Planted:
    name: str
    kind: str
    steps: list[int]
    values: list[float]
    pace: float  # steps per second

    @property
    def must(self) -> str | None:
        return "keep" if self.kind in KEEP else "stop" if self.kind in STOP else None


@attrs.frozen
class Sweep:
    name: str
    goal: str
    max_parallel: int
    trials: tuple[Planted, ...]

    @property
    def length(self) -> int:
        return max(t.steps[-1] for t in self.trials)


def _decay(s: np.ndarray, floor: float, tau: float) -> np.ndarray:
    return floor + (INIT - floor) * np.exp(-s / tau)


def generated(seed: int) -> Sweep:
    rng = np.random.default_rng(seed)
    n = int(rng.choice([200, 300, 600]))
    every = int(rng.choice([1, 2, 5]))
    s = np.arange(every, n + 1, every, dtype=float)
    best = float(rng.uniform(0.2, 0.5))
    tau = n * float(rng.uniform(0.06, 0.12))
    with_slow = seed % 2 == 0

    def noise(sd: float, size: int) -> np.ndarray:
        return 1 + sd * rng.standard_normal(size)

    plan: list[tuple[str, np.ndarray]] = []
    plan.append(("best", _decay(s, best, tau * rng.uniform(0.9, 1.1)) * noise(0.05, len(s))))
    for _ in range(2):
        plan.append(("good", _decay(s, best * rng.uniform(1.08, 1.15), tau * rng.uniform(0.9, 1.1)) * noise(0.05, len(s))))
    for _ in range(int(rng.integers(1, 3))):  # minibatch noise: log-normal, one batch in fifty two to three times as hard
        level = _decay(s, best * rng.uniform(1.0, 1.05), tau * rng.uniform(0.9, 1.1))
        hard = np.where(rng.random(len(s)) < 0.02, 2.0 + rng.random(len(s)), 1.0)
        plan.append(("noisy", level * np.exp(0.15 * rng.standard_normal(len(s))) * hard))
    for _ in range(int(rng.integers(3, 5))):
        plan.append(("middle", _decay(s, best * rng.uniform(1.2, 1.6), tau * rng.uniform(0.8, 1.2)) * noise(0.05, len(s))))
    for _ in range(int(rng.integers(2, 4))):
        plan.append(("worse", _decay(s, min(INIT * 0.8, best * rng.uniform(2.2, 4.0)), tau * rng.uniform(0.8, 1.2))
                     * noise(0.05, len(s))))
    plan.append(("flat", INIT * (1 - 0.05 * s / n) * noise(0.05, len(s))))
    turn = n * rng.uniform(0.1, 0.2)
    low = INIT * rng.uniform(0.6, 0.8)
    diverging = np.where(s < turn, INIT - (INIT - low) * s / turn, low * np.exp((s - turn) / (n * 0.25)))
    plan.append(("diverging", diverging * noise(0.05, len(s))))
    if with_slow:  # it ends best: its floor under the best's, which becomes an ordinary "good" trial
        plan[0] = ("good", plan[0][1])
        plan.append(("slow", _decay(s, best * rng.uniform(0.85, 0.95), tau * rng.uniform(1.5, 2.0)) * noise(0.05, len(s))))
    order = rng.permutation(len(plan))
    goal = "max" if seed % 3 == 2 else "min"
    base = float(rng.uniform(2, 20))
    trials = []
    for k, i in enumerate(order):
        kind, loss = plan[i]
        values = (1 - loss / 2.5) if goal == "max" else loss
        trials.append(Planted(f"{kind} #{k}", kind, [int(x) for x in s], [float(v) for v in values],
                              base * float(rng.uniform(0.7, 1.4))))
    max_parallel = int(rng.choice([4, 8, len(trials)]))
    return Sweep(f"generated, seed {seed} ({n} steps, every {every}, {goal}, {max_parallel} at once"
                 f"{', a slow starter' if with_slow else ''})", goal, max_parallel, tuple(trials))


def real(max_parallel: int, every: int = 5) -> Sweep:
    """The alarm corpus' real PyTorch runs as one sweep: the five quick start seeds (noisy
    minibatch losses; the one that ends lowest is the best) and the six noisy twins."""
    runs = json.loads(REAL.read_text())["runs"]
    picked = [r for r in runs if r["name"].startswith(("quick start, seed", "noisy twin, warmup", "noisy twin, sgdr",
                                                       "noisy twin, step"))]
    curves = []
    for run in picked:
        spec = run["metrics"]["loss"]
        values = [float(v) for v in spec["values"]]
        steps = spec["steps"]
        steps = [steps[0] + k * steps[1] for k in range(len(values))] if len(steps) == 2 else steps
        curves.append((run["name"], steps[every - 1::every], values[every - 1::every]))
    quick = [c for c in curves if c[0].startswith("quick")]
    best = min(quick, key=lambda c: min(c[2]))
    trials = []
    for name, steps, values in curves:
        kind = "real best" if name == best[0] else "real quick" if name.startswith("quick") else "real worse"
        trials.append(Planted(name, kind, steps, values, 20.0))
    return Sweep(f"real PyTorch runs, {max_parallel} at once", "min", max_parallel, tuple(trials))


def load() -> list[Sweep]:
    return [generated(seed) for seed in range(SWEEPS)] + [real(11), real(4)]
