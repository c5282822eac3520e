"""Who created a run over the network, and the folders its checkpoint files may lie in
(``runs.created_by``, ``runs.sdk_cwd``: migration 0018; ``gpuplaned.service.access.owns_run``)."""

from __future__ import annotations

import json
import sqlite3

import attrs

from gpuplaned.checkpoints.roots import declared, job_roots


NODE_CREDENTIAL = "node:"  # runs.created_by of a run a process on an agent's host opened (confined_callers)
RELAYED = "agent-relay"  # what runs.created_by said of such a run before it named the node


@attrs.frozen
class RunOwnership:
    """What says who may write to a run."""

    run_id: str
    job_id: str | None  # a job's run
    created_by: str | None  # the network credential that created it; None: the local socket or the scheduler
    sdk_cwd: str | None  # the working directory the SDK session that created it declared
    node_id: str | None = None  # the node its job is on (None: no job, or not yet placed)


def ownership(conn: sqlite3.Connection, run_id: str) -> RunOwnership | None:
    """The run's ownership; None when there is no such run."""
    row = conn.execute("SELECT r.job_id, r.created_by, r.sdk_cwd, j.node_id FROM runs r "
                       "LEFT JOIN jobs j ON j.id = r.job_id WHERE r.id = ?", (run_id,)).fetchone()
    return RunOwnership(run_id, *row) if row else None


def job_node(conn: sqlite3.Connection, job_id: str) -> str | None:
    """The node a job is (or was last) placed on; None for no such job, or one not yet placed."""
    row = conn.execute("SELECT node_id FROM jobs WHERE id = ?", (job_id,)).fetchone()
    return row[0] if row else None


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
    row = conn.execute("SELECT j.working_dir, j.env, r.sdk_cwd, r.env_snapshot, r.created_by FROM runs r "
                       "LEFT JOIN jobs j ON j.id = r.job_id WHERE r.id = ?", (run_id,)).fetchone()
    if row is None:
        return ()
    working_dir, env, sdk_cwd, snapshot, created_by = row
    if created_by is not None and (created_by == RELAYED or created_by.startswith(NODE_CREDENTIAL)):
        return ()  # a script on an agent's host made it: its files are there, not here
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
