"""The result file of an EVALUATE attempt: where the job writes its metrics, read at its end.

The node picks the path (``$GPUPLANE_EVAL_RESULT``, in the attempt's dir) and reads it once
the attempt has ended, at most ``MAX_RESULT_BYTES``: a FIFO, a device or a symlink to one
is never waited on, a file too big is refused unread, and whatever it holds becomes an
``EvalResult`` (the metrics, or why not, in words) for the end's report. Nothing here raises.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from gpuplaned.protocol.evaluation_wire import MAX_RESULT_BYTES, EvalResult, parse_result

EVAL_RESULT_FILE = "eval_result.json"


def result_path(job_dir: Path) -> Path:
    return job_dir / EVAL_RESULT_FILE


def read_result(job_dir: Path) -> EvalResult | None:
    """What the attempt wrote to its result file; None when it wrote none."""
    path = result_path(job_dir)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return EvalResult(error=f"the result file cannot be opened: {exc.strerror}")
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return EvalResult(error="the result file is not a regular file")
        if info.st_size > MAX_RESULT_BYTES:
            return EvalResult(error=f"the result file is over {MAX_RESULT_BYTES} bytes ({info.st_size})")
        chunks, left = [], MAX_RESULT_BYTES + 1
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 16))):
            chunks.append(chunk)
            left -= len(chunk)
        return parse_result(b"".join(chunks))
    except OSError as exc:
        return EvalResult(error=f"the result file cannot be read: {exc.strerror}")
    finally:
        os.close(fd)
