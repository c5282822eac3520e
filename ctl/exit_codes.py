"""gpuplanectl's exit codes: the shared 0/1/2/3 of ``gpuplaned.protocol.errors``, and how an error maps to one.

- 0: the command did what it says.
- 1: a runtime failure: no daemon runs, it refused (``not_found``, ``conflict``, ...), an actor
  did not reach the state asked for, or the daemon could not be started.
- 2: a usage error: bad arguments (typer/click's own exit code) or a ``bad_request`` answer;
  also ``gpuplanectl daemon`` when gpuplaned rejected its flags or configuration.
- 3: ``gpuplanectl daemon`` only: another daemon owns the endpoint it was told to use.
"""

from __future__ import annotations

from gpuplaned.protocol.errors import EXIT_ENDPOINT_BUSY, EXIT_FAILURE, EXIT_OK, EXIT_USAGE, ErrorCode

__all__ = ["EXIT_ENDPOINT_BUSY", "EXIT_FAILURE", "EXIT_OK", "EXIT_USAGE", "for_error"]


def for_error(code: ErrorCode) -> int:
    """The exit code for an error the daemon answered with."""
    return EXIT_USAGE if code is ErrorCode.BAD_REQUEST else EXIT_FAILURE
