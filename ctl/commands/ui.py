"""``gpuplanectl ui [--next PATH] [--open] [--json]``: a one-time link that signs a browser in to the web UI.

The local daemon mints it (``POST /api/v1/auth/login-links`` over the Unix socket, which is
trusted by its file permissions); the link points at the daemon's HTTP front, where the web
UI is served. It works once, for two minutes (``[ui] login_link_ttl_s``), and the browser
session it opens can read and write (submit, cancel) but not administer: for that, sign in
with an admin token instead.

The link alone goes to stdout (``xdg-open "$(gpuplanectl ui)"`` works); a note on stderr
says what it is. ``--open`` also opens it in this machine's browser (``$BROWSER`` is
honoured). ``--json`` prints the API's body ``{"code", "url", "expires_at"}``. A daemon
without an HTTP front (``--no-http``) is an error (exit 1) that says so.

Only the local daemon: a ``--server`` or profile is refused (exit 2); on that machine, run
``gpuplanectl ui`` there, or sign in to its page with a token.
"""

from __future__ import annotations

import sys
import time
from typing import Annotated, Any

import typer
from gpuplanectl import render
from gpuplanectl.commands import JsonOption, connect, globals_of, refuse_remote, reporting


def ui(
    ctx: typer.Context,
    next_path: Annotated[str | None, typer.Option(
        "--next", metavar="PATH", show_default=False,
        help="Land on this page of the UI after signing in, e.g. /jobs/job_123 [default: /].")] = None,
    open_browser: Annotated[bool, typer.Option(
        "--open", help="Also open the link in this machine's web browser.")] = False,
    json_output: JsonOption = False,
) -> None:
    """Print a one-time link that signs a browser in to the web UI (valid once, for 2 minutes)."""
    g = globals_of(ctx)
    body: dict[str, Any] = {} if next_path is None else {"next": next_path}
    with reporting(g, json_output):
        remote = g.remote
        if remote is not None:
            refuse_remote(json_output, "ui", "asks the local daemon for a login link", remote,
                          "Run it on the daemon's machine, or sign in to the server's page with an API token.")
        link = connect(g).post("/api/v1/auth/login-links", body)
    if json_output:
        render.print_json(link)
    else:
        print(f"Open this link in a browser to sign in to the GPUPlane web UI. It works once, within "
              f"{_within(link.get('expires_at'))}; the session can read and write, not administer.", file=sys.stderr)
        print(link["url"], flush=True)
    if open_browser and not _open(link["url"]):
        print("could not start a web browser here: open the link yourself", file=sys.stderr)


def _within(expires_at: Any) -> str:
    """``2 minutes``, ``45 seconds``: how long the link has left."""
    expires = render.finite(expires_at)
    if expires is None:
        return "a few minutes"
    seconds = max(0, round(expires / 1000 - time.time()))
    if seconds >= 90:
        return f"{round(seconds / 60)} minutes"
    return f"{seconds} seconds"


def _open(url: str) -> bool:
    import webbrowser  # only --open needs it

    try:
        return webbrowser.open(url)
    except webbrowser.Error:
        return False
