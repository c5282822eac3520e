"""``gpuplanectl top``: a live full-screen view of the nodes' GPUs and the running and queued jobs.

Every ``--interval`` seconds it reads ``GET /api/v1/nodes`` and
``GET /api/v1/jobs?status=RUNNING,DISPATCHING,QUEUED`` and redraws; ``gpuplanectl.topview``
composes the frame (pure), this module only draws it with the stdlib ``curses`` (which
restores the terminal however the view ends) and reads keys: ``q`` quits (exit 0), Ctrl-C
too (exit 130). A resized terminal is redrawn at once, to its new size.

``--once`` (or output that is not a terminal) prints one frame, sized to the terminal, and
exits; ``--json`` prints the data of one frame (``{"nodes": [...], "jobs": [...]}``). When the
daemon goes away mid-view, the screen is restored, the error printed, and top exits 1.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from typing import TYPE_CHECKING, Annotated, Any

import typer
from gpuplanectl import render, topview
from gpuplanectl.client import DaemonClient
from gpuplanectl.commands import JsonOption, connect, globals_of, reporting
from gpuplanectl.exit_codes import EXIT_INTERRUPTED

if TYPE_CHECKING:
    import curses

JOBS_PATH = "/api/v1/jobs?status=RUNNING,DISPATCHING,QUEUED&limit=500"
# A daemon that hangs must not freeze the screen for long.
REQUEST_TIMEOUT = 5.0
QUIT_KEYS = frozenset({ord("q"), ord("Q")})
RESIZE_CHECK_S = 0.5


def top(
    ctx: typer.Context,
    interval: Annotated[float, typer.Option("--interval", "-i", metavar="SECONDS", min=0.1,
                                            help="Seconds between refreshes.")] = 2.0,
    once: Annotated[bool, typer.Option("--once", help="Print one frame and exit (no full-screen view).")] = False,
    json_output: JsonOption = False,
) -> None:
    """Watch the GPUs and jobs live, full screen; q quits.

    Per node: host CPU, memory, swap and load; per GPU: a utilization bar, memory
    used/total, temperature, power draw/limit and the job holding it. Below: running jobs,
    then queued ones in the order they will run, with each job's GPU memory and how long
    it has run (or waited). --once prints one frame; --json the data of one.
    """
    g = globals_of(ctx)
    try:
        with reporting(g, json_output):
            client = connect(g, timeout=REQUEST_TIMEOUT)
            data = fetch(client)
            if json_output:
                render.print_json(data)
                return
            if once or not (sys.stdin.isatty() and sys.stdout.isatty()):
                size = shutil.get_terminal_size()
                print("\n".join(topview.compose(data["nodes"], data["jobs"], width=size.columns,
                                                height=size.lines, hint=None)))
                return
            import curses  # only the live view needs it

            curses.wrapper(_view, client, data, interval)
    except KeyboardInterrupt:
        raise typer.Exit(EXIT_INTERRUPTED) from None


def fetch(client: DaemonClient) -> dict[str, Any]:
    return {"nodes": client.get("/api/v1/nodes")["nodes"], "jobs": client.get(JOBS_PATH)["jobs"]}


def _view(screen: curses.window, client: DaemonClient, data: dict[str, Any], interval: float) -> None:
    """Draw, wait for a key or the next refresh, repeat; returns when q is pressed."""
    import curses

    try:
        curses.curs_set(0)
    except curses.error:
        pass  # a terminal that cannot hide its cursor
    next_fetch = time.monotonic() + interval
    while True:
        _draw(screen, data)
        while True:
            wait = next_fetch - time.monotonic()
            if wait <= 0:
                break
            # Wake at least every RESIZE_CHECK_S: a SIGWINCH that lands outside getch can
            # leave ncurses unaware of a new size, so the size is also checked by hand.
            screen.timeout(max(1, int(min(wait, RESIZE_CHECK_S) * 1000)))
            key = screen.getch()
            if key in QUIT_KEYS:
                return
            if key == curses.KEY_RESIZE or _resized(screen):
                curses.update_lines_cols()
                _draw(screen, data)
        data = fetch(client)
        next_fetch = time.monotonic() + interval


def _resized(screen: curses.window) -> bool:
    """True (and ncurses told) when the terminal's size is no longer the screen's. A size
    ncurses refuses (no rows or columns: a pty nobody sized) keeps the old one until the next check."""
    import curses

    try:
        size = os.get_terminal_size(sys.__stdout__.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    if size.lines < 1 or size.columns < 1 or (size.lines, size.columns) == screen.getmaxyx():
        return False
    try:
        curses.resizeterm(size.lines, size.columns)
    except curses.error:
        return False
    return True


def _draw(screen: curses.window, data: dict[str, Any]) -> None:
    import curses

    height, width = screen.getmaxyx()
    lines = topview.compose(data["nodes"], data["jobs"], width=width, height=height)
    encoding = screen.encoding or "ascii"
    try:
        screen.erase()
        for y, line in enumerate(lines):
            text = line.encode(encoding, "replace").decode(encoding)
            try:
                screen.addstr(y, 0, text)
            except curses.error:
                pass  # the bottom-right cell moves the cursor off the screen, a wide character past the edge
        screen.refresh()
    except curses.error:
        pass  # a terminal too small or odd to draw in: clipped to nothing, drawn again on the next change
