"""``gpuplanectl checkpoints RUN``: what a run registered with ``run.log_checkpoint``.

One line per checkpoint, oldest step first, with the ranking metric's value at its step and
the best one starred (``GET /api/v1/runs/{id}/checkpoints``). The metric is the run's primary
metric unless ``--metric`` names another.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote, urlencode

import typer
from gpuplanectl import render, render_nodes
from gpuplanectl.commands import JsonOption, connect, globals_of, reporting


def checkpoints(
    ctx: typer.Context,
    run_id: Annotated[str, typer.Argument(metavar="RUN", help="The run's id.", show_default=False)],
    metric: Annotated[str | None, typer.Option("--metric", metavar="NAME",
                                               help="Rank by this metric (default: the primary metric).")] = None,
    json_output: JsonOption = False,
) -> None:
    """List a run's checkpoints, the best by the metric starred."""
    g = globals_of(ctx)
    query = f"?{urlencode({'metric': metric})}" if metric else ""
    with reporting(g, json_output):
        found = connect(g).get(f"/api/v1/runs/{quote(run_id, safe='')}/checkpoints{query}")
    if json_output:
        render.print_json(found)
        return
    if not found["checkpoints"]:
        print("no checkpoints")
        return
    ranked = found["metric"]
    headers = ("", "STEP", "PATH", "SIZE", "REGISTERED") + ((ranked.upper(),) if ranked else ())
    rows = []
    for ck in found["checkpoints"]:
        row = ("*" if ck.get("best") else "", "-" if ck["step"] is None else str(ck["step"]), ck["path"],
               render_nodes.format_bytes(ck["size_bytes"]), render.event_time(ck["created_at"]))
        if ranked:
            value = ck.get("metric_value")
            row += ("-" if value is None else f"{value:.6g}",)
        rows.append(row)
    print(render.table(headers, rows))
    if ranked:
        direction = found["direction"] or "no direction"
        print(f"\nranked by {render.printable(ranked)} ({direction})" + ("" if found["best_id"] else "; no checkpoint has a value"))
