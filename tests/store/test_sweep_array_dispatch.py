"""A sweep's trials dispatched to a pooled node on a real SQLite file (issue 32 item 4): each goes
as a task of its sweep's array (``JobSpecWire.array``: its trial number, the sweep's max-parallel as
the throttle), past the sweep's limit, in one pass, and again after the limit is full; a local
node's dispatch carries none."""

from __future__ import annotations


from gpuplaned.protocol.agent import ArrayTask, GpuInfo, Hello, JobStatus, PooledCapacity
from gpuplaned.protocol.job_wire import JobSpec
from gpuplaned.service.passes.dispatch import schedule
from gpuplaned.store import job_rows, sweep_rows
from gpuplaned.store.sweep_rows import SweepRow

NOW = 1_700_000_000_000


def _sweep(conn, trials, *, max_parallel=None):
    conn.execute("BEGIN")
    sweep_rows.insert_sweep(conn, SweepRow(
        id="swp_TEST", name="lr", kind="grid", template="{}", parameters={}, metric=None, goal="min",
        max_parallel=max_parallel, paused=False, pause_reason=None, early_stop=None, retry_on=None,
        experiment_id=None, experiment=None, token_id=None, created_at=NOW, cancelled_at=None))
    nodes = job_rows.capacities(conn)
    marks = [(job_rows.insert_job(conn, JobSpec(name=f"lr-{i}", command=("true",), cwd="/", env={}, gpu=1), NOW,
                                  nodes), i, f'{{"i":{i}}}') for i in range(trials)]
    sweep_rows.mark_trials(conn, "swp_TEST", marks)
    conn.execute("COMMIT")
    return [job_id for job_id, _, _ in marks]


def test_every_trial_a_pooled_node_may_hold_goes_in_one_pass_as_its_arrays_task(conn):
    hpc, _ = job_rows.register_node(conn, Hello("hpc", "0", (), runner="slurm", pooled=PooledCapacity(1, 4)), NOW)
    trials = _sweep(conn, 6, max_parallel=2)
    first = schedule(conn, NOW, {hpc})
    assert [(d.job.job_id, d.node_id, d.job.array) for d in first] == [
        (trials[i], hpc, ArrayTask("swp_TEST", i, 2)) for i in range(4)]
    assert schedule(conn, NOW, {hpc}) == []  # max_jobs reached
    assert sweep_rows.trial_nodes(conn, "swp_TEST") == [hpc]
    for d in first[:2]:  # two end: two more go, though the sweep has 2 on the node (its limit) still
        job_rows.apply_status(conn, hpc, JobStatus(d.job.job_id, 1, "SUCCEEDED", exit_code=0), NOW)
    assert [d.job.array for d in schedule(conn, NOW, {hpc})] == [ArrayTask("swp_TEST", i, 2) for i in (4, 5)]


def test_a_local_nodes_trials_keep_the_hold_and_carry_no_array(conn):
    box, _ = job_rows.register_node(conn, Hello("box", "0", tuple(GpuInfo(i, "g", 1) for i in range(4))), NOW)
    trials = _sweep(conn, 4, max_parallel=2)
    placed = schedule(conn, NOW, {box})
    assert [(d.job.job_id, d.job.array) for d in placed] == [(trials[0], None), (trials[1], None)]


def test_a_pooled_nodes_hello_gives_each_active_trial_its_sweeps_limit_now_and_a_plain_job_none(conn):
    hello = Hello("hpc", "0", (), runner="slurm", pooled=PooledCapacity(1, 4))
    hpc, _ = job_rows.register_node(conn, hello, NOW)
    trials = _sweep(conn, 2, max_parallel=2)
    schedule(conn, NOW, {hpc})
    sweep_rows.update_settings(conn, "swp_TEST", max_parallel=3, metric=None, goal="min", early_stop=None,
                               retry_on=None)  # raised while the node was away
    conn.execute("BEGIN")
    plain = job_rows.insert_job(conn, JobSpec(name="plain", command=("true",), cwd="/", env={}, gpu=1), NOW,
                                job_rows.capacities(conn))
    conn.execute("COMMIT")
    schedule(conn, NOW, {hpc})
    _, active = job_rows.register_node(conn, hello, NOW)
    assert sorted((a.job_id, a.sweep_id, a.sweep_max_parallel) for a in active) == sorted(
        [(trials[0], "swp_TEST", 3), (trials[1], "swp_TEST", 3), (plain, None, 0)])
