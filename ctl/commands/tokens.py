"""API tokens for the TCP endpoint: ``gpuplanectl token create|list|revoke``.

``create NAME --scope read,write [--expires 30d]`` prints the token (``gpp_...``) alone on
stdout, once: only its hash is kept, so it cannot be shown again (a note on stderr says so).
``list`` shows every token with its status (active, expired or revoked), never a secret; when
a token has limits (``create --max-gpus N --node NAME --dir PATH --max-queued N --gpu-hours H
--max-job-hours H --unattended``: an agent's capability token), also its limits and its
GPU-hours used of its budget, with what is left.
``revoke ID_OR_NAME`` stops a token working at once; revoking it again is harmless.

``--json`` prints the API's body: ``{"token": {...}, "secret": "gpp_..."}`` for create,
``{"tokens": [...]}`` for list, ``{"token": {...}}`` for revoke. Exit 2 for a bad name, scope
or duration (nothing is created), 1 for an unknown token or a name already in use.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Annotated, Any
from urllib.parse import quote

import typer
from gpuplanectl import render
from gpuplanectl.commands import JsonOption, connect, globals_of, reporting

SCOPES_HELP = "read, write, agent, sdk, admin (admin implies all; write implies read)"
_DURATION = re.compile(r"(\d+)([smhdw])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}

app = typer.Typer(
    name="token",
    help="Create, list or revoke the API tokens that the TCP endpoint requires.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


def parse_duration(text: str) -> int:
    """``30d``, ``12h``, ``90m``, ``45s``, ``2w`` -> seconds.

    Raises:
        typer.BadParameter: anything else, or zero.
    """
    match = _DURATION.fullmatch(text.strip().lower())
    if match is None or int(match[1]) == 0:
        raise typer.BadParameter(f"{text!r} is not a duration like 30d, 12h, 90m, 45s or 2w")
    return int(match[1]) * _UNIT_S[match[2]]


@app.command("create")
def create(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(metavar="NAME", show_default=False,
                                        help="What the token is for, e.g. ci or laptop (1-63 of A-Z a-z 0-9 . _ -).")],
    scope: Annotated[list[str], typer.Option("--scope", metavar="SCOPE[,SCOPE]", show_default=False,
                                             help=f"What it may do (repeatable): {SCOPES_HELP}.")],
    expires: Annotated[str | None, typer.Option("--expires", metavar="DURATION", show_default=False,
                                                help="Stop working after this long: 30d, 12h, 90m, 45s, 2w "
                                                     "[default: never].")] = None,
    max_gpus: Annotated[int | None, typer.Option("--max-gpus", metavar="N", show_default=False,
                                                 help="Limit: at most N GPUs per job.")] = None,
    node: Annotated[list[str] | None, typer.Option("--node", metavar="NAME", show_default=False,
                                                   help="Limit: jobs only on this node (repeatable).")] = None,
    directory: Annotated[list[str] | None, typer.Option("--dir", metavar="PATH", show_default=False,
                                                        help="Limit: working dirs only inside PATH "
                                                             "(repeatable).")] = None,
    max_queued: Annotated[int | None, typer.Option("--max-queued", metavar="N", show_default=False,
                                                   help="Limit: at most N of its jobs not yet ended.")] = None,
    gpu_hours: Annotated[float | None, typer.Option("--gpu-hours", metavar="H", show_default=False,
                                                    help="Limit: a budget of H GPU-hours; its jobs stop "
                                                         "when spent.")] = None,
    max_job_hours: Annotated[float | None, typer.Option("--max-job-hours", metavar="H", show_default=False,
                                                        help="Limit: a job's timeout is at most H hours (its default "
                                                             "when it sets none).")] = None,
    unattended: Annotated[bool, typer.Option("--unattended", help="Destructive MCP tools run without asking for "
                                                                  "confirmation.")] = False,
    json_output: JsonOption = False,
) -> None:
    """Create a token and print it, once; only its hash is kept. The --max-* / --node / --dir /
    --gpu-hours options make it an agent's capability token (limits checked on every submit)."""
    scopes = list(dict.fromkeys(part.strip() for item in scope for part in item.split(",") if part.strip()))
    body: dict[str, Any] = {"name": name, "scopes": scopes}
    if expires is not None:
        body["expires_in_s"] = parse_duration(expires)
    limits = {key: value for key, value in (
        ("max_gpus_per_job", max_gpus), ("allowed_nodes", node or None), ("allowed_dirs", directory or None),
        ("max_queued_jobs", max_queued), ("gpu_hours", gpu_hours), ("max_job_hours", max_job_hours),
        ("unattended", unattended or None)) if value is not None}
    if limits:
        body["limits"] = limits
    g = globals_of(ctx)
    with reporting(g, json_output):
        created = connect(g).post("/api/v1/tokens", body)
    if json_output:
        render.print_json(created)
        return
    token = created["token"]
    print(f"created token {token['id']} ({render.printable(token['name'])}, {','.join(token['scopes'])}, "
          f"expires {_time(token.get('expires_at'), 'never')}); it will not be shown again: store it now",
          file=sys.stderr)
    print(created["secret"], flush=True)


@app.command("list")
def list_tokens(ctx: typer.Context, json_output: JsonOption = False) -> None:
    """List the tokens: scopes, when created, when they expire, when last used, status.

    STATUS: active, expired or revoked. Secrets are never shown.
    """
    g = globals_of(ctx)
    with reporting(g, json_output):
        tokens = connect(g).get("/api/v1/tokens")["tokens"]
    if json_output:
        render.print_json({"tokens": tokens})
    elif tokens:
        print(token_table(tokens))
    else:
        print("no tokens")


@app.command("revoke")
def revoke(
    ctx: typer.Context,
    token: Annotated[str, typer.Argument(metavar="ID_OR_NAME", show_default=False,
                                         help="A token's id (tok_...) or name, as `gpuplanectl token list` shows it.")],
    json_output: JsonOption = False,
) -> None:
    """Revoke a token: it stops working at once."""
    g = globals_of(ctx)
    with reporting(g, json_output):
        revoked = connect(g).post(f"/api/v1/tokens/{quote(token, safe='')}/revoke")
    if json_output:
        render.print_json(revoked)
        return
    found = revoked["token"]
    print(f"revoked token {found['id']} ({render.printable(found['name'])})")


def token_status(token: Mapping[str, Any], now_ms: int | None = None) -> str:
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    if token.get("revoked_at") is not None:
        return "revoked"
    expires = token.get("expires_at")
    expires = render.finite(expires)
    return "expired" if expires is not None and expires <= now_ms else "active"


def _time(ms: int | None, missing: str = render.NONE) -> str:
    return render.local_time(ms, "%Y-%m-%d %H:%M", missing)


def limits_text(limits: Mapping[str, Any] | None) -> str:
    """A token's limits in one cell: ``gpus<=2 nodes=a,b dirs=/x queued<=4 job<=2h unattended``."""
    if not limits:
        return render.NONE
    parts = []
    for key, label in (("max_gpus_per_job", "gpus<="), ("max_queued_jobs", "queued<=")):
        if limits.get(key) is not None:
            parts.append(f"{label}{limits[key]}")
    for key, label in (("allowed_nodes", "nodes="), ("allowed_dirs", "dirs=")):
        if limits.get(key):
            parts.append(label + ",".join(render.printable(v) for v in limits[key]))
    if limits.get("max_job_hours") is not None:
        parts.append(f"job<={render.format_number(limits['max_job_hours'], 'g')}h")
    if limits.get("unattended"):
        parts.append("unattended")
    return " ".join(parts) or render.NONE


def _budget(token: Mapping[str, Any]) -> str:
    budget = (token.get("limits") or {}).get("gpu_hours")
    if budget is None:
        return render.NONE
    used, left = token.get("used_gpu_hours"), token.get("remaining_gpu_hours")
    used_text, left_text = render.format_number(used, ".3g"), render.format_number(left, ".3g")
    return f"{used_text}/{render.format_number(budget, 'g')} ({left_text} left)"


def token_table(tokens: Sequence[Mapping[str, Any]], now_ms: int | None = None) -> str:
    """The tokens; LIMITS and GPU-HOURS (used/budget, and what is left) only when one has limits."""
    limited = any(t.get("limits") for t in tokens)
    rows = [[t["id"], t["name"], ",".join(t.get("scopes") or []), _time(t.get("created_at")),
             _time(t.get("expires_at"), "never"), _time(t.get("last_used_at")), token_status(t, now_ms),
             *((limits_text(t.get("limits")), _budget(t)) if limited else ())]
            for t in tokens]
    return render.table(["ID", "NAME", "SCOPES", "CREATED", "EXPIRES", "LAST USED", "STATUS",
                         *(("LIMITS", "GPU-HOURS") if limited else ())], rows)
