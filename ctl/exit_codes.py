"""gpuplanectl's exit codes: the shared 0/1/2/3 of ``gpuplaned.protocol.errors``, and how an error maps to one.

- 0: the command did what it says.
- 1: a runtime failure: no daemon runs, it refused (``not_found``, ``conflict``, ...), an actor
  did not reach the state asked for, or the daemon could not be started.
- 2: a usage error: bad arguments (typer/click's own exit code) or a ``bad_request`` answer;
  also ``gpuplanectl daemon`` when gpuplaned rejected its flags or configuration.
- 3: ``gpuplanectl daemon`` only: another daemon owns the endpoint it was told to use.

``gpuplanectl job logs -f`` instead exits with the job's own code once it ends (``for_job_end``),
and 130 when Ctrl-C stops it.
"""

from __future__ import annotations

from gpuplaned.protocol.errors import EXIT_ENDPOINT_BUSY, EXIT_FAILURE, EXIT_OK, EXIT_USAGE, ErrorCode

__all__ = ["EXIT_ENDPOINT_BUSY", "EXIT_FAILURE", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "for_error", "for_job_end"]


def for_error(code: ErrorCode) -> int:
    """The exit code for an error the daemon answered with."""
    return EXIT_USAGE if code is ErrorCode.BAD_REQUEST else EXIT_FAILURE


EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a Ctrl-C


def _signal_number(value: object) -> int | None:
    """``11``, ``"SIGSEGV"``, ``"SEGV"`` or ``"SIGNAL(SIGSEGV)"`` -> 11; None when unknown."""
    import signal  # only `logs -f` needs it

    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value > 0 else None
    if not isinstance(value, str):
        return None
    name = value.strip()
    if name.startswith("SIGNAL(") and name.endswith(")"):
        name = name[len("SIGNAL("):-1]
    if name.isdigit():
        return int(name)
    if not name.startswith("SIG"):
        name = "SIG" + name
    try:
        return signal.Signals[name].value
    except KeyError:
        return None


def for_job_end(end: dict[str, object]) -> int:
    """The exit code of ``gpuplanectl job logs -f`` when the job ends, like a shell running it would report.

    0 for SUCCEEDED; the command's own exit code when it FAILED with one (``EXIT_CODE``);
    128 + N when signal N killed it; 1 for anything else (cancelled, timed out, lost,
    could not be spawned).
    """
    status = end.get("status")
    if status == "SUCCEEDED":
        return EXIT_OK
    reason = end.get("failure_reason")
    number = _signal_number(end.get("signal")) or (
        _signal_number(reason) if isinstance(reason, str) and reason.startswith("SIGNAL") else None)
    if status == "FAILED" and number is not None:
        return 128 + number
    code = end.get("exit_code")
    if status == "FAILED" and reason in ("EXIT_CODE", None) and isinstance(code, int) and 0 < code < 256:
        return code
    return EXIT_FAILURE
