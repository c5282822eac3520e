"""MCP's write tools and task states speak the job vocabulary (gpuplaned.protocol.job_states):
a LOST job has not ended, so a dry run says a cancel would be taken (REST takes it: the cancel
reaches the node when it is back), a retry too, and its task is still working."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from gpuplaned.mcp import args, tasks, write_tools
from gpuplaned.mcp.table import Call
from gpuplaned.protocol.agent import GpuInfo, Hello, JobStatus
from gpuplaned.protocol.job_wire import JobSpec
from gpuplaned.service.passes.dispatch import schedule
from gpuplaned.store import job_rows
from gpuplaned.store.database import open_writer
from gpuplaned.store.readers import Readers

NOW = 1_700_000_000_000


@pytest.fixture
def lost_job(tmp_path):
    """A real database holding one job whose node fell silent while it ran: ``(readers, job id)``."""
    path = tmp_path / "gpuplane.db"
    conn = open_writer(path)
    node, _ = job_rows.register_node(conn, Hello("n1", "0", (GpuInfo(0, "Fake", 1024),)), NOW)
    spec = JobSpec(name="j", command=("true",), cwd="/", env={}, gpu=1)
    job_id = job_rows.insert_job(conn, spec, NOW, job_rows.capacities(conn, {node}))
    schedule(conn, NOW, {node})
    for report in ("RUNNING", "LOST"):
        assert job_rows.apply_status(conn, node, JobStatus(job_id, 1, report), NOW).applied
    conn.close()
    readers = Readers(path, 1)
    yield readers, job_id
    readers.close()


async def test_a_dry_run_cancel_of_a_lost_job_says_it_would_be_cancelled(lost_job):
    readers, job_id = lost_job
    call = Call(SimpleNamespace(readers=readers), None, None, dry_run=True)
    result = await write_tools.cancel_job(call, args.CancelArgs(job_id=job_id))
    assert result.summary == f"Dry run, nothing changed: job {job_id} (LOST) would be cancelled when its node is back."
    assert result.data.job.status == "LOST"


async def test_a_dry_run_retry_of_a_lost_job_says_it_would_be_queued_again(lost_job):
    readers, job_id = lost_job
    call = Call(SimpleNamespace(readers=readers), None, None, dry_run=True)
    result = await write_tools.retry_job(call, args.RetryArgs(job_id=job_id))
    assert result.summary == f"Dry run, nothing changed: job {job_id} (LOST) would be queued again, starting afresh."


def test_a_lost_jobs_task_is_still_working():
    assert tasks.TASK_STATUS["LOST"] == "working"
    assert {state: tasks.TASK_STATUS[state] for state in ("SUCCEEDED", "FAILED", "CANCELLED")} == {
        "SUCCEEDED": "completed", "FAILED": "failed", "CANCELLED": "cancelled"}
