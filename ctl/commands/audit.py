"""The audit log: ``gpuplanectl audit [--token NAME] [--limit N] [--json]``.

Every REST write (either front) and every MCP tool call, newest first: when, who (a token's
name, ``local`` for the control socket), how (rest or mcp), the route or tool, the outcome and
the arguments (secrets already redacted by the daemon). Needs the ``admin`` scope over HTTP.
``--json`` prints the API's body, ``{"entries": [...], "next_cursor"}``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Annotated, Any
from urllib.parse import urlencode

import typer
from gpuplanectl import render
from gpuplanectl.commands import JsonOption, connect, globals_of, reporting

ARGUMENTS_WIDTH = 80


def audit(
    ctx: typer.Context,
    token: Annotated[str | None, typer.Option("--token", metavar="NAME", show_default=False,
                                              help="Only this token's calls (by name; local: the control socket's).")]
    = None,
    limit: Annotated[int, typer.Option("--limit", metavar="N", min=1, max=1000, help="At most N entries.")] = 50,
    json_output: JsonOption = False,
) -> None:
    """Show the audit log: every REST write and MCP tool call, newest first."""
    query: dict[str, Any] = {"limit": limit}
    if token is not None:
        query["token"] = token
    g = globals_of(ctx)
    with reporting(g, json_output):
        found = connect(g).get(f"/api/v1/audit?{urlencode(query)}")
    if json_output:
        render.print_json(found)
    elif found["entries"]:
        print(audit_table(found["entries"]))
    else:
        print("no audit entries")


def _who(entry: Mapping[str, Any]) -> str:
    return render.printable(entry.get("token_name") or entry.get("caller_kind") or render.NONE)


def _arguments(arguments: Any) -> str:
    text = json.dumps(arguments, separators=(",", ":"), sort_keys=True)
    return render.printable(text if len(text) <= ARGUMENTS_WIDTH else text[:ARGUMENTS_WIDTH - 3] + "...")


def audit_table(entries: Sequence[Mapping[str, Any]]) -> str:
    rows = [[render.local_time(e["ts"]), _who(e), e["via"],
             render.printable(e["action"]), render.printable(e["outcome"]), _arguments(e.get("arguments"))]
            for e in entries]
    return render.table(["TIME", "WHO", "VIA", "ACTION", "OUTCOME", "ARGUMENTS"], rows)
