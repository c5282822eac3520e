"""One checkpoint: ``gpuplanectl ckpt verify ID``.

``verify`` asks the daemon to hash the checkpoint's file now (``POST
/api/v1/checkpoints/{id}/verify``) and prints whether it is still what was registered: ``ok``
(unchanged), ``CHANGED`` (gone, or another fingerprint or full hash than the one kept) or
``unknown`` (nothing to compare with: registered by the script and never verified; this
verify keeps its full hash for the next). Exit 0 unless it changed (1), as ``sha256sum -c``.
``--json`` prints the API's body.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

import typer
from gpuplanectl import render
from gpuplanectl.commands import JsonOption, connect, globals_of, reporting
from gpuplanectl.exit_codes import EXIT_FAILURE

app = typer.Typer(
    name="ckpt",
    help="Work with one checkpoint: verify that its file is still what was registered.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


@app.command("verify")
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
