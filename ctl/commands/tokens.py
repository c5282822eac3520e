"""API tokens for the TCP endpoint: ``gpuplanectl token create|list|revoke``.

``create NAME --scope read,write [--expires 30d]`` prints the token (``gpp_...``) alone on
stdout, once: only its hash is kept, so it cannot be shown again (a note on stderr says so).
``list`` shows every token with its status (active, expired or revoked), never a secret.
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
    json_output: JsonOption = False,
) -> None:
    """Create a token and print it, once; only its hash is kept."""
    scopes = list(dict.fromkeys(part.strip() for item in scope for part in item.split(",") if part.strip()))
    body: dict[str, Any] = {"name": name, "scopes": scopes}
    if expires is not None:
        body["expires_in_s"] = parse_duration(expires)
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
    return "expired" if expires is not None and expires <= now_ms else "active"


def _time(ms: int | None, missing: str = render.NONE) -> str:
    return missing if ms is None else time.strftime("%Y-%m-%d %H:%M", time.localtime(ms / 1000))


def token_table(tokens: Sequence[Mapping[str, Any]], now_ms: int | None = None) -> str:
    rows = [[t["id"], t["name"], ",".join(t.get("scopes") or []), _time(t.get("created_at")),
             _time(t.get("expires_at"), "never"), _time(t.get("last_used_at")), token_status(t, now_ms)]
            for t in tokens]
    return render.table(["ID", "NAME", "SCOPES", "CREATED", "EXPIRES", "LAST USED", "STATUS"], rows)
