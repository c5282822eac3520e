"""``gpuplaned``: parse argv, load the configuration, run the daemon, map the outcome to an exit code.

Exit codes: 0 normal (signal-initiated shutdown included), 1 runtime error, 2 usage or
configuration error, 3 the endpoint belongs to another live daemon.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

import trio

from gpuplaned import __version__
from gpuplaned.config import ROLES, ConfigError, load_config
from gpuplaned.endpoint import EndpointBusy, EndpointError
from gpuplaned.home import HomeError
from gpuplaned.protocol.discovery import pid_alive
from gpuplaned.protocol.errors import EXIT_ENDPOINT_BUSY, EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from gpuplaned.protocol.printable import printable, printable_lines
from gpuplaned.runtime.supervisor import ActorStartError, unwrap_error
from gpuplaned.store.database import SchemaTooNew

log = logging.getLogger("gpuplaned")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpuplaned",
        description="GPUPlane daemon: job queue, GPU monitor, metrics and the control API.",
    )
    parser.add_argument("--version", action="version", version=f"gpuplaned {__version__}")
    parser.add_argument("--role", choices=ROLES, help="all (default): a workstation; server; agent")
    parser.add_argument("--server", metavar="URL",
                        help="the server an agent dials out to (role agent; its agent token in GPUPLANE_TOKEN "
                             "or [uplink] token_file)")
    parser.add_argument("--also-node", action="store_true",
                        help="role server: run this machine's node actors too (its GPUs take jobs), as role all does")
    parser.add_argument("--config", metavar="FILE", help="TOML config (default ~/.config/gpuplane/gpuplaned.toml)")
    parser.add_argument("--home", metavar="DIR", help="data dir (env GPUPLANE_HOME; default ~/.local/share/gpuplane)")
    parser.add_argument("--runtime-dir", metavar="DIR",
                        help="socket and port-file dir (env GPUPLANE_RUNTIME_DIR; default $XDG_RUNTIME_DIR/gpuplane or /tmp/gpuplane-UID)")
    parser.add_argument("--group-access", action="store_const", const=True,
                        help="members of the runtime dir's group may use the local socket (dir 0750, socket 0660)")
    parser.add_argument("--listen", metavar="URL",
                        help="explicit control endpoint: unix:///abs/path or tcp://127.0.0.1:PORT; fails instead of falling back")
    parser.add_argument("--http", metavar="HOST:PORT",
                        help="the token-authenticated HTTP front (env GPUPLANE_HTTP; default 127.0.0.1:8765; "
                             "port 0 picks a free one)")
    parser.add_argument("--no-http", action="store_true", help="no HTTP front: only the local socket")
    parser.add_argument("--gpus", metavar="SOURCE", help="auto (default), nvml, none, or fake:N for N fake GPUs")
    parser.add_argument("--node-name", metavar="NAME", help="this node's name (default: the host name)")
    parser.add_argument("--label", action="append", metavar="LABEL", help="a node label for job selectors (repeatable)")
    parser.add_argument("--max-cpu-jobs", type=int, metavar="N", help="CPU-only jobs allowed at once on this node (default 2)")
    parser.add_argument("--owner-pid", type=int, metavar="PID", help="shut down when this process exits")
    parser.add_argument("--log-level", choices=("debug", "info", "warning", "error"))
    return parser


class PrintableFormatter(logging.Formatter):
    """Log lines quote user strings (job names, commands, paths): their control characters are
    written as escapes, so a line of the log stays one line and never drives the reader's
    terminal. A traceback keeps its line breaks."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return printable(super().formatMessage(record))

    def formatException(self, ei: Any) -> str:
        return printable_lines(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:
        return printable_lines(super().formatStack(stack_info))


def _setup_logging(level: str) -> None:
    # The daemon's lines name no source line, thread or process: the logging HOWTO's
    # "Optimization" switches leave them uncollected, ~5.6 of ~30 us a line (a job writes five).
    logging._srcfile = None  # type: ignore[attr-defined]  # no sys._getframe() walk a record
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(PrintableFormatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    logging.basicConfig(level=getattr(logging, level.upper()), handlers=[handler])


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)  # exits 2 on a usage error
    try:
        cfg = load_config(vars(args))
    except ConfigError as exc:
        print(f"gpuplaned: configuration error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if cfg.owner_pid is not None and not pid_alive(cfg.owner_pid):
        print(f"gpuplaned: --owner-pid {cfg.owner_pid} is not a running process", file=sys.stderr)
        return EXIT_USAGE
    if args.also_node and cfg.role != "server":
        print(f"gpuplaned: --also-node is for --role server (role {cfg.role} "
              f"{'runs the node actors already' if cfg.role == 'all' else 'is a node'})", file=sys.stderr)
        return EXIT_USAGE
    if cfg.role == "agent":
        from gpuplaned.uplink.link import TokenError, agent_token

        try:
            agent_token(cfg, os.environ)  # read again by the uplink; here only to refuse early and clearly
        except TokenError as exc:
            print(f"gpuplaned: {exc}", file=sys.stderr)
            return EXIT_USAGE
    _setup_logging(cfg.log_level)

    from gpuplaned.actors import specs_for_role
    from gpuplaned.daemon import serve
    from gpuplaned.testing.actors import testing_specs

    try:
        specs = specs_for_role(cfg.role, http=cfg.http is not None, also_node=args.also_node) + testing_specs(os.environ)
    except ValueError as exc:
        print(f"gpuplaned: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        status: int = trio.run(serve, cfg, specs)  # non-zero when an actor asked for it (a refused agent token)
    except BaseException as raised:  # noqa: BLE001 - mapped to an exit code below
        return _exit_code(unwrap_error(raised))
    return status


def _exit_code(error: BaseException) -> int:
    if isinstance(error, EndpointBusy):
        # The likely reader: someone starting an agent beside the server on one machine.
        print(f"gpuplaned: {error}; not starting a second daemon (another one on this machine, an agent "
              "beside a server say, needs its own --runtime-dir and --home)", file=sys.stderr)
        return EXIT_ENDPOINT_BUSY
    if isinstance(error, ActorStartError) and isinstance(unwrap_error(error.error), SchemaTooNew):
        # A data dir from a newer version: exit 2, which systemd does not restart
        # (RestartPreventExitStatus=2 3), instead of failing again until its start limit.
        log.error("%s", error)
        return EXIT_USAGE
    if isinstance(error, ActorStartError) and _front_unavailable(error.error):
        # The configured HTTP front cannot be had: said in the user's words, before READY.
        print(f"gpuplaned: {unwrap_error(error.error)}", file=sys.stderr)
        return EXIT_FAILURE
    if isinstance(error, (EndpointError, HomeError, ActorStartError)):
        log.error("%s", error)
        return EXIT_FAILURE
    if isinstance(error, KeyboardInterrupt):
        return EXIT_OK
    if isinstance(error, SystemExit):
        return error.code if isinstance(error.code, int) else EXIT_FAILURE
    log.error("gpuplaned failed", exc_info=error)
    return EXIT_FAILURE


def _front_unavailable(error: BaseException) -> bool:
    from gpuplaned.actors.http import FrontUnavailable  # loaded already where a role has the front

    return isinstance(unwrap_error(error), FrontUnavailable)


if __name__ == "__main__":
    sys.exit(main())
