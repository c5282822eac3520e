"""A sweep's holds in the scheduling pass on a real SQLite file (``dispatch.schedule``): the
trials of a sweep held for the whole pass that already say why are not read again, so a sweep
of more trials than a pass reads (``QUEUE_SCAN_LIMIT``) neither hides the jobs queued behind it
nor costs every pass a read of all of them; a lifted hold lets its trials run again."""

from __future__ import annotations


from gpuplaned.protocol.agent import GpuInfo, Hello
from gpuplaned.protocol.job_wire import JobSpec
from gpuplaned.service.passes.dispatch import schedule
from gpuplaned.store import job_rows, sweep_rows
from gpuplaned.store.sweep_rows import SweepRow

NOW = 1_700_000_000_000


def _sweep(conn, trials, *, max_parallel=None, paused=False):
    conn.execute("BEGIN")
    row = SweepRow(id="swp_TEST", name="big", kind="grid", template="{}", parameters={}, metric=None, goal="min",
                   max_parallel=max_parallel, paused=paused, pause_reason=None, early_stop=None, retry_on=None,
                   experiment_id=None, experiment=None, token_id=None, created_at=NOW, cancelled_at=None)
    sweep_rows.insert_sweep(conn, row)
    nodes = job_rows.capacities(conn)
    marks = []
    for trial in range(trials):
        spec = JobSpec(name=f"big-{trial}", command=("true",), cwd="/", env={}, gpu=1)
        marks.append((job_rows.insert_job(conn, spec, NOW, nodes), trial, f'{{"i":{trial}}}'))
    sweep_rows.mark_trials(conn, "swp_TEST", marks)
    conn.execute("COMMIT")
    return [job_id for job_id, _, _ in marks]


def _placed(conn, node):
    return [d.job.job_id for d in schedule(conn, NOW, {node})]


def test_a_held_sweep_longer_than_a_pass_reads_hides_no_job_behind_it(conn):
    node, _ = job_rows.register_node(conn, Hello("a", "0", (GpuInfo(0, "g", 1), GpuInfo(1, "g", 1))), NOW)
    trials = _sweep(conn, job_rows.QUEUE_SCAN_LIMIT + 100, max_parallel=1)
    later = job_rows.insert_job(conn, JobSpec(name="later", command=("true",), cwd="/", env={}, gpu=1), NOW + 1,
                                job_rows.capacities(conn))
    assert _placed(conn, node) == [trials[0]]  # the sweep's one, and the rest of the read held
    placed = []
    for _ in range(3):  # each pass reads past the trials that say why they wait already
        placed += _placed(conn, node)
    assert placed == [later]
    reasons = {r for (r,) in conn.execute("SELECT queue_reason FROM jobs WHERE sweep_id = 'swp_TEST' AND status = "
                                          "'QUEUED'")}
    assert reasons == {"sweep max-parallel 1 reached"}


def test_a_held_trial_is_read_again_once_its_hold_is_lifted(conn):
    node, _ = job_rows.register_node(conn, Hello("a", "0", (GpuInfo(0, "g", 1),)), NOW)
    trials = _sweep(conn, 3, paused=True)
    assert _placed(conn, node) == []
    assert job_rows.get_job(conn, trials[0]).queue_reason == "sweep big paused"
    assert _placed(conn, node) == []
    conn.execute("BEGIN")
    sweep_rows.set_paused(conn, "swp_TEST", False, None)
    conn.execute("COMMIT")
    assert _placed(conn, node) == [trials[0]]
    assert job_rows.get_job(conn, trials[1]).queue_reason is None  # waits for the one GPU, held by nothing
