"""``gpuplanectl job submit-batch JOBS.TOML``: many jobs from one file in one request
(``POST /api/v1/jobs:batch``), all of them queued or none.

The file: ``[[jobs]]`` tables, each with a job file's keys (``gpuplanectl job submit --file``),
and an optional ``[defaults]`` table every job takes unless it sets the key itself (its ``env``
and ``secrets`` tables are merged, the job's names winning). Each job is built as ``job submit
--file`` builds one: a relative ``cwd`` is from the file's folder, no ``cwd`` means this shell's
folder, and it gets this shell's inherited variables (PATH, the virtualenv...).

Output: one line per job queued (id, status, name); ``--json`` the API's body
(``{"jobs": [...]}``). A refused batch queues nothing and names each refused job by its place
in the file (``jobs[3]``); exit 2.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from gpuplanectl import render
from gpuplanectl.commands import JsonOption, connect, fail, globals_of, reporting
from gpuplanectl.exit_codes import EXIT_USAGE
from gpuplanectl.submission import JobFileError, SubmissionError, build_body, job_table

from gpuplaned.protocol.errors import ApiError, ErrorCode

_MERGED = ("env", "secrets")  # tables a job adds to the defaults' rather than replaces


def load_batch_file(path: Path, *, environ: dict[str, str], cwd: str) -> list[dict[str, Any]]:
    """The bodies of a batch file's jobs, in its order.

    Raises:
        JobFileError: unreadable, not TOML, no ``[[jobs]]``, or a job's key wrong (named
            ``jobs[i].key``, or ``defaults.key``).
        SubmissionError: a job without a command.
    """
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise JobFileError(path, None, f"cannot read it: {getattr(exc, 'strerror', None) or exc}") from None
    except (tomllib.TOMLDecodeError, RecursionError) as exc:
        raise JobFileError(path, None, f"not valid TOML: {exc}") from None
    unknown = sorted(set(data) - {"jobs", "defaults"})
    if unknown:
        raise JobFileError(path, unknown[0], "unknown key (known: defaults, jobs)")
    defaults, entries = data.get("defaults", {}), data.get("jobs")
    if not isinstance(defaults, dict):
        raise JobFileError(path, "defaults", "must be a table")
    if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
        raise JobFileError(path, "jobs", "give the jobs as [[jobs]] tables, at least one")
    _checked(path, "defaults", defaults)
    bodies = []
    for index, entry in enumerate(entries):
        merged = {**defaults, **entry}
        for key in _MERGED:
            if isinstance(defaults.get(key), dict) and isinstance(entry.get(key), dict):
                merged[key] = {**defaults[key], **entry[key]}
        where = f"jobs[{index}]"
        try:
            bodies.append(build_body(_checked(path, where, merged), {}, environ=environ, cwd=cwd))
        except JobFileError:
            raise
        except SubmissionError as exc:
            raise JobFileError(path, f"{where}.command", str(exc).partition(":")[0]) from None
    return bodies


def _checked(path: Path, where: str, table: dict[str, Any]) -> dict[str, Any]:
    try:
        return job_table(path, table)
    except JobFileError as exc:
        message = str(exc).removeprefix(f"{path}: ").removeprefix(f"{exc.key}: " if exc.key else "")
        raise JobFileError(path, f"{where}.{exc.key}" if exc.key else where, message) from None


def submit_batch(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(metavar="JOBS.TOML", show_default=False,
                                         help="[[jobs]] tables with a job file's keys, and an optional [defaults].")],
    json_output: JsonOption = False,
) -> None:
    """Queue many jobs from one file, all of them or none (one request, one transaction).

    A sweep's trials, say: each [[jobs]] table is one job with the keys `job submit --file`
    reads; [defaults] holds what they share (cwd, gpu, env...). If the daemon refuses one job
    (a bad value, a token's limit or budget, for the batch as a whole), none is queued and each
    refused job is named by its place in the file.
    """
    g = globals_of(ctx)
    try:
        bodies = load_batch_file(file, environ=dict(os.environ), cwd=os.getcwd())
    except (SubmissionError, FileNotFoundError) as exc:
        details = exc.details() if isinstance(exc, SubmissionError) else {"field": "cwd"}
        fail(json_output, ErrorCode.BAD_REQUEST, str(exc), details, exit_code=EXIT_USAGE)
    with reporting(g, json_output):
        try:
            queued = connect(g).post("/api/v1/jobs:batch", {"jobs": bodies})["jobs"]
        except ApiError as exc:
            if "refused" not in exc.details:
                raise
            _refused(json_output, file, exc, len(bodies))
    if json_output:
        render.print_json({"jobs": queued})
        return
    for job in queued:
        print(f"{job['id']} {job['status']} {render.printable(job['name'])}")


def _refused(json_output: bool, file: Path, error: ApiError, total: int) -> NoReturn:
    lines = [f"{file}: none of its {total} jobs was queued; refused:"]
    for entry in error.details["refused"]:
        field = f".{entry['field']}" if entry.get("field") else ""
        lines.append(f"  jobs[{entry['index']}]{field}: {render.printable(entry['message'])}")
    fail(json_output, error.code, error.message, error.details, text="\n".join(lines), exit_code=EXIT_USAGE)
