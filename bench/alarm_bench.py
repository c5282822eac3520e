"""The detector's rules judged on the alarm corpus (``tests/alarm_corpus``): per rule, the
false alarms per healthy run (goal: 0) and the planted faults found (goal: all).

    .venv/bin/python bench/alarm_bench.py            # the table
    .venv/bin/python bench/alarm_bench.py --verbose  # and every false alarm, stray and miss

Each curve is replayed through the real rules as the ingest and the detector actor run
them (``tests/alarm_corpus/replay.py``), with ``[detector]``'s defaults
(``gpuplaned.config.DetectorConfig``) unless ``--set key=value`` changes one. Also:
``diagnose``'s problem count on each healthy run (its findings of warning or worse).
Exits 1 when a goal is missed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import attrs  # noqa: E402

from alarm_corpus import corpus, replay  # noqa: E402
from gpuplaned.config import DetectorConfig  # noqa: E402
from gpuplaned.domain.diagnosis.curves import Curve as DiagnosisCurve  # noqa: E402
from gpuplaned.domain.diagnosis.run import diagnose_run  # noqa: E402


def diagnose_problems(curve: corpus.Curve) -> list[str]:
    """The claims ``diagnose`` counts as problems on ``curve`` (point by point, as a short
    run's series come)."""
    by_step = {name: DiagnosisCurve.points(steps, values) for name, (steps, values) in curve.metrics.items()}
    report = diagnose_run({"id": "run_corpus", "status": "SUCCEEDED"}, by_step)
    return [f["claim"] for f in report["findings"] if f["severity"] != "info"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--verbose", action="store_true", help="list every false alarm, stray and missed fault")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a [detector] setting for this run (spike_mads=8)")
    args = parser.parse_args()
    changes = {}
    for item in args.set:
        key, _, value = item.partition("=")
        field = attrs.fields_dict(DetectorConfig).get(key)
        if field is None:
            parser.error(f"--set {item}: no [detector] setting {key!r}")
        kind = type(getattr(DetectorConfig(), key))
        changes[key] = value.lower() in ("1", "true", "yes") if kind is bool else kind(value)
    config = attrs.evolve(DetectorConfig(), **changes)
    curves = corpus.load()
    began = time.perf_counter()
    result = replay.score(curves, config)
    took = time.perf_counter() - began
    healthy = [c for c in curves if c.healthy]
    print(f"{len(curves)} curves: {result.healthy_runs} healthy, {len(curves) - result.healthy_runs} troubled "
          f"({sum(len(v) for c in curves for _s, v in c.metrics.values())} points, replayed in {took:.1f} s)")
    print(replay.table(result))
    problems = {c.name: diagnose_problems(c) for c in healthy}
    flagged = sum(len(p) for p in problems.values())
    print(f"{'diagnose: problem(s)':24} {flagged:>12} {flagged / max(1, len(healthy)):>16.2f}")
    if args.verbose:
        for rule, name, step in result.noisy:
            print(f"false alarm  {rule:22} {name} at step {step}")
        for rule, name in result.missed:
            print(f"missed       {rule:22} {name}")
        for rule, name, step in result.astray:
            print(f"stray        {rule:22} {name} at step {step}")
        for name, claims in problems.items():
            for claim in claims:
                print(f"diagnose     {name}: {claim}")
    met = not result.noisy and not result.missed and not flagged
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
