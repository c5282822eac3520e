"""A sweep on a Slurm node is one throttled array job (issue 32 item 4): a real daemon with
``[node] runner = "slurm"`` on the private Slurm fixture (two fake GPUs), a grid sweep of four
trials with max-parallel 1, then ``gpuplanectl sweep set --max-parallel 2`` while it runs."""

from __future__ import annotations

from helpers import wait_for
from test_slurm_node import slurm_node

# Each trial records when it started and ended and writes its value; the third to start, and
# any after it, waits for the go file, so the throttle can be raised while tasks are pending.
TRIAL = ('date +%s.%N > start-$0; sleep 1; echo "$0" > value-$0; '
         'if [ "$(ls start-* | wc -l)" -ge 3 ]; then while [ ! -e go ]; do sleep 0.1; done; fi; '
         'date +%s.%N > end-$0')


def test_a_sweep_is_one_throttled_array_and_a_new_max_parallel_reaches_slurm(daemon_factory, slurm_factory):
    cluster = slurm_factory(gpus=2)
    jobs = slurm_node(daemon_factory, cluster)
    sweep = jobs.client.post("/api/v1/sweeps", {
        "name": "arr", "job": {"command": ["sh", "-c", TRIAL, "{x}"], "cwd": str(jobs.workdir), "gpu": 1},
        "grid": {"x": [0, 1, 2, 3]}, "max_parallel": 1})["sweep"]
    trials = {t["trial"]: t["job_id"] for t in jobs.client.get(f"/api/v1/sweeps/{sweep['id']}")["sweep"]["trials"]}

    def started():
        return sorted(int(p.name.removeprefix("start-")) for p in jobs.workdir.glob("start-*"))

    wait_for(lambda: len(started()) == 3, 90, what="three trials to have started, one after another")
    # One Slurm array job holds the four trials; the last waits for Slurm's throttle.
    rows = [line.split("|") for line in cluster.client("squeue", "-h", "-o", "%F|%j|%K|%T").stdout.split()]
    assert {(array_id, name) for array_id, name, _, _ in rows} == {(rows[0][0], f"gp-sweep-{sweep['id']}-0-1")}
    array_id = rows[0][0]
    assert sorted(state for *_, state in rows) == ["PENDING", "RUNNING"]
    [last] = set(range(4)) - set(started())
    assert [task for _, _, task, state in rows if state == "PENDING"] == [str(last)]  # one left: no range
    wait_for(lambda: jobs.get(trials[last])["wait_reason"] == "Slurm: JobArrayTaskLimit", 30,
             what="the pending trial to say why Slurm holds it")
    assert jobs.get(trials[last])["status"] == "DISPATCHING"

    raised = jobs.daemon.run_ctl("sweep", "set", sweep["id"], "--max-parallel", "2")
    assert raised.returncode == 0, raised.stderr
    assert "ArrayTaskThrottle=2" in wait_for(
        lambda: (out := cluster.client("scontrol", "-o", "show", "job", array_id).stdout)
        and "ArrayTaskThrottle=2" in out and out, 30, what="scontrol to show the new throttle")
    # The raised throttle lets the last trial run beside the third, which still waits for go.
    wait_for(lambda: len(started()) == 4, 60, what="the fourth trial to start under the raised throttle")
    (jobs.workdir / "go").touch()

    for trial, job_id in trials.items():
        done = jobs.wait(job_id, timeout=60)
        assert done["status"] == "SUCCEEDED", done
        assert jobs.file(f"value-{trial}").read_text() == f"{trial}\n"
    spans = sorted((float(jobs.file(f"start-{t}").read_text()), float(jobs.file(f"end-{t}").read_text()), t)
                   for t in range(4))
    first_three = spans[:3]  # under max-parallel 1: never two at once
    assert all(earlier[1] <= later[0] for earlier, later in zip(first_three, first_three[1:])), spans
    assert spans[3][0] < spans[2][1]  # under 2: the fourth ran while the third did
    tasks = cluster.client("scontrol", "-o", "show", "job", array_id).stdout.splitlines()
    assert len(tasks) == 4 and all("JobState=COMPLETED" in task for task in tasks)
