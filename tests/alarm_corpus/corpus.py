"""The alarm corpus: training curves the detector's rules are judged on
(``bench/alarm_bench.py``, ``tests/domain/test_alarm_corpus.py``).

- healthy: real PyTorch runs (``real_runs.json``, recorded by ``record.py``: the quick
  start at five seeds, a noisy twin under warm-up, warm restarts and step decay, half of
  them through TensorBoard files) and generated curves (seeded numpy): minibatch noise from
  gentle to heavy-tailed, warm-up transients, warm restarts, step decay, an LLM-like power
  law, a plateau, a loss near zero, a negative loss, values rounded to two decimals,
  evaluation losses that wobble without a trend;
- troubled: spikes planted in healthy curves, real ones too (one extreme point, a burst,
  a jump to a plateau), divergence (generated, and a real one that ends in infinity),
  NaN, overfitting (generated, and the quick start on 100 samples), a stall.

Every troubled curve names its faults: the rule that should raise and the steps its event
may fall in. The same seeds give the same curves.
"""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import numpy as np

REAL = Path(__file__).resolve().parent / "real_runs.json"
STEP_MS = 100  # a generated curve's time between steps
MINUTE = 60_000


@attrs.frozen
class Fault:
    rule: str
    first: int  # the event's step must fall in [first, last]
    last: int


@attrs.frozen
class Curve:
    name: str
    metrics: dict[str, tuple[list[int], list[float]]]  # name -> (steps, values)
    faults: tuple[Fault, ...] = ()
    ms: list[int] | None = None  # the training loss's points' times (None: STEP_MS apart)

    @property
    def healthy(self) -> bool:
        return not self.faults

    def times(self) -> list[int]:
        steps = self.metrics["loss"][0]
        return self.ms if self.ms is not None else [s * STEP_MS for s in steps]


def _expand(spec: dict) -> tuple[list[int], list[float]]:
    values = [float(v) for v in spec["values"]]
    steps = spec["steps"]
    if len(steps) == 2 and len(values) != 2:
        steps = [steps[0] + k * steps[1] for k in range(len(values))]
    return list(steps), values


def real() -> list[Curve]:
    runs = json.loads(REAL.read_text())["runs"]
    out = []
    for run in runs:
        metrics = {name: _expand(spec) for name, spec in run["metrics"].items()}
        gaps = run["metrics"]["loss"].get("ms")
        ms = list(np.cumsum(gaps).tolist()) if gaps else None
        faults = tuple(Fault(f["rule"], *f["steps"]) for f in run["faults"])
        out.append(Curve(run["name"], metrics, faults, ms))
    return out


# Generated curves -----------------------------------------------------------------------

def _steps(n: int) -> list[int]:
    return list(range(1, n + 1))


def _evals(rng: np.random.Generator, train: np.ndarray, every: int, noise: float,
           gap: float = 0.1) -> tuple[list[int], list[float]]:
    """An evaluation loss every ``every`` steps: the train loss's smooth level plus a gap, with
    ``noise`` relative wobble."""
    steps = list(range(every, len(train) + 1, every))
    level = np.array([np.median(train[max(0, s - 50):s]) for s in steps])
    return steps, (level * (1 + gap) * (1 + noise * rng.standard_normal(len(steps)))).tolist()


def _curve(name: str, loss: np.ndarray, faults=(), evals=None, ms=None) -> Curve:
    metrics = {"loss": (_steps(len(loss)), loss.tolist())}
    if evals is not None:
        metrics["val/loss"] = evals
    return Curve(name, metrics, tuple(faults), ms)


def noisy_decay(seed: int, n: int = 5000, noise: float = 0.05, floor: float = 0.1) -> np.ndarray:
    """Exponential decay to ``floor`` with relative Gaussian minibatch noise."""
    rng = np.random.default_rng(seed)
    s = np.arange(n)
    level = floor + 2.0 * np.exp(-s / 800)
    return level * (1 + noise * rng.standard_normal(n))


def heavy_tailed(seed: int, n: int = 5000) -> np.ndarray:
    """Cross entropy over small batches: log-normal noise, and one batch in a hundred twice as hard."""
    rng = np.random.default_rng(seed)
    s = np.arange(n)
    level = 0.05 + 1.05 * np.exp(-s / 600)
    hard = np.where(rng.random(n) < 0.01, 2.0 + rng.random(n), 1.0)
    return level * np.exp(0.35 * rng.standard_normal(n)) * hard


def warmup(seed: int, n: int = 5000) -> np.ndarray:
    """A linear warm-up's transients: a wild first few dozen steps, the loss rising by a
    third as the learning rate peaks (step 300-500), then the usual fall."""
    rng = np.random.default_rng(seed)
    s = np.arange(n)
    level = 0.3 + 2.0 * np.exp(-s / 1500)
    level = level * (1 + 0.35 * np.exp(-((s - 400) / 80) ** 2))  # the bump at the peak
    level[:40] *= 1 + 3 * rng.random(40) * np.exp(-s[:40] / 10)  # the first steps
    return level * (1 + 0.04 * rng.standard_normal(n))


def restarts(seed: int, n: int = 6000, cycle: int = 1000, kick: float = 2.5) -> np.ndarray:
    """Cosine with warm restarts (SGDR): at each restart the learning rate leaps back to its
    peak and the loss climbs to about ``kick`` times its level within a few dozen steps (the
    weights move at the learning rate's pace), then falls through the cycle."""
    rng = np.random.default_rng(seed)
    s = np.arange(n)
    base = 0.2 + 1.5 * np.exp(-s / 2000)
    into = s % cycle
    jump = np.where(s >= cycle, (kick - 1) * 1.6 * np.exp(-into / 80) * (1 - np.exp(-into / 12)), 0.0)
    return base * (1 + jump) * (1 + 0.04 * rng.standard_normal(n))


def step_decay(seed: int, n: int = 6000) -> np.ndarray:
    """Step decay: the loss drops by a third at each learning-rate cut (steps 2000, 4000)."""
    rng = np.random.default_rng(seed)
    s = np.arange(n)
    level = (0.4 + 1.5 * np.exp(-s / 700)) * np.where(s >= 2000, 0.67, 1.0) * np.where(s >= 4000, 0.67, 1.0)
    return level * (1 + 0.06 * rng.standard_normal(n))


def llm(seed: int, n: int = 20000) -> np.ndarray:
    """A language model's power law, with small noise."""
    rng = np.random.default_rng(seed)
    s = np.arange(n)
    return 1.8 + 9.0 * (s + 50.0) ** -0.35 + 0.03 * rng.standard_normal(n)


def near_zero(seed: int, n: int = 4000) -> np.ndarray:
    """A loss falling to ~1e-3, whose minibatch noise is as large as the loss."""
    rng = np.random.default_rng(seed)
    s = np.arange(n)
    level = 1e-3 + np.exp(-s / 300)
    return level * np.exp(0.6 * rng.standard_normal(n))


def plateau(seed: int, n: int = 8000) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return 0.69 + 0.02 * rng.standard_normal(n)


def negative(seed: int, n: int = 5000) -> np.ndarray:
    """A negative log-likelihood of a density model (it goes below zero)."""
    rng = np.random.default_rng(seed)
    s = np.arange(n)
    return -3.0 + 5.0 * np.exp(-s / 1000) + 0.08 * rng.standard_normal(n)


def rounded(seed: int, n: int = 4000) -> np.ndarray:
    """A loss logged with two decimals: long runs of equal values."""
    return np.round(noisy_decay(seed, n, noise=0.03), 2)


def healthy_generated() -> list[Curve]:
    out = []
    for seed in range(3):
        rng = np.random.default_rng(100 + seed)
        for label, loss in [("noisy decay 5%", noisy_decay(seed)), ("noisy decay 20%", noisy_decay(seed, noise=0.2)),
                            ("heavy-tailed minibatches", heavy_tailed(seed)), ("warm-up transients", warmup(seed)),
                            ("warm restarts", restarts(seed)),
                            ("warm restarts, x4", restarts(seed, kick=4.0, cycle=1500)),
                            ("step decay", step_decay(seed)), ("LLM power law", llm(seed)),
                            ("loss near zero", near_zero(seed)), ("plateau", plateau(seed)),
                            ("negative NLL", negative(seed)), ("two decimals", rounded(seed))]:
            evals = _evals(rng, loss, 100, noise=0.04) if label not in ("negative NLL",) else None
            out.append(_curve(f"{label}, seed {seed}", loss, evals=evals))
        # An evaluation loss that wobbles by up to a fifth around a slow fall: no trend up.
        loss = noisy_decay(seed)
        steps, values = _evals(rng, loss, 200, noise=0.0)
        wobble = 1 + 0.12 * np.sin(np.arange(len(values)) * 1.3 + seed) + 0.05 * rng.standard_normal(len(values))
        wobbling = (steps, (np.array(values) * wobble).tolist())
        out.append(_curve(f"wobbling eval loss, seed {seed}", loss, evals=wobbling))
        # Pauses: a checkpoint every 1000 steps takes 3 minutes, an evaluation 5.
        ms = (np.arange(1, 5001) * 300 + (np.arange(1, 5001) // 1000) * 3 * MINUTE
              + (np.arange(1, 5001) // 2500) * 5 * MINUTE).tolist()
        out.append(_curve(f"pauses to checkpoint and evaluate, seed {seed}", noisy_decay(seed + 10), ms=ms))
    return out


# Faults ---------------------------------------------------------------------------------

def _spike(loss: np.ndarray, at: int, factor: float, width: int = 1) -> np.ndarray:
    out = loss.copy()
    out[at:at + width] = out[at:at + width] * factor
    return out


def _diverge(loss: np.ndarray, at: int, every: float) -> np.ndarray:
    """From ``at`` on the loss grows e-fold every ``every`` steps."""
    out = loss.copy()
    k = np.arange(len(loss) - at)
    out[at:] = out[at:] * np.exp(k / every)
    return out


def _step_of(at: int) -> int:
    return at + 1  # index -> step (generated steps start at 1)


def troubled_generated(real_curves: list[Curve]) -> list[Curve]:
    out = []
    bases = {"noisy decay 5%": noisy_decay(7), "noisy decay 20%": noisy_decay(8, noise=0.2),
             "heavy-tailed minibatches": heavy_tailed(9), "LLM power law": llm(10, n=8000),
             "warm restarts": restarts(11), "loss near zero": near_zero(12)}
    # A plateau well above the noise: 6 MADs of it at least (20% noise: its MAD is 13%).
    plateau = {"noisy decay 5%": 1.6, "noisy decay 20%": 2.5, "heavy-tailed minibatches": 4.0, "LLM power law": 1.6,
               "warm restarts": 1.6, "loss near zero": 8.0}
    for label, base in bases.items():
        heavy = label in ("heavy-tailed minibatches", "loss near zero")
        for at, fault, loss in [
                (3000, "one-point spike" + (" x100" if heavy else " x5"), _spike(base, 3000, 100.0 if heavy else 5.0)),
                (2500, "burst of 40 steps", _spike(base, 2500, 6.0 if heavy else 2.5, width=40)),
                (3500, "jump to a plateau for 200 steps", _spike(base, 3500, plateau[label], width=200)),
                (2000, "divergence", _diverge(base, 2000, 150))]:
            out.append(_curve(f"{label}: {fault}", loss, [Fault("LOSS_SPIKE", _step_of(at), _step_of(at) + 300)]))
    for label, base in [("noisy decay 5%", noisy_decay(13)), ("LLM power law", llm(14, n=6000))]:
        with_nan = base.copy()
        with_nan[2500:] = np.nan
        out.append(_curve(f"{label}: NaN from step 2501", with_nan, [Fault("LOSS_NAN", 2501, 2501)]))
        with_inf = base.copy()
        with_inf[1800] = np.inf
        out.append(_curve(f"{label}: one infinity", with_inf, [Fault("LOSS_NAN", 1801, 1801)]))
    rng = np.random.default_rng(15)
    for seed, rise in enumerate((0.3, 0.6)):
        loss = noisy_decay(16 + seed, n=6000)
        steps = list(range(100, 6001, 100))
        k = np.arange(len(steps))
        u = 0.5 + 1.0 * np.exp(-k / 8)  # falls to its best around step 2000, then climbs
        u = u + rise * 0.5 * np.clip((k - 20) / 40, 0, None)
        values = (u * (1 + 0.02 * rng.standard_normal(len(steps)))).tolist()
        out.append(_curve(f"overfitting: eval loss up {rise:.0%} from its best", loss,
                          [Fault("OVERFITTING_SUSPECTED", 2500, 6000)], evals=(steps, values)))
    ms = (np.arange(1, 5001) * 300 + np.where(np.arange(1, 5001) > 3000, 40 * MINUTE, 0)).tolist()
    out.append(_curve("stall: silent 40 minutes after step 3000", noisy_decay(17), [Fault("RUN_STALLED", 3000, 3001)],
                      ms=ms))
    # Spikes planted in real runs.
    for curve in real_curves:
        if not curve.healthy or "seed 1" not in curve.name and "seed 4" not in curve.name:
            continue
        steps, values = curve.metrics["loss"]
        loss = np.array(values)
        at = len(loss) * 3 // 4
        for fault, planted in [("one-point spike x100", _spike(loss, at, 100.0)),
                               ("burst of 40 steps", _spike(loss, at, 5.0, width=40)),
                               ("divergence", _diverge(loss, at, 100))]:
            metrics = dict(curve.metrics, loss=(steps, planted.tolist()))
            out.append(Curve(f"{curve.name}: {fault}", metrics, (Fault("LOSS_SPIKE", steps[at], steps[at] + 300),),
                             curve.ms))
    return out


def load() -> list[Curve]:
    """Every curve, the healthy first."""
    recorded = real()
    curves = recorded + healthy_generated() + troubled_generated(recorded)
    return sorted(curves, key=lambda c: not c.healthy)


if __name__ == "__main__":
    for curve in load():
        print(("healthy " if curve.healthy else "troubled") + f"  {curve.name}",
              {n: len(s) for n, (s, _v) in curve.metrics.items()})
