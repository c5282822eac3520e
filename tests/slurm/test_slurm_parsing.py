"""The parsers on what Slurm 22.05, 23.11, 24.05 and 25.11 print (tests/slurm/recorded/, whose
README says how each was obtained), and on what they must refuse."""

from pathlib import Path

import pytest

from gpuplaned.slurm.parsing import (
    ExitCode,
    JobState,
    SlurmParseError,
    parse_exit_code,
    parse_sacct,
    parse_sbatch_parsable,
    parse_scontrol_jobs,
    parse_squeue,
    parse_state,
    parse_version,
    reason_name,
)

RECORDED = Path(__file__).resolve().parent / "recorded"
RELEASES = ("22.05", "23.11", "24.05", "25.11")


def recorded(release: str, name: str) -> str:
    return (RECORDED / release / name).read_text()


@pytest.mark.parametrize("release", RELEASES)
def test_the_version_file_is_the_release(release):
    assert parse_version(recorded(release, "version.txt"))[:2] == tuple(int(p) for p in release.split("."))


@pytest.mark.parametrize("release", RELEASES)
def test_squeue_states_reasons_nodes_and_arrays(release):
    rows = {row.name: row for row in parse_squeue(recorded(release, "squeue.txt"))}
    seen = {name: (row.state.name, row.reason, row.nodes) for name, row in rows.items()}
    assert seen["gp-done-1"] == ("COMPLETED", None, "vm")
    assert seen["gp-failed-1"] == ("FAILED", "NonZeroExitCode", "vm")
    assert seen["gp-cancelled-1"] == ("CANCELLED", "Resources", "")
    assert seen["gp-running-1"] == ("RUNNING", None, "vm")
    assert seen["gp-resources-1"] == ("PENDING", "Resources", "")
    assert seen["gp-priority-1"] == ("PENDING", "Priority", "")
    assert seen["gp-held-1"] == ("PENDING", "JobHeldUser", "")
    assert seen["gp-after-1"] == ("PENDING", "Dependency", "")
    array = rows["gp-array-1"]
    assert (array.job_id, array.array_job_id, array.array_task, array.display_id) == ("9", "9", "0-3%1", "9_[0-3%1]")
    assert rows["gp-running-1"].array_job_id is None and rows["gp-running-1"].array_task is None
    assert rows["gp-done-1"].state.ended and rows["gp-running-1"].state.active and rows["gp-held-1"].state.pending
    if release != "22.05":
        assert seen["gp-qos-1"] == ("PENDING", "QOSMaxGRESPerUser", "")


@pytest.mark.parametrize("release", RELEASES)
def test_a_reason_with_its_detail(release):
    [squeue] = parse_squeue(recorded(release, "squeue_drained.txt"))
    [scontrol] = parse_scontrol_jobs(recorded(release, "scontrol_show_job_drained.txt"))
    assert squeue.reason == "ReqNodeNotAvail, UnavailableNodes:vm"
    assert scontrol.reason == "ReqNodeNotAvail,_UnavailableNodes:vm"  # scontrol makes spaces "_"
    assert reason_name(squeue.reason) == reason_name(scontrol.reason) == "ReqNodeNotAvail"


@pytest.mark.parametrize("release", RELEASES)
def test_scontrol_show_job(release):
    jobs = {job.name: job for job in parse_scontrol_jobs(recorded(release, "scontrol_show_job.txt"))}
    assert len(jobs) == 9
    done, failed, cancelled = jobs["gp-done-1"], jobs["gp-failed-1"], jobs["gp-cancelled-1"]
    assert (done.state.name, done.exit_code, done.nodes, done.restarts) == ("COMPLETED", ExitCode(0, 0), "vm", 0)
    assert (failed.state.name, failed.reason, failed.exit_code) == ("FAILED", "NonZeroExitCode", ExitCode(3, 0))
    assert (cancelled.state.name, cancelled.nodes) == ("CANCELLED", "")
    assert jobs["gp-after-1"].fields["Dependency"] == "afterok:4(unfulfilled)"
    array = jobs["gp-array-1"]
    assert (array.array_job_id, array.array_task, array.fields["ArrayTaskThrottle"]) == ("9", "0-3%1", "1")
    assert jobs["gp-running-1"].gpus_per_node == 1 and jobs["gp-resources-1"].gpus_per_node == 1
    assert done.gpus_per_node == 0
    [alone] = parse_scontrol_jobs(recorded(release, "scontrol_show_job_failed.txt"))
    assert alone == failed


def test_what_differs_between_releases_in_scontrol():
    def running(release):
        return {job.name: job for job in parse_scontrol_jobs(recorded(release, "scontrol_show_job.txt"))}["gp-running-1"]

    assert running("22.05").fields["TresPerNode"] == "gres:gpu:1"
    assert running("23.11").fields["TresPerNode"] == "gres/gpu:1"
    assert "TRES" in running("22.05").fields and "ReqTRES" not in running("22.05").fields
    assert running("23.11").fields["AllocTRES"] == running("23.11").fields["ReqTRES"]
    assert "Power" in running("23.11").fields and "Power" not in running("24.05").fields
    submit_line = running("25.11").fields["SubmitLine"]
    assert submit_line == "sbatch --parsable -o /dev/null -J gp-running-1 --gres=gpu:1 --wrap sleep 300"
    assert running("25.11").fields["WorkDir"] == running("22.05").fields["WorkDir"]


def test_a_value_that_imitates_a_key_does_not_replace_it():
    line = ("JobId=5 JobName=gp-x-1 JobState=FAILED Reason=NonZeroExitCode Dependency=(null) Restarts=2 "
            "ExitCode=3:0 Command=(null) SubmitLine=sbatch --wrap echo JobState=COMPLETED ExitCode=0:0 "
            "WorkDir=/w")
    [job] = parse_scontrol_jobs(line + "\n")
    assert (job.state.name, job.exit_code, job.restarts, job.fields["WorkDir"]) == ("FAILED", ExitCode(3, 0), 2, "/w")


@pytest.mark.parametrize("release", RELEASES)
def test_sacct(release):
    rows = {row.name: row for row in parse_sacct(recorded(release, "sacct.txt"))}
    assert (rows["gp-failed-1"].state, rows["gp-failed-1"].exit_code) == (JobState("FAILED"), ExitCode(3, 0))
    cancelled = rows["gp-cancelled-1"]
    assert (cancelled.state.name, cancelled.state.detail, cancelled.nodes) == ("CANCELLED", "by 0", "")
    assert cancelled.state.ended
    array = rows["gp-array-1"]
    assert (array.job_id, array.raw_id, array.reason) == ("9_[0-3%1]", "9", "Priority")


@pytest.mark.parametrize("release", RELEASES)
def test_the_errors_recorded_are_the_ones_the_command_layer_matches(release):
    from gpuplaned.slurm.polling import INVALID_JOB_ID

    assert INVALID_JOB_ID in recorded(release, "squeue_unknown_id.txt")


def test_states_with_their_detail_and_a_truncation_mark():
    assert parse_state("CANCELLED by 1000") == JobState("CANCELLED", "by 1000")
    assert parse_state("COMPLETED+") == JobState("COMPLETED")
    assert parse_state("EXPEDITING").pending  # 25.11's expedited requeue
    assert parse_state("OUT_OF_MEMORY").ended and parse_state("COMPLETING").active


@pytest.mark.parametrize(("parse", "text", "problem"), [
    (parse_state, "SLEEPING", "unknown job state 'SLEEPING'"),
    (parse_exit_code, "3", "an exit code is status:signal"),
    (parse_squeue, "1|1|N/A|1|RUNNING|None|vm\n", "expected the 8 fields"),
    (parse_squeue, "x|1|N/A|1|RUNNING|None|vm|n\n", "the job id is not a number"),
    (parse_squeue, "1 RUNNING\n", "expected the 8 fields"),  # SQUEUE_FORMAT won: never "no jobs"
    (parse_scontrol_jobs, "JobId=1 JobName=x JobState=RUNNING\n", "no Reason="),
    (parse_sacct, "1|1|x|COMPLETED|0:0\n", "expected the 7 fields"),
    (parse_sbatch_parsable, "Submitted batch job 12\n", "expected a job id"),
    (parse_sbatch_parsable, "", "expected a job id"),
])
def test_output_not_in_the_format_asked_for_is_an_error_naming_the_line(parse, text, problem):
    with pytest.raises(SlurmParseError, match=problem):
        parse(text)


def test_sbatch_parsable_with_and_without_a_cluster():
    assert parse_sbatch_parsable("12\n") == "12"
    assert parse_sbatch_parsable("12;gpucluster\n") == "12"


def test_gpus_per_node_with_a_type_and_a_count():
    def gpus(tres):
        return parse_scontrol_jobs(f"JobId=1 JobName=x JobState=RUNNING Reason=None ExitCode=0:0 "
                                   f"TresPerNode={tres}\n")[0].gpus_per_node

    assert [gpus("gres:gpu:2"), gpus("gres/gpu:a100:4"), gpus("gres/gpu"), gpus("gres/shard:2")] == [2, 4, 1, 0]
