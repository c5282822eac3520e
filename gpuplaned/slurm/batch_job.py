"""What a Slurm batch job of an attempt runs: the one-shot shim, and the request it reads.

The attempt dir (``<[slurm] job_dir>/jobs/<job id>/attempt-<n>/``, on a filesystem the
cluster shares) gets ``spec.json`` before sbatch (``write_spec``); the batch script then only
``exec``s ``shim_argv``, and the shim inside the allocation (``gpuplaned.shim.oneshot``)
writes the same ``runtime.json``, ``exit.json`` and logs there as a local shim does, read
back with ``gpuplaned.launching.job_files``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from gpuplaned.launching.client import SHIM_PATH
from gpuplaned.shim.records import SPEC_FILE, RequestError, Spec, write_json_atomic


def write_spec(attempt_dir: str | os.PathLike[str], *, argv: Sequence[str], cwd: str | os.PathLike[str],
               env: Mapping[str, str], job_id: str, attempt: int, timeout_s: float | None,
               grace_s: float) -> Path:
    """Write ``attempt_dir/spec.json`` (0600, whole or not at all, fsynced) for the one-shot
    shim, creating ``attempt_dir`` (0700) and its missing parents; returns the file's path.

    Raises:
        ValueError: a field the shim would refuse (naming it), or ``attempt_dir`` not absolute.
        OSError: the dir or the file cannot be written.
    """
    attempt_dir = Path(attempt_dir)
    if not attempt_dir.is_absolute():
        raise ValueError(f"attempt_dir must be an absolute path, got {str(attempt_dir)!r}")
    request = {"argv": list(argv), "cwd": os.fspath(cwd), "env": dict(env), "job_id": job_id,
               "attempt": attempt, "timeout_s": timeout_s, "grace_s": grace_s}
    try:
        Spec({**request, "job_dir": os.fspath(attempt_dir)})  # the shim's own check, here and now
    except RequestError as exc:
        raise ValueError(f"spec of job {job_id} attempt {attempt}: {exc}") from None
    if job_id is None:
        raise ValueError("job_id must name the job")
    if attempt is None:
        raise ValueError("attempt must be a positive integer")
    attempt_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = attempt_dir / SPEC_FILE
    write_json_atomic(os.fspath(path), request, sync=True)  # read on another host
    return path


def shim_argv(python: str | os.PathLike[str], attempt_dir: str | os.PathLike[str]) -> list[str]:
    """The command a batch script ``exec``s to run the attempt in ``attempt_dir``:
    ``<python> -I -S <abs path of gpuplaned/shim/__main__.py> --oneshot <attempt dir>``.

    ``python`` is the interpreter on the compute nodes (one as recent as the daemon's; the
    shim needs only its standard library), and this package must be at the same path there.
    """
    return [os.fspath(python), "-I", "-S", str(SHIM_PATH), "--oneshot", os.fspath(attempt_dir)]
