"""The command layer against a real private Slurm: timeouts, the scrubbed environment, the
programs' paths, and the typed failures."""

import os
import stat
import time

import pytest

from gpuplaned.slurm import AccountingDisabled, SlurmCli, SlurmNotInstalled, SlurmPaths, SlurmUnreachable, poll
from gpuplaned.slurm.commands import Capabilities, scrubbed_environment
from gpuplaned.slurm.parsing import SlurmParseError, parse_version
from gpuplaned.slurm.submission import find_by_name


async def test_a_stopped_controller_is_slurm_unreachable_within_the_timeout_never_a_hang(slurm):
    cli = slurm.cli(timeout_s=1.5)
    slurm.pause_controller()
    try:
        started = time.monotonic()
        with pytest.raises(SlurmUnreachable, match=r"did not answer `squeue .*`: no answer within 1.5 s"):
            await poll(cli, ["1"])
        took = time.monotonic() - started
    finally:
        slurm.resume_controller()
    assert 1.5 <= took < 4.0
    assert await poll(cli, ["1"]) == {}  # answered again: no such job


async def test_a_dead_controller_is_slurm_unreachable_in_the_clients_words(slurm):
    cli = slurm.cli(timeout_s=30.0)
    ctld = slurm.procs["slurmctld"]
    ctld.terminate()
    ctld.wait(10)
    started = time.monotonic()
    with pytest.raises(SlurmUnreachable) as caught:
        await poll(cli, ["1"])
    # The client gives up on a refused connection after its own retries (about 10 s), well
    # inside our 30 s, and says why.
    assert "Unable to contact slurm controller" in caught.value.why
    assert time.monotonic() - started < 30.0


async def test_the_clients_variables_in_the_environment_change_nothing(slurm):
    """SQUEUE_USERS, SQUEUE_NAMES and SQUEUE_STATES filter squeue even under -j/-n, so a job
    would vanish from the poll and read as lost; SLURM_TIME_FORMAT rewrites scontrol's times.
    (-o wins over SQUEUE_FORMAT, but a format variable is scrubbed all the same.)"""
    hiding = {"SQUEUE_USERS": "nobody", "SQUEUE_NAMES": "other", "SQUEUE_STATES": "COMPLETED",
              "SQUEUE_FORMAT": "%j %i", "SQUEUE_FORMAT2": "name", "SACCT_FORMAT": "JobName",
              "SLURM_TIME_FORMAT": "relative", "SBATCH_EXPORT": "ALL"}
    job_id = slurm.client("sbatch", "--parsable", "-J", "gp-x-1", "-o", "/dev/null", "--wrap", "sleep 60").stdout.strip()
    cli = SlurmCli(SlurmPaths(), timeout_s=10, env={**slurm.env, **hiding})
    assert list(await poll(cli, [job_id])) == [job_id]
    assert await find_by_name(cli, "gp-x-1") == [job_id]
    shown = (await cli.run("scontrol", "-o", "show", "job", job_id)).stdout
    assert "SubmitTime=20" in shown  # ISO, not "relative" ("SubmitTime=08:05:27")
    # Unscrubbed, the poll's squeue loses the job.
    saved = os.environ.copy()
    try:
        os.environ.update(hiding)
        assert slurm.client("squeue", "-h", "-t", "all", "-j", job_id, "-o", "%i").stdout == ""
    finally:
        os.environ.clear()
        os.environ.update(saved)


def test_the_scrub_keeps_slurm_conf_and_the_rest():
    env = scrubbed_environment({"SLURM_CONF": "/c", "PATH": "/bin", "SQUEUE_FORMAT": "%i", "SACCT_FORMAT": "x",
                                "SLURM_TIME_FORMAT": "relative", "SBATCH_GRES": "gpu:8", "SLURM_BITSTR_LEN": "4"})
    assert env == {"SLURM_CONF": "/c", "PATH": "/bin"}


async def test_the_programs_paths_are_the_configurations(slurm, tmp_path):
    wrapper = tmp_path / "my-squeue"
    log = tmp_path / "calls"
    wrapper.write_text(f"#!/bin/sh\necho \"$@\" >> {log}\nexec squeue \"$@\"\n")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    cli = SlurmCli(SlurmPaths(squeue=str(wrapper)), timeout_s=10, env=slurm.env)
    assert await poll(cli, ["5"]) == {}
    assert log.read_text().startswith("-h -t all -j 5 -o ")
    missing = SlurmCli(SlurmPaths(squeue=str(tmp_path / "nosuch")), env=slurm.env)
    with pytest.raises(SlurmNotInstalled, match="'squeue' was not found at '.*nosuch'"):
        await poll(missing, ["5"])
    with pytest.raises(SlurmNotInstalled, match="'sacct' was not found at 'no-such-sacct'"):
        await SlurmCli(SlurmPaths(sacct="no-such-sacct")).run("sacct")


async def test_sacct_without_an_accounting_daemon_is_accounting_disabled(slurm):
    with pytest.raises(AccountingDisabled, match="accounting storage is disabled"):
        await slurm.cli().run("sacct", "-X", "-j", "1")


async def test_the_version_and_what_it_is_known_to_do(slurm):
    version = await slurm.cli().version()
    assert version >= (22, 5, 0)
    debian = Capabilities((22, 5, 8))
    assert not debian.squeue_json_filters and not debian.scontrol_json and not debian.only_job_state
    assert Capabilities((23, 11, 4)).scontrol_json and not Capabilities((23, 11, 4)).only_job_state
    assert Capabilities((23, 11, 5)).only_job_state and not Capabilities((24, 5, 0)).squeue_json_filters
    assert Capabilities((24, 5, 1)).squeue_json_filters


@pytest.mark.parametrize(("text", "version"), [
    ("slurm-wlm 22.05.8\n", (22, 5, 8)), ("slurm 23.11.10\n", (23, 11, 10)), ("slurm 25.11.0-0rc1", (25, 11, 0))])
def test_versions_as_the_clients_print_them(text, version):
    assert parse_version(text) == version


def test_a_version_line_that_is_not_slurms_is_an_error():
    with pytest.raises(SlurmParseError, match="expected 'slurm X.Y.Z'"):
        parse_version("squeue: command not found")
