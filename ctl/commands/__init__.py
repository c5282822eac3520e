"""What every command shares: the global options, finding the daemon, and one error boundary.

Each command module parses its arguments, calls the daemon through ``gpuplanectl.client``
and renders through ``gpuplanectl.render``; failures leave through ``reporting()``, which
turns them into a message (or, with ``--json``, the API's error body on stdout) and an exit
code from ``gpuplanectl.exit_codes``.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from gpuplanectl import render
from gpuplanectl.client import DaemonClient, DaemonUnreachable, NoDaemon
from gpuplanectl.exit_codes import for_error

from gpuplaned.protocol.errors import ApiError, ErrorCode

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON for scripts (the API's body) instead of text.")]


class Globals:
    """The options given before the command (``gpuplanectl --runtime-dir DIR status``)."""

    def __init__(self, runtime_dir: Path, *, explicit: bool) -> None:
        self.runtime_dir = runtime_dir
        self.explicit = explicit  # --runtime-dir was given, so hints must repeat it

    @property
    def ctl(self) -> str:
        """How to invoke gpuplanectl again with the same runtime dir."""
        if self.explicit:
            return f"gpuplanectl --runtime-dir {shlex.quote(str(self.runtime_dir))}"
        return "gpuplanectl"

    def start_hint(self) -> str:
        daemon = "gpuplaned"
        if self.explicit:
            daemon += f" --runtime-dir {shlex.quote(str(self.runtime_dir))}"
        return f"Start one with `{self.ctl} daemon` (in the background) or `{daemon}` (in the foreground)."


def globals_of(ctx: typer.Context) -> Globals:
    obj = ctx.find_root().obj
    assert isinstance(obj, Globals), "the root callback sets ctx.obj"
    return obj


def connect(g: Globals, *, timeout: float = 30.0) -> DaemonClient:
    """The daemon published in ``g.runtime_dir``; raises ``NoDaemon`` when there is none."""
    return DaemonClient.discover(g.runtime_dir, timeout=timeout)


def fail(json_output: bool, code: ErrorCode, message: str, details: dict[str, Any] | None = None, *,
         text: str | None = None, hint: str | None = None, exit_code: int | None = None) -> NoReturn:
    """Report an error and exit.

    Args:
        json_output: print ``{"error": {code, message, details}}`` on stdout instead of text on stderr.
        text: the message for people when it should say more than ``message``.
        hint: a line after the message telling people what to do (JSON carries it in details).
        exit_code: instead of the one ``code`` maps to.
    """
    if json_output:
        render.print_json(ApiError(code, message, details).body())
    else:
        render.print_error(text or message, hint=hint)
    raise typer.Exit(for_error(code) if exit_code is None else exit_code)


@contextmanager
def reporting(g: Globals, json_output: bool) -> Iterator[None]:
    """Turn "no daemon", "it does not answer" and API errors into a message and exit code."""
    try:
        yield
    except NoDaemon as exc:
        hint = g.start_hint()
        fail(json_output, ErrorCode.UNAVAILABLE, str(exc),
             {"reason": "no_daemon", "runtime_dir": str(g.runtime_dir), "hint": hint}, hint=hint)
    except DaemonUnreachable as exc:
        fail(json_output, ErrorCode.UNAVAILABLE, str(exc),
             {"reason": "unreachable", "runtime_dir": str(g.runtime_dir)})
    except ApiError as exc:
        fail(json_output, exc.code, exc.message, exc.details, text=_describe(exc))


def _describe(error: ApiError) -> str:
    known = error.details.get("actors")
    if error.code is ErrorCode.NOT_FOUND and isinstance(known, list):
        return f"{error.message} (actors: {', '.join(map(str, known)) or 'none'})"
    return error.message
