"""A spawn that names its attempt: runtime.json, exit.json and the exit event say whose they are."""

from __future__ import annotations

import json

import attrs
import pytest
from shimkit import wait_job_end

from gpuplaned.domain.failures import ExitReason, judge_exit
from gpuplaned.launching.client import SpawnError
from gpuplaned.launching.job_files import CorruptRecord, ExitRecord, read_exit, read_runtime
from gpuplaned.shim.records import EXIT_REASONS, signal_name


async def test_the_records_of_a_named_attempt_carry_its_job_id_and_attempt(launcher, jobs):
    req = attrs.evolve(jobs.request(["sh", "-c", "exit 3"]), job_id="job_7", attempt=2)
    spawned = await launcher.spawn(req)
    record = await wait_job_end(launcher, spawned, req.job_dir)  # the exit event is exit.json's record
    assert (record.job_id, record.attempt, record.exit_code, record.reason) == ("job_7", 2, 3, ExitReason.EXITED)
    runtime = read_runtime(req.job_dir, ("job_7", 2))
    assert (runtime.job_id, runtime.attempt, runtime.pid) == ("job_7", 2, spawned.pid)
    assert read_exit(req.job_dir, ("job_7", 2)) == record
    # Read back as another attempt's, they are not its records.
    with pytest.raises(CorruptRecord, match="the record of job job_7 attempt 2, not of job job_7 attempt 3"):
        read_exit(req.job_dir, ("job_7", 3))
    with pytest.raises(CorruptRecord, match="not of job job_8 attempt 2"):
        read_runtime(req.job_dir, ("job_8", 2))


async def test_a_spawn_failure_of_a_named_attempt_is_recorded_as_its_own(launcher, jobs):
    req = attrs.evolve(jobs.request(["nosuch-command-xyz"]), job_id="job_7", attempt=1)
    with pytest.raises(SpawnError):
        await launcher.spawn(req)
    raw = json.loads((req.job_dir / "exit.json").read_text())
    assert (raw["job_id"], raw["attempt"], raw["reason"]) == ("job_7", 1, "spawn_failed")


async def test_an_unnamed_spawn_writes_the_records_as_before(launcher, jobs):
    req = jobs.request(["true"])
    spawned = await launcher.spawn(req)
    record = await wait_job_end(launcher, spawned, req.job_dir)
    assert (record.job_id, record.attempt) == (None, None)
    assert read_exit(req.job_dir, ("anyone", 5)) == record  # nothing to check it against


@pytest.mark.parametrize("job_id, attempt", [("", 1), ("job_1", 0), ("job_1", True), (5, 1), ("job_1", "1")])
async def test_a_bad_attempt_name_is_a_bad_request(launcher, jobs, job_id, attempt):
    req = attrs.evolve(jobs.request(["true"]), job_id=job_id, attempt=attempt)
    with pytest.raises(SpawnError, match="bad request: (job_id|attempt) must be"):
        await launcher.spawn(req)


def test_the_shim_writes_the_exit_reasons_the_daemon_reads():
    assert EXIT_REASONS == tuple(reason.value for reason in ExitReason)


@pytest.mark.parametrize("signum", [9, 11, 15, 64, 200])
def test_the_daemon_names_a_signal_as_the_shim_does(signum):
    """domain.failures keeps its own copy of the shim's ``signal_name`` (neither may import
    the other's layer): a record without ``signal_name`` is judged with the same name."""
    record = ExitRecord(exit_code=None, signal=signum, signal_name=None, reason=ExitReason.SIGNALED, ended_at=0.0, pid=1)
    assert judge_exit(record).failure == f"SIGNAL({signal_name(signum)})"
