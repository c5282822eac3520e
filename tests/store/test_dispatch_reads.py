"""What a dispatch reads (``job_rows.record_dispatch``) on a real database: its job's row once,
the columns it needs and no more, and what it sends is the job as submitted."""

from __future__ import annotations

from gpuplaned.protocol.agent import Hello
from gpuplaned.protocol.job_wire import JobSpec
from gpuplaned.service.passes.dispatch import schedule
from gpuplaned.store import job_rows
from gpuplaned.store.database import open_writer

NOW = 1_700_000_000_000


def test_a_dispatch_reads_its_job_in_one_narrow_statement(tmp_path):
    conn = open_writer(tmp_path / "gpuplane.db")
    node, _ = job_rows.register_node(conn, Hello("n1", "0", (), max_cpu_jobs=1), NOW)
    spec = JobSpec(name="train", command=("python", "t.py", "--lr", "0.1"), cwd="/w", env={"A": "1"}, gpu=0,
                   timeout_s=60.0, stop_grace_s=3.0, secret_env_names=("TOKEN",), secret_env_sealed="sealed-blob")
    job_id = job_rows.insert_job(conn, spec, NOW, job_rows.capacities(conn, {node}))
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    [sent] = schedule(conn, NOW, {node})
    conn.set_trace_callback(None)
    reads = [s for s in statements if s.lstrip().upper().startswith("SELECT") and "FROM jobs WHERE id" in s]
    assert len(reads) == 1, reads  # the job's row, once (its sealed env with it)
    narrow = reads[0].replace("json_extract(resources, '$.gpu')", "")  # its GPU count alone (JobSpecWire.gpus)
    assert "policies" not in narrow and "resources" not in narrow  # not the whole row
    wire = sent.job
    assert (wire.job_id, wire.attempt, wire.name, wire.argv, wire.cwd, wire.env, wire.timeout_s, wire.stop_grace_s,
            wire.evaluation) == (job_id, 1, "train", ("python", "t.py", "--lr", "0.1"), "/w", {"A": "1"}, 60.0, 3.0,
                                 False)
    assert sent.secret_env_sealed == "sealed-blob" and "TOKEN" not in wire.env
    assert job_rows.get_job(conn, job_id).status == "DISPATCHING"
    conn.close()
