"""Who created a run over the network, and the folders its checkpoint files may lie in
(``runs.created_by``, ``runs.sdk_cwd``: migration 0018; ``gpuplaned.service.access.owns_run``)."""

from __future__ import annotations

import json
import sqlite3

import attrs

from gpuplaned.checkpoints.roots import declared, job_roots


@attrs.frozen
class RunOwnership:
    """What says who may write to a run."""

    run_id: str
    job_id: str | None  # a job's run
    created_by: str | None  # the network credential that created it; None: the local socket or the scheduler
    sdk_cwd: str | None  # the working directory the SDK session that created it declared


def ownership(conn: sqlite3.Connection, run_id: str) -> RunOwnership | None:
    """The run's ownership; None when there is no such run."""
    row = conn.execute("SELECT job_id, created_by, sdk_cwd FROM runs WHERE id = ?", (run_id,)).fetchone()
    return RunOwnership(run_id, *row) if row else None


def claim(conn: sqlite3.Connection, run_id: str, created_by: str | None, sdk_cwd: str | None) -> None:
    """Record who created the run just made, and the working directory its session declared."""
    conn.execute("UPDATE runs SET created_by = coalesce(created_by, ?), sdk_cwd = coalesce(sdk_cwd, ?) WHERE id = ?",
                 (created_by, sdk_cwd, run_id))


def declare_cwd(conn: sqlite3.Connection, run_id: str, sdk_cwd: str) -> None:
    """A session joining a run with no job and no working directory yet gives it its own."""
    conn.execute("UPDATE runs SET sdk_cwd = ? WHERE id = ? AND sdk_cwd IS NULL AND job_id IS NULL", (sdk_cwd, run_id))


def checkpoint_roots(conn: sqlite3.Connection, run_id: str) -> tuple[str, ...]:
    """The folders the run's checkpoint files may lie in: its job's working folder and declared
    folders (``GPUPLANE_CKPT_DIR``), else the working directory its SDK session declared (an
    older SDK's: the ``cwd`` of the environment it sent); none when nothing says (then nothing
    of it is read or deleted)."""
    row = conn.execute("SELECT j.working_dir, j.env, r.sdk_cwd, r.env_snapshot FROM runs r "
                       "LEFT JOIN jobs j ON j.id = r.job_id WHERE r.id = ?", (run_id,)).fetchone()
    if row is None:
        return ()
    working_dir, env, sdk_cwd, snapshot = row
    if working_dir:
        variables = _json_object(env)
        return job_roots(working_dir, declared({k: v for k, v in variables.items() if isinstance(v, str)}))
    cwd = sdk_cwd or _json_object(snapshot).get("cwd")
    return job_roots(cwd) if isinstance(cwd, str) and cwd else ()


def _json_object(text: str | None) -> dict:
    try:
        found = json.loads(text) if text else {}
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def set_fingerprints(conn: sqlite3.Connection, run_id: str, fingerprints: dict[str, str]) -> None:
    """Keep the fingerprints the daemon took of the script's checkpoint files as it registered
    them (by path; a row the watcher already fingerprinted keeps its own)."""
    conn.executemany("UPDATE checkpoints SET fingerprint = coalesce(fingerprint, ?) WHERE run_id = ? AND path = ? "
                     "AND deleted_at IS NULL", [(fp, run_id, path) for path, fp in fingerprints.items()])
