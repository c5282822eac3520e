"""Runs and their metrics: ``gpuplanectl run list``, ``run show ID``, ``run metrics RUN``
(``gpuplanectl.main`` puts the ``run`` noun together).

A run is one attempt of a job, or what a training script opened with the SDK. ``metrics``
prints one line per series: how many points, the last value, min and max, and a sparkline of the series downsampled to the terminal (``GET /api/v1/runs/{id}/metrics``).
"""

from __future__ import annotations

import math
import shutil
import sys
from collections.abc import Mapping, Sequence
from typing import Annotated, Any
from urllib.parse import quote, urlencode

import typer
from gpuplanectl import render
from gpuplanectl.commands import JsonOption, connect, globals_of, reporting

BARS = "▁▂▃▄▅▆▇█"
ASCII_BARS = "_.-=+*#@"
SPARK_WIDTH = 40


def runs(
    ctx: typer.Context,
    job: Annotated[str | None, typer.Option("--job", metavar="ID", help="Only this job's runs (its attempts).")] = None,
    status: Annotated[str | None, typer.Option("--status", metavar="S", help="RUNNING, SUCCEEDED, FAILED, ...")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=10_000, help="At most this many, newest first.")] = 50,
    json_output: JsonOption = False,
) -> None:
    """List runs, newest first: job attempts and SDK runs."""
    g = globals_of(ctx)
    query = {"limit": limit, **({"job_id": job} if job else {}), **({"status": status} if status else {})}
    with reporting(g, json_output):
        found = connect(g).get(f"/api/v1/runs?{urlencode(query)}")
    if json_output:
        render.print_json(found)
    elif found["runs"]:
        print(render.table(("ID", "SOURCE", "STATUS", "JOB", "ATTEMPT", "NAME", "CREATED"),
                           [_run_row(r) for r in found["runs"]]))
    else:
        print("no runs")


def _run_row(run: Mapping[str, Any]) -> tuple[str, ...]:
    return (run["id"], run["source"], run["status"], run["job_id"] or "-",
            str(run["attempt"]) if run["attempt"] is not None else "-", run["name"] or "-",
            render.event_time(run["created_at"]))


def show(
    ctx: typer.Context,
    run_id: Annotated[str, typer.Argument(metavar="ID", help="The run's id.", show_default=False)],
    json_output: JsonOption = False,
) -> None:
    """Show a run and its summary: per metric the latest and best point (by the metric's
    direction), the trend, the primary metric, and warnings (NaN loss, spikes)."""
    g = globals_of(ctx)
    path = quote(run_id, safe="")
    with reporting(g, json_output):
        client = connect(g)
        found = client.get(f"/api/v1/runs/{path}")
        summary = client.get(f"/api/v1/runs/{path}/summary")["summary"]
    run = found["run"]
    if json_output:
        render.print_json({"run": run, "summary": summary})
        return
    print(run_text(run, summary))


def run_text(run: Mapping[str, Any], summary: Mapping[str, Any]) -> str:
    """``run show``: the run's fields, then a row per metric, then the warnings."""
    primary = summary.get("primary_metric")
    lines = [f"{label + ':':<10}{render.printable(value)}" for label, value in (
        ("run", run["id"]), ("source", run["source"]), ("status", run["status"]),
        ("job", run["job_id"] or "-"), ("name", run["name"] or "-"),
        ("project", " / ".join(p for p in (run.get("project"), run.get("experiment")) if p) or "-"),
        ("created", render.event_time(run["created_at"])),
        ("finished", render.event_time(run["finished_at"]) if run["finished_at"] else "-"),
        ("step", _step_text(summary.get("progress"))),
        ("primary", _primary_text(primary)))]
    metrics = summary.get("metrics") or {}
    if metrics:
        primary_name = primary.get("name") if primary else None
        lines += ["", render.table(("METRIC", "POINTS", "LATEST", "AT STEP", "BEST", "AT STEP", "TREND"),
                                   [_metric_row(name, m, name == primary_name) for name, m in sorted(metrics.items())])]
    lines += [f"warning: {render.printable(warning)}" for warning in summary.get("warnings") or ()]
    return "\n".join(lines)


def _metric_row(name: str, m: Mapping[str, Any], primary: bool) -> tuple[str, ...]:
    latest, best = m.get("latest") or {}, m.get("best") or {}
    return ((f"{name} *" if primary else name), str(m.get("count", 0)), _num(latest.get("value")),
            _at(latest.get("step")), _num(best.get("value")) if m.get("direction") in ("minimize", "maximize") else "-",
            _at(best.get("step")), m.get("trend") or "-")


def _primary_text(primary: Mapping[str, Any] | None) -> str:
    if not primary or not primary.get("name"):
        return "- (set one: gpuplanectl primary-metric set METRIC)"
    best = (primary.get("best") or {}).get("value")
    return f"{primary['name']} ({primary.get('direction') or 'no direction'}, from {primary.get('source')})" + \
        (f", best {_num(best)}" if best is not None else "")


def _step_text(progress: Mapping[str, Any] | None) -> str:
    step = (progress or {}).get("step")
    return "-" if step is None else str(step)


def _at(step: int | None) -> str:
    return "-" if step is None else str(step)


def metrics(
    ctx: typer.Context,
    run_id: Annotated[str, typer.Argument(metavar="RUN", help="The run's id.", show_default=False)],
    names: Annotated[str | None, typer.Option("--names", metavar="A,B", help="Names or patterns (train/*).")] = None,
    x: Annotated[str, typer.Option("--x", help="The x axis: step or ts.")] = "step",
    points: Annotated[int | None, typer.Option("--points", min=1, max=10_000,
                                               help="Buckets per series (default: to fit the terminal).")] = None,
    step_range: Annotated[str | None, typer.Option("--step-range", metavar="A:B",
                                                   help="Only steps A to B (either side may be left out: 1000:).")] = None,
    window: Annotated[str | None, typer.Option("--window", metavar="DURATION",
                                               help="Only the last DURATION of the run (30m, 2h, 1d), by time.")] = None,
    json_output: JsonOption = False,
) -> None:
    """Print a run's series: points, last value, min, max and a sparkline of the average."""
    g = globals_of(ctx)
    width = points or max(10, min(SPARK_WIDTH, shutil.get_terminal_size().columns - 70))
    query: dict[str, Any] = {"x": x, "points": width, **({"names": names} if names else {})}
    if step_range is not None and window is not None:
        raise typer.BadParameter("give --step-range or --window, not both", param_hint="--window")
    if step_range is not None:
        query.update(x="step", **_step_bounds(step_range))
    if window is not None:
        query.update(x="ts", window=window)
    with reporting(g, json_output, flags={"names": "--names"}):
        found = connect(g).get(f"/api/v1/runs/{quote(run_id, safe='')}/metrics?{urlencode(query)}")
    if json_output:
        render.print_json(found)
        return
    if not found["series"]:
        print("no metrics")
        return
    bars = BARS if (sys.stdout.encoding or "").lower().replace("-", "") == "utf8" else ASCII_BARS
    print(metrics_table(found["series"], bars))


def metrics_table(series: Mapping[str, Any], bars: str = BARS) -> str:
    """``metrics``: per series its points, last value, min, max and a sparkline of the average."""
    rows = []
    for name, col in sorted(series.items()):
        avg = col.get("avg") or []
        rows.append((name, _total(col.get("count")), _num(_last(col.get("last"))),
                     _num(_extreme(col.get("min"), min)), _num(_extreme(col.get("max"), max)), sparkline(avg, bars)))
    return render.table(("METRIC", "POINTS", "LAST", "MIN", "MAX", "TREND"), rows)


def _step_bounds(text: str) -> dict[str, int]:
    """``"100:200"`` -> start 100, end 200; a side left out is open."""
    low, sep, high = text.partition(":")
    try:
        bounds = {key: int(v) for key, v in (("start", low), ("end", high)) if v.strip()}
    except ValueError:
        bounds = None
    if not sep or bounds is None or any(v < 0 for v in bounds.values()):
        raise typer.BadParameter(f"{text!r} is not A:B with whole steps (1000:2000, 1000:, :500)",
                                 param_hint="--step-range")
    return bounds


def sparkline(values: Sequence[float | None], bars: str = BARS) -> str:
    """One character per bucket; a gap where a bucket has no (finite) value."""
    numbers = [render.finite(v) for v in values]
    finite = [v for v in numbers if v is not None]
    if not finite:
        return ""
    low, high = min(finite), max(finite)
    span = high - low
    out = []
    for v in numbers:
        if v is None:
            out.append(" ")
        elif span == 0 or not math.isfinite(span):  # all equal, or too far apart for a float
            out.append(bars[0 if span == 0 or v == low else -1])
        else:
            out.append(bars[min(len(bars) - 1, int((v - low) / span * len(bars)))])
    return "".join(out)


def _total(counts: Sequence[int | None] | None) -> str:
    """The points of all buckets; ``-`` when the API's counts are no numbers."""
    numbers = [render.finite(c) for c in counts or () if c is not None]
    if None in numbers:
        return render.NONE
    return render.format_number(sum(numbers), ".0f")


def _last(values: Sequence[float | None] | None) -> float | str | None:
    """The last bucket's value that is there (NaN and the infinities count: they are what it was)."""
    return next((v for v in reversed(values or ()) if render.as_number(v) is not None), None)


def _extreme(values: Sequence[float | None] | None, pick: Any) -> float | None:
    finite = [v for v in map(render.finite, values or ()) if v is not None]
    return pick(finite) if finite else None


def _num(value: float | None) -> str:
    return render.format_number(value, ".6g")
