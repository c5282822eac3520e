"""``gpuplanectl diagnose``/``compare``/``explain``'s text: the summary, findings worst first
with where each one's evidence is, then what to do (the commands run against a daemon in
tests/e2e/test_e2e_diagnosis.py)."""

from __future__ import annotations

from gpuplanectl.commands.diagnosis import report_text


def test_report_reads_like_a_short_report():
    found = {"summary": "job job_1 attempt 1: out of GPU memory", "next_actions": ["halve the batch size"],
             "findings": [{"kind": "cause", "severity": "critical", "claim": "out of GPU memory", "facts": {},
                           "evidence": [
                               {"kind": "log", "job_id": "job_1", "attempt": 1, "stream": "stderr",
                                "offsets": [35, 35], "lines": ["torch.OutOfMemoryError: CUDA out of memory."]},
                               {"kind": "gpu", "node_id": "nd_1", "gpu": 0, "name": "gpu0.memory_used_mb",
                                "ts": [2000, 2000], "values": [79000.0]},
                               {"kind": "metric", "run_id": "run_1", "name": "loss", "steps": [3, 9], "values": []},
                               {"kind": "event", "id": "ev_1", "type": "LOSS_NAN"},
                               {"kind": "checkpoint", "id": "ck_1"}]}]}
    assert report_text(found).splitlines() == [
        "job job_1 attempt 1: out of GPU memory",
        "",
        "!! [cause] out of GPU memory",
        "     see stderr of job_1 attempt 1, bytes 35-35: torch.OutOfMemoryError: CUDA out of memory.",
        "     see gpu0.memory_used_mb on nd_1, ts 2000-2000",
        "     see metric loss of run_1, steps 3-9",
        "     see event ev_1 (LOSS_NAN)",
        "     see checkpoint ck_1",
        "",
        "next:",
        "  - halve the batch size",
    ]


def test_a_clean_report():
    assert report_text({"summary": "run run_1 (SUCCEEDED), no problem found", "findings": [],
                        "next_actions": []}) == "run run_1 (SUCCEEDED), no problem found"
