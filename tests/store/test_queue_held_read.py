"""``job_rows.queued_held`` on a real SQLite file: of the queue as a pass reads it (its first
``limit`` jobs in order, a held sweep's settled trials left out), the jobs of the groups and
sweeps named and those whose stored reason is a hold; and a pass with no slot left gives the
jobs of a sweep whose limit does not bind no reason, reading only what a hold concerns."""

from __future__ import annotations

from gpuplaned.domain.queue import is_hold
from gpuplaned.protocol.agent import Hello
from gpuplaned.protocol.job_wire import JobSpec
from gpuplaned.service.passes.dispatch import schedule
from gpuplaned.store import group_rows, job_rows, sweep_rows
from gpuplaned.store.database import open_writer
from gpuplaned.store.sweep_rows import SweepRow

NOW = 1_700_000_000_000
REASONS = [None, "queue paused", "group a paused", "sweep s paused", "Group x", "grouped", "no CPU place"]


def test_the_held_read_is_the_queue_read_filtered(tmp_path):
    conn = open_writer(tmp_path / "gpuplane.db")
    node, _ = job_rows.register_node(conn, Hello("n", "0", (), max_cpu_jobs=1), NOW)
    for sweep in ("s", "t"):
        sweep_rows.insert_sweep(conn, SweepRow(
            id=sweep, name=sweep, kind="grid", template="{}", parameters={}, metric=None, goal="min",
            max_parallel=None, paused=False, pause_reason=None, early_stop=None, retry_on=None, experiment_id=None,
            experiment=None, token_id=None, created_at=NOW, cancelled_at=None))
    for group in ("a", "b"):
        group_rows.ensure_group(conn, group)
    nodes = job_rows.capacities(conn, {node})
    for i in range(40):
        job_id = job_rows.insert_job(conn, JobSpec(name=f"j{i}", command=("true",), cwd="/", env={}, gpu=0),
                                     NOW + i, nodes)
        conn.execute("UPDATE jobs SET queue_reason = ?, group_name = ?, sweep_id = ? WHERE id = ?",
                     (REASONS[i % len(REASONS)], ["a", "b", None][i % 3], ["s", "t", None, None][i % 4], job_id))
    settled = {"s": "sweep s paused"}
    for limit in (10, 25, 1000):
        whole = list(job_rows.queued_jobs(conn, limit, settled))  # the window: what the pass would read
        for groups, sweeps, said in ((frozenset(), frozenset(), {}), (frozenset({"a"}), frozenset({"t"}), {}),
                                     (frozenset({"b"}), frozenset({"s", "t"}), {"t": "group a paused"})):
            wanted = [j for j in whole if (j.group in groups or j.sweep in sweeps
                                           or (j.stored_reason is not None and is_hold(j.stored_reason)))
                      and not (j.sweep in said and j.stored_reason == said[j.sweep])]
            assert job_rows.queued_held(conn, groups, sweeps, limit, settled, said) == wanted
    conn.close()


def test_a_pass_with_no_slot_left_gives_a_group_that_holds_nothing_no_read(tmp_path):
    conn = open_writer(tmp_path / "gpuplane.db")
    node, _ = job_rows.register_node(conn, Hello("n", "0", (), max_cpu_jobs=1), NOW)
    group_rows.set_parallel(conn, "big", 100)
    nodes = job_rows.capacities(conn, {node})
    jobs = []
    for i in range(50):
        jobs.append(job_rows.insert_job(conn, JobSpec(name=f"j{i}", command=("true",), cwd="/", env={}, gpu=0),
                                        NOW + i, nodes))
        group_rows.put_in_group(conn, jobs[-1], "big")
    said = []
    conn.set_trace_callback(said.append)
    assert [d.job.job_id for d in schedule(conn, NOW, {node})] == [jobs[0]]
    updates = [s for s in said if s.startswith("UPDATE jobs SET queue_reason")]
    assert updates == []  # nothing held, nothing said
    assert any("queue_reason = 'queue paused' OR substr" in s for s in said)  # the rest: only what a hold concerns
    conn.close()
