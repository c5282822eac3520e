"""One checkpoint's file: ``gpuplanectl ckpt verify ID``; a run's: ``gpuplanectl ckpt prune RUN``
(``gpuplanectl.main`` puts the ``ckpt`` noun together, with ``list`` and ``best`` from
``checkpoints`` and ``eval`` and ``evals`` from ``eval``).

``verify`` asks the daemon to hash the checkpoint's file now (``POST
/api/v1/checkpoints/{id}/verify``) and prints whether it is still what was registered: ``ok``
(unchanged), ``CHANGED`` (gone, or another fingerprint or full hash than the one kept) or
``unknown`` (nothing to compare with: registered by the script and never verified; this
verify keeps its full hash for the next). Exit 0 unless it changed (1), as ``sha256sum -c``.
``--json`` prints the API's body.

``prune RUN --keep-best K --keep-last K [--metric NAME]`` (``POST
/api/v1/runs/{id}/checkpoints/prune``) ranks by the run's primary metric unless ``--metric``
names another, and is a dry run unless given ``--yes``: it prints what would go (or went), why each other checkpoint
stays (best, best K, last K, in use, not GPUPlane's to delete...), and what was refused
because its file changed since it was registered. Exit 1 when something was refused.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

import typer
from gpuplanectl import render
from gpuplanectl.commands import JsonOption, connect, globals_of, reporting
from gpuplanectl.exit_codes import EXIT_FAILURE

def verify(
    ctx: typer.Context,
    checkpoint_id: Annotated[str, typer.Argument(metavar="ID", help="The checkpoint's id (ck_...).",
                                                 show_default=False)],
    json_output: JsonOption = False,
) -> None:
    """Hash a checkpoint's file now; exit 1 if it changed since it was registered."""
    g = globals_of(ctx)
    with reporting(g, json_output):
        found = connect(g).post(f"/api/v1/checkpoints/{quote(checkpoint_id, safe='')}/verify")
    changed = found["changed"]
    if json_output:
        render.print_json(found)
    else:
        ck = found["checkpoint"]
        verdict = "CHANGED" if changed else ("ok" if changed is False else "unknown")
        print(f"{verdict}  {render.printable(ck['path'])}")
        if not found["present"]:
            print("  the file is gone" + (f" ({render.printable(found['error'])})" if found.get("error") else ""))
        else:
            print(f"  full hash    {found['full_hash']}")
            print(f"  fingerprint  {found['fingerprint']}" + (
                f" (registered {ck['fingerprint']})" if ck["fingerprint"] and ck["fingerprint"] != found["fingerprint"]
                else ""))
            if ck["full_hash"] and ck["full_hash"] != found["full_hash"]:
                print(f"  kept hash    {ck['full_hash']}")
    if changed:
        raise typer.Exit(EXIT_FAILURE)


def prune(
    ctx: typer.Context,
    run_id: Annotated[str, typer.Argument(metavar="RUN", help="The run's id (run_...).", show_default=False)],
    keep_best: Annotated[int, typer.Option("--keep-best", metavar="K", min=0,
                                           help="Keep the best K by the metric (the best stays anyway).")] = 1,
    keep_last: Annotated[int, typer.Option("--keep-last", metavar="K", min=0,
                                           help="Keep the last K by step.")] = 1,
    metric: Annotated[str | None, typer.Option("--metric", metavar="NAME", show_default=False,
                                               help="Rank by this metric [default: the run's primary metric]; "
                                                    "one without a direction ranks nothing, so all are kept.")] = None,
    yes: Annotated[bool, typer.Option("--yes", help="Delete for real (without it: a dry run).")] = False,
    json_output: JsonOption = False,
) -> None:
    """Delete a run's checkpoints but the best K and the last K; a dry run unless --yes."""
    g = globals_of(ctx)
    body = {"keep_best": keep_best, "keep_last": keep_last, "dry_run": not yes}
    if metric is not None:
        body["metric"] = metric
    with reporting(g, json_output, PRUNE_FLAGS):
        found = connect(g).post(f"/api/v1/runs/{quote(run_id, safe='')}/checkpoints/prune", body)
    if json_output:
        render.print_json(found)
    else:
        print("\n".join(prune_lines(found)))
    if found["refused"]:
        raise typer.Exit(EXIT_FAILURE)


# The API's fields as prune's flags, for its error messages.
PRUNE_FLAGS = {"metric": "--metric", "keep_best": "--keep-best", "keep_last": "--keep-last", "run_id": "RUN"}


def prune_lines(found: dict) -> list[str]:
    """What a prune's reply says, in lines: what goes, what stays and why, what was refused."""
    def where(ck: dict) -> str:
        step = "-" if ck["step"] is None else str(ck["step"])
        return f"  {ck['checkpoint_id']}  step {step}  {render.printable(ck['path'])}"

    dry = found["dry_run"]
    freed = sum(ck["size_bytes"] or 0 for ck in found["deleted"])
    lines = [f"{'would delete' if dry else 'deleted'} {len(found['deleted'])} ({render.format_bytes(freed)}), "
             f"kept {len(found['kept'])}" + (f", refused {len(found['refused'])}" if found["refused"] else "")
             + f"; keep best {found['keep_best']} by {render.printable(found['metric'] or 'no metric')}"
             + (f" ({found['direction']})" if found["direction"] else "") + f", last {found['keep_last']}"]
    if found["deleted"]:
        lines.append("would delete:" if dry else "deleted:")
        lines += [where(ck) + ("  (already gone)" if ck["already_gone"] else "") for ck in found["deleted"]]
    if found["kept"]:
        lines.append("kept:")
        lines += [where(ck) + "  " + "; ".join(render.printable(r) for r in ck["reasons"]) for ck in found["kept"]]
    if found["refused"]:
        lines.append("refused:")
        lines += [where(ck) + "  " + render.printable(ck["reason"]) for ck in found["refused"]]
    if dry and found["deleted"]:
        lines.append("dry run: nothing was deleted; run again with --yes to delete")
    return lines
