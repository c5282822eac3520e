"""Retention's three steps on real files and a real database: ``torch.save`` files and an HF
``checkpoint-N/`` dir registered as the watcher registers them; the decision read on a reader,
files deleted off any transaction (a changed one, a symbolic link and one without anything to
check it against refused, saying why), then rows marked and CHECKPOINT_DELETED recorded only
for files that are gone."""

from __future__ import annotations

import json
import os

import pytest
import torch

from gpuplaned import tsdb
from gpuplaned.checkpoints import on_disk
from gpuplaned.checkpoints.files import fingerprint, observe
from gpuplaned.domain.run_records import parse_checkpoints
from gpuplaned.protocol.agent import FoundCheckpoint
from gpuplaned.protocol.checkpoint_ops import CheckpointRemove
from gpuplaned.protocol.converter import unstructure
from gpuplaned.service.api.run_records import store_found, store_records
from gpuplaned.service.passes import retention
from gpuplaned.store import checkpoint_rows, run_owners
from gpuplaned.store.database import open_reader, open_writer
from gpuplaned.store.project_rows import set_primary


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "g.db"
    conn = open_writer(path)
    conn.execute("INSERT INTO jobs (id, name, type, status, command, working_dir, created_at) "
                 "VALUES ('job_a', 'j', 'TRAIN', 'RUNNING', '[]', ?, 1)", (str(tmp_path),))  # the job's folder
    conn.execute("INSERT INTO runs (id, job_id, source, status, created_at) VALUES ('run_a', 'job_a', 'job', 'RUNNING', 1)")
    conn.execute("INSERT INTO metric_definitions (name, direction, created_at) VALUES ('val/loss', 'minimize', 1)")
    set_primary(conn, "val/loss", 1)  # the global primary metric
    reader = open_reader(path)
    yield conn, reader
    reader.close()
    conn.close()


def _found(path: str, step: int, kind: str = "file") -> FoundCheckpoint:
    seen = observe(path)
    return FoundCheckpoint(path, kind, seen.size, seen.mtime_ns // 1_000_000, fingerprint(path), step)


def _save_run(conn, root, losses):
    """A torch.save file at steps 100, 200... with val/loss ``losses`` there; an HF dir last."""
    os.makedirs(root / "checkpoints")
    found = []
    for i, _loss in enumerate(losses[:-1]):
        path = root / "checkpoints" / f"step_{100 * (i + 1)}.pt"
        torch.save({"w": torch.full((64,), float(i))}, path)
        found.append(_found(str(path), 100 * (i + 1)))
    hf = root / "outputs" / f"checkpoint-{100 * len(losses)}"
    hf.mkdir(parents=True)
    torch.save({"w": torch.zeros(8)}, hf / "pytorch_model.bin")
    (hf / "trainer_state.json").write_text(json.dumps({"global_step": 100 * len(losses)}))
    found.append(_found(str(hf), 100 * len(losses), "hf"))
    steps = [100 * (i + 1) for i in range(len(losses))]
    tsdb.ingest(conn, "run", "run_a", {"val/loss": {"step": steps, "ts": steps, "value": losses}}, source="s", seq=1)
    store_found(conn, "job_a", "run_a", found, 10)
    return {ck.step: ck for ck in checkpoint_rows.list_for_run(conn, "run_a")}


def _remove_here(ck, dry_run, roots):
    """Step 2 as the server runs it for a checkpoint of its own node (``checkpoint_files.remove``)."""
    removal = on_disk.remove(CheckpointRemove(ck.path, ck.fingerprint, ck.size_bytes, dry_run, roots))
    return retention.Outcome(ck, removal.gone, removal.already_gone, removal.refused)


def _prune(conn, reader, keep_best, keep_last, dry_run):
    plan = retention.decide(reader, "run_a", keep_best, keep_last)
    roots = run_owners.checkpoint_roots(reader, "run_a")  # the job's folder: the test's tmp_path
    outcomes = [_remove_here(plan.rows[i], dry_run, roots) for i in plan.choice.deleted]
    gone = [o for o in outcomes if o.gone]
    events = [] if dry_run else retention.mark(conn, plan, gone, "k", 20)
    return unstructure(retention.reply(plan, outcomes, keep_best, keep_last, dry_run)), events  # as the API writes it


def test_a_dry_run_deletes_nothing_then_the_prune_keeps_exactly_the_best_and_the_last(db, tmp_path):
    conn, reader = db
    cks = _save_run(conn, tmp_path / "w", [0.9, 0.1, 0.5, 0.4, 0.7, 0.8])  # best at 200; 600 is the HF dir
    dry, _ = _prune(conn, reader, 1, 2, dry_run=True)
    assert sorted(d["step"] for d in dry["deleted"]) == [100, 300, 400]
    assert all(os.path.exists(ck.path) for ck in cks.values())
    assert {k["step"]: k["reasons"] for k in dry["kept"]} == {200: ["best"], 500: ["last 2"], 600: ["last 2"]}

    done, events = _prune(conn, reader, 1, 2, dry_run=False)
    assert sorted(d["step"] for d in done["deleted"]) == [100, 300, 400] and done["refused"] == []
    assert sorted(s for s, ck in cks.items() if os.path.exists(ck.path)) == [200, 500, 600]
    assert [(e.type, e.step, e.context["checkpoint_id"]) for e in events] == [
        ("CHECKPOINT_DELETED", s, cks[s].id) for s in (100, 300, 400)]
    after = {ck.step: ck.deleted_at for ck in checkpoint_rows.list_for_run(conn, "run_a")}
    assert after == {100: 20, 200: None, 300: 20, 400: 20, 500: None, 600: None}
    again, events = _prune(conn, reader, 1, 1, dry_run=False)  # the HF dir goes whole
    assert [d["step"] for d in again["deleted"]] == [500] and events[0].step == 500
    assert _prune(conn, reader, 1, 1, dry_run=False)[0]["deleted"] == []


def test_a_file_that_changed_since_it_was_registered_is_refused(db, tmp_path):
    conn, reader = db
    cks = _save_run(conn, tmp_path / "w", [0.1, 0.5, 0.6, 0.7, 0.8])
    torch.save({"w": torch.ones(128)}, cks[200].path)  # rewritten, not found again yet
    hf = cks[500].path
    os.symlink(cks[300].path, str(tmp_path / "link.pt"))
    store_records(conn, "run_a", "job_a", [], parse_checkpoints({"checkpoints": [
        {"path": str(tmp_path / "link.pt"), "step": 250, "size_bytes": 1}, {"path": "/nowhere/x.pt", "step": 260},
        {"path": str(tmp_path / "sized.pt"), "step": 270, "size_bytes": 5}]}), 11)
    (tmp_path / "sized.pt").write_bytes(b"123456")  # six bytes, registered as five
    done, events = _prune(conn, reader, 1, 1, dry_run=False)
    refused = {r["step"]: r["reason"] for r in done["refused"]}
    assert refused == {200: "changed since it was registered (its fingerprint differs)",
                       250: "a symbolic link: what it points to is not GPUPlane's to delete",
                       270: "changed since it was registered (size 6, registered 5)"}
    assert os.path.exists(cks[200].path) and os.path.exists(tmp_path / "sized.pt")
    assert os.path.exists(cks[300].path) is False and os.path.exists(hf)  # the link's target went as step 300
    gone = {d["step"]: d["already_gone"] for d in done["deleted"]}
    assert gone == {260: True, 300: False, 400: False}  # /nowhere/x.pt was never there: marked, said so
    assert next(e for e in events if e.step == 260).context["already_gone"] is True
    marked = {ck.step for ck in checkpoint_rows.list_for_run(conn, "run_a") if ck.deleted_at}
    assert marked == {260, 300, 400}


def test_a_script_registered_file_without_a_size_is_refused(db, tmp_path):
    conn, reader = db
    for step in (1, 2):
        (tmp_path / f"{step}.pt").write_bytes(b"x")
    store_records(conn, "run_a", "job_a", [], parse_checkpoints({"checkpoints": [
        {"path": str(tmp_path / f"{s}.pt"), "step": s} for s in (1, 2)]}), 1)
    done, _ = _prune(conn, reader, 0, 1, dry_run=False)
    assert [r["reason"] for r in done["refused"]] == [
        "registered without a fingerprint: a size alone cannot tell that it is the same file"]
    assert (tmp_path / "1.pt").exists()
