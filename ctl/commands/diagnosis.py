"""``gpuplanectl run diagnose RUN``, ``run compare RUN RUN...``, ``job explain JOB``: the semantic functions
(``GET /api/v1/runs/{id}/diagnosis``, ``/runs/compare?ids=``, ``/jobs/{id}/explanation``) as a
short report: the summary, each finding worst first with where its evidence is, then what to
do. ``--json`` prints the API's body.
"""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import quote, urlencode

import typer
from gpuplanectl import render
from gpuplanectl.commands import JsonOption, connect, globals_of, reporting

_MARK = {"info": "-", "warning": "!", "critical": "!!"}
ALIGNS = ("step", "time")


def _where(e: dict[str, Any]) -> str:
    """One evidence pointer, as a person would look it up."""
    kind = e.get("kind")
    if kind == "metric":
        at = f"steps {e['steps'][0]}-{e['steps'][1]}" if "steps" in e else f"ts {e['ts'][0]}-{e['ts'][1]}"
        return f"metric {e['name']} of {e['run_id']}, {at}"
    if kind == "log":
        first = e["lines"][-1].strip() if e.get("lines") else ""
        return f"{e['stream']} of {e['job_id']} attempt {e['attempt']}, bytes {e['offsets'][0]}-{e['offsets'][1]}: " \
               f"{first[:120]}"
    if kind == "gpu":
        return f"{e['name']} on {e['node_id']}, ts {e['ts'][0]}-{e['ts'][1]}"
    if kind == "event":
        return f"event {e['id']} ({e.get('type', '')})"
    if kind == "checkpoint":
        return f"checkpoint {e['id']}"
    return str(e)


def report_text(found: dict[str, Any]) -> str:
    lines = [found["summary"]]
    if found["findings"]:
        lines.append("")
    for f in found["findings"]:
        lines.append(f"{_MARK.get(f['severity'], '-'):>2} [{f['kind']}] {f['claim']}")
        lines.extend(f"     see {_where(e)}" for e in f["evidence"])
    if found["next_actions"]:
        lines.append("\nnext:")
        lines.extend(f"  - {a}" for a in found["next_actions"])
    return "\n".join(lines)


def _show(ctx: typer.Context, path: str, json_output: bool) -> dict[str, Any]:
    g = globals_of(ctx)
    with reporting(g, json_output):
        found = connect(g).get(path)
    if json_output:
        render.print_json(found)
    else:
        print(report_text(found))
    return found


def diagnose(
    ctx: typer.Context,
    run_id: Annotated[str, typer.Argument(metavar="RUN", help="The run's id.", show_default=False)],
    json_output: JsonOption = False,
) -> None:
    """Diagnose a run: convergence, overfitting, instability, stalls, throughput against GPU use."""
    _show(ctx, f"/api/v1/runs/{quote(run_id, safe='')}/diagnosis", json_output)


def compare(
    ctx: typer.Context,
    run_ids: Annotated[list[str], typer.Argument(metavar="RUN RUN...", help="Two or more run ids; the first is the "
                                                                             "baseline.", show_default=False)],
    align: Annotated[str, typer.Option("--align", metavar="step|time",
                                       help="Align by step, or by time since each run's first point.")] = "step",
    json_output: JsonOption = False,
) -> None:
    """Compare runs: every metric they share, where they diverge first, best value and step, throughput, GPU use,
    config diff."""
    if align not in ALIGNS:
        raise typer.BadParameter("step or time", param_hint="--align")
    if len(run_ids) < 2:
        raise typer.BadParameter("at least two runs", param_hint="RUN")
    found = _show(ctx, f"/api/v1/runs/compare?{urlencode({'ids': ','.join(run_ids), 'align': align})}", json_output)
    if not json_output:
        rows = [(r["id"], _num(r["best_value"]), "-" if r["best_x"] is None else str(r["best_x"]),
                 _num(r["steps_per_s"]), _num(r["gpu_util"])) for r in found["runs"]]
        print("\n" + render.table(("RUN", f"BEST {found['metric'] or '-'}", "AT", "STEPS/S", "GPU%"), rows))


def _num(v: float | None) -> str:
    return render.format_number(v, ".4g")


def explain(
    ctx: typer.Context,
    job_id: Annotated[str, typer.Argument(metavar="JOB", help="The job's id.", show_default=False)],
    json_output: JsonOption = False,
) -> None:
    """Explain why a job's latest attempt failed, with the log lines and GPU samples that show it."""
    _show(ctx, f"/api/v1/jobs/{quote(job_id, safe='')}/explanation", json_output)
