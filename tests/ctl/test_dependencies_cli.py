"""``gpuplanectl submit --after/--after-any/--after-failed`` and ``job retry --with-dependants`` on a
real daemon running real jobs: a failure in the middle of a chain cancels the rest, the list
shows why a job waits, and a retry with dependants runs the chain to the end."""

from __future__ import annotations

import json
import re

from jobhelpers import ctl, show, submit, wait_job

GATE = "while [ ! -e go ]; do sleep 0.05; done; test -e ok"  # waits for `go`, then fails unless `ok` exists


def _row(out: str, job_id: str) -> list[str]:
    line = next(line for line in out.splitlines() if line.startswith(job_id))
    return re.split(r"\s{2,}", line)


def test_a_failure_in_the_middle_of_a_chain_cancels_it_and_retry_with_dependants_runs_it(gpu_daemon, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    a = submit(gpu_daemon, "--name", "a", "--", "sh", "-c", GATE, cwd=work)["id"]
    b = submit(gpu_daemon, "--name", "b", "--after", a, "--", "sh", "-c", "echo b >> order", cwd=work)["id"]
    c = submit(gpu_daemon, "--name", "c", "--after", b, "--", "sh", "-c", "echo c >> order", cwd=work)["id"]
    cleanup = submit(gpu_daemon, "--after-failed", a, "--", "sh", "-c", "echo cleanup >> order", cwd=work)["id"]
    wait_job(gpu_daemon, a, lambda j: j["status"] == "RUNNING", what="a to run")

    listed = ctl(gpu_daemon, "jobs")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[0].split()[-1] == "WAIT"
    assert _row(listed.stdout, b)[-1] == f"after {a} (RUNNING)"
    assert _row(listed.stdout, c)[-1] == f"after {b} (QUEUED)"
    assert _row(listed.stdout, cleanup)[-1] == f"after a failure among {a} (RUNNING)"
    shown = ctl(gpu_daemon, "job", "show", b)
    assert f"waits:" in shown.stdout and f"after {a} (RUNNING)" in shown.stdout
    assert re.search(rf"^after:\s+{a} \(RUNNING\)$", shown.stdout, re.M), shown.stdout
    assert re.search(rf"^dependants:\s+{c} \(QUEUED\)$", shown.stdout, re.M), shown.stdout

    dry = ctl(gpu_daemon, "submit", "--dry-run", "--after", a, "--", "true", cwd=work)
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines()[:2] == ["would wait in the queue", f"  after {a} (RUNNING)"]

    (work / "go").touch()  # a fails (no `ok`)
    assert wait_job(gpu_daemon, a)["status"] == "FAILED"
    for job_id, parent in ((b, a), (c, b)):
        job = wait_job(gpu_daemon, job_id)
        assert (job["status"], job["failure_reason"]) == ("CANCELLED", "DEPENDENCY_FAILED")
        assert job["failure_message"] == f"dependency {parent} {'FAILED' if parent == a else 'CANCELLED'}"
    assert wait_job(gpu_daemon, cleanup)["status"] == "SUCCEEDED"  # --after-failed: a failed, so it ran
    assert show(gpu_daemon, a)["dependants"] == [{"job_id": b, "status": "CANCELLED"},
                                                 {"job_id": cleanup, "status": "SUCCEEDED"}]

    alone = ctl(gpu_daemon, "job", "retry", c)
    assert alone.returncode == 1
    assert f"can never run: dependency {b} CANCELLED" in alone.stderr

    (work / "ok").touch()
    again = ctl(gpu_daemon, "job", "retry", a, "--with-dependants")
    assert again.returncode == 0, again.stderr
    assert f"queued again behind it: {b}" in again.stdout
    for job_id in (a, b, c):
        assert wait_job(gpu_daemon, job_id)["status"] == "SUCCEEDED"
    assert (work / "order").read_text().split() == ["cleanup", "b", "c"]
    assert show(gpu_daemon, cleanup)["status"] == "SUCCEEDED"  # not run again: it was not cancelled


def test_after_any_runs_whatever_the_outcome_and_after_failed_is_cancelled_when_all_succeeded(gpu_daemon, tmp_path):
    fails = submit(gpu_daemon, "--", "false", cwd=tmp_path)["id"]
    works = submit(gpu_daemon, "--", "true", cwd=tmp_path)["id"]
    anyway = submit(gpu_daemon, "--after-any", f"{fails},{works}", "--", "true", cwd=tmp_path)
    assert anyway["after"] == "ended"
    assert {d["job_id"] for d in anyway["dependencies"]} == {fails, works}
    assert wait_job(gpu_daemon, anyway["id"])["status"] == "SUCCEEDED"
    notify = submit(gpu_daemon, "--after-failed", works, "--", "true", cwd=tmp_path)
    assert (notify["status"], notify["failure_reason"]) == ("CANCELLED", "DEPENDENCY_FAILED")  # at once: it ended
    said = ctl(gpu_daemon, "submit", "--after", fails, "--", "true", cwd=tmp_path)
    assert said.returncode == 0, said.stderr
    assert re.fullmatch(rf"job_\w+ CANCELLED \(DEPENDENCY_FAILED\): dependency {fails} FAILED\n", said.stdout)


def test_unknown_ids_and_two_conditions_are_refused(gpu_daemon, tmp_path):
    known = submit(gpu_daemon, "--", "true", cwd=tmp_path)["id"]
    refused = ctl(gpu_daemon, "submit", "--json", "--after", f"{known},job_nope1,job_nope2", "--", "true",
                  cwd=tmp_path)
    assert refused.returncode == 2
    error = json.loads(refused.stdout or refused.stderr)["error"]
    assert error["message"] == "after: no job job_nope1, job_nope2"
    assert error["details"]["unknown"] == ["job_nope1", "job_nope2"]
    both = ctl(gpu_daemon, "submit", "--after", known, "--after-any", known, "--", "true", cwd=tmp_path)
    assert both.returncode == 2
    assert "give one of --after, --after-any" in both.stderr
    dry = ctl(gpu_daemon, "submit", "--dry-run", "--after", "job_nope1", "--", "true", cwd=tmp_path)
    assert dry.returncode == 1
    assert dry.stdout.splitlines()[:2] == ["would be refused", "  after: no job job_nope1"]
    bad = ctl(gpu_daemon, "submit", "--after", "train", "--", "true", cwd=tmp_path)
    assert bad.returncode == 2
    assert "after" in bad.stderr and "job ids" in bad.stderr
    assert not [j for j in json.loads(ctl(gpu_daemon, "jobs", "--json").stdout)["jobs"] if j["id"] != known]
