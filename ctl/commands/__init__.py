"""What every command shares: the global options, finding the daemon, and one error boundary.

The daemon is the local one (its port-file in the runtime dir) unless ``--server``,
``GPUPLANE_SERVER`` or a profile names a remote one (``gpuplanectl.remote``); then ``connect``
returns a client of its HTTP front and every command works the same over it. Which one is
settled on the first ``connect``, so a broken profile file fails the commands that need a
daemon (exit 2) and not ``--help``.

Each command module parses its arguments, calls the daemon through ``gpuplanectl.client``
and renders through ``gpuplanectl.render``; failures leave through ``reporting()``, which
turns them into a message (or, with ``--json``, the API's error body on stdout) and an exit
code from ``gpuplanectl.exit_codes``.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from gpuplanectl import remote, render
from gpuplanectl.client import DaemonClient, DaemonUnreachable, NoDaemon
from gpuplanectl.exit_codes import EXIT_USAGE, for_error
from gpuplanectl.remote import Remote, RemoteError

from gpuplaned.protocol.errors import ApiError, ErrorCode

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON for scripts (the API's body) instead of text.")]


# Commands that act on this machine, not through a daemon's API: refused with a remote server.
LOCAL_ONLY = {"daemon": "starts gpuplaned on this machine", "backup": "copies the daemon's files on this machine",
              "restore": "writes into a data dir on this machine"}


class Globals:
    """The options given before the command (``gpuplanectl --runtime-dir DIR status``)."""

    def __init__(self, runtime_dir: Path, *, explicit: bool, server: str | None = None,
                 token: str | None = None, profile: str | None = None) -> None:
        self.runtime_dir = runtime_dir
        self.explicit = explicit  # --runtime-dir was given, so hints must repeat it
        self._options = {"server": server, "token": token, "profile": profile}
        self._remote: Remote | None = None
        self._resolved = False
        self._clients: dict[float, DaemonClient] = {}  # remote: one per timeout, closed at exit

    @classmethod
    def from_options(cls, ctx: typer.Context, runtime_dir: Path, *, explicit: bool, server: str | None,
                     token: str | None, profile: str | None) -> Globals:
        """The root callback's work: keep the options, close remote connections at exit, and
        refuse a command that only works here when a remote server is named."""
        g = cls(runtime_dir, explicit=explicit, server=server, token=token, profile=profile)
        ctx.call_on_close(g.close)
        what = LOCAL_ONLY.get(ctx.invoked_subcommand or "")
        if what is not None:
            try:
                found = g.remote
            except RemoteError as exc:
                fail(False, ErrorCode.BAD_REQUEST, str(exc))
            if found is not None:
                refuse_remote(False, str(ctx.invoked_subcommand), what, found,
                              "Run it on the daemon's machine, or give --runtime-dir for a daemon here.")
        return g

    @property
    def remote(self) -> Remote | None:
        """The remote daemon to drive; None: the local one. Settled once.

        Raises:
            RemoteError: the options, environment or profile file do not name a usable one.
        """
        if not self._resolved:
            self._remote = remote.resolve(**self._options, runtime_dir_given=self.explicit,
                                          env=os.environ, warn=_warn)
            self._resolved = True
        return self._remote

    @property
    def settled_remote(self) -> Remote | None:
        """The remote daemon if one was settled on already; never raises."""
        return self._remote if self._resolved else None

    @property
    def ctl(self) -> str:
        """How to invoke gpuplanectl again with the same runtime dir (or server; never its token)."""
        if self.settled_remote is not None:
            return self.settled_remote.again
        if self.explicit:
            return f"gpuplanectl --runtime-dir {shlex.quote(str(self.runtime_dir))}"
        return "gpuplanectl"

    def start_hint(self) -> str:
        daemon = "gpuplaned"
        if self.explicit:
            daemon += f" --runtime-dir {shlex.quote(str(self.runtime_dir))}"
        return f"Start one with `{self.ctl} daemon` (in the background) or `{daemon}` (in the foreground)."

    def client(self, timeout: float) -> DaemonClient:
        """The daemon's client: remote (kept, so its connection is reused) or found afresh."""
        found = self.remote
        if found is None:
            return DaemonClient.discover(self.runtime_dir, timeout=timeout)
        client = self._clients.get(timeout)
        if client is None:
            client = self._clients[timeout] = DaemonClient.remote(found.server, found.token, timeout=timeout)
        return client

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()


def _warn(message: str) -> None:
    print(message, file=sys.stderr)


def globals_of(ctx: typer.Context) -> Globals:
    obj = ctx.find_root().obj
    assert isinstance(obj, Globals), "the root callback sets ctx.obj"
    return obj


def connect(g: Globals, *, timeout: float = 30.0) -> DaemonClient:
    """The daemon: the remote one named by the options, environment or a profile, else the
    one published in ``g.runtime_dir``.

    Raises:
        NoDaemon: no local daemon runs.
        RemoteError: the remote settings are unusable.
    """
    return g.client(timeout)


def refuse_remote(json_output: bool, command: str, what: str, found: Remote, hint: str) -> NoReturn:
    """Exit with a usage error: ``command`` (which ``what``) only works on the daemon's machine."""
    fail(json_output, ErrorCode.BAD_REQUEST,
         f"`gpuplanectl {command}` {what}; it does not work with a remote server ({found.server.url}, "
         f"from {found.source})", hint=hint, exit_code=EXIT_USAGE)


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
def reporting(g: Globals, json_output: bool, flags: Mapping[str, str] | None = None) -> Iterator[None]:
    """Turn "no daemon", "it does not answer", bad remote settings and API errors into a
    message and exit code.

    Args:
        flags: the API's field names as the command's own flags and arguments
            (``{"metric": "--metric"}``), so that an error about a field names what the caller typed.
    """
    try:
        yield
    except RemoteError as exc:
        fail(json_output, ErrorCode.BAD_REQUEST, str(exc), {"reason": "remote_config"})
    except NoDaemon as exc:
        hint = g.start_hint()
        fail(json_output, ErrorCode.UNAVAILABLE, str(exc),
             {"reason": "no_daemon", "runtime_dir": str(g.runtime_dir), "hint": hint}, hint=hint)
    except DaemonUnreachable as exc:
        found = g.settled_remote
        where = {"server": found.server.url} if found is not None else {"runtime_dir": str(g.runtime_dir)}
        fail(json_output, ErrorCode.UNAVAILABLE, str(exc), {"reason": "unreachable", **where})
    except ApiError as exc:
        hint = _remote_hint(g, exc)
        details = {**exc.details, "hint": hint} if hint else exc.details
        fail(json_output, exc.code, exc.message, details, text=_describe(exc, flags or {}), hint=hint)


def _remote_hint(g: Globals, error: ApiError) -> str | None:
    """What to do when a remote daemon refuses the token, or a scope it lacks."""
    found = g.settled_remote
    if found is None:
        return None
    if error.code is ErrorCode.UNAUTHORIZED:
        return ("Create a token on the daemon's machine with `gpuplanectl token create NAME --scope read,write` "
                "and give it with --token, GPUPLANE_TOKEN or a profile's token_file "
                f"(in {remote.profile_path(os.environ)}).")
    if error.code is ErrorCode.FORBIDDEN:
        needed = error.details.get("needed")
        scope = needed if isinstance(needed, str) else "SCOPE"
        return f"Use a token with that scope: `gpuplanectl token create NAME --scope {scope}` on the daemon's machine."
    return None


def _describe(error: ApiError, flags: Mapping[str, str]) -> str:
    known = error.details.get("actors")
    if error.code is ErrorCode.NOT_FOUND and isinstance(known, list):
        return f"{error.message} (actors: {', '.join(map(str, known)) or 'none'})"
    return in_caller_terms(error.message, error.details.get("field"), flags)


def in_caller_terms(message: str, field: Any, flags: Mapping[str, str]) -> str:
    """The API starts a message about a field with its name (``metric: ...``, a query parameter
    or body key); say it as the flag or argument the caller gave instead (``--metric: ...``)."""
    prefix = f"{field}: "
    if isinstance(field, str) and field in flags and message.startswith(prefix):
        return f"{flags[field]}: {message[len(prefix):]}"
    return message
