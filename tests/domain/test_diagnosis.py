"""The semantic functions over crafted data, table-driven: each finding fires on the stream
made for it and stays quiet on a healthy one (a noisy but falling loss, a GPU busy while it
trains)."""

from __future__ import annotations

import math
import random
import re

import pytest

from gpuplaned.domain.diagnosis import compare_checkpoints, compare_runs, diagnose_run, explain_failure
from gpuplaned.domain.diagnosis.compare import config_diff
from gpuplaned.domain.diagnosis.curves import Curve, relative_slope, train_loss
from gpuplaned.domain.diagnosis.evidence import bind_node, gpu, log
from gpuplaned.domain.diagnosis.failure import CURVE_POINTS, memory_curve
from gpuplaned.domain.diagnosis.run import nan_window

RUN = {"id": "run_A", "status": "RUNNING", "node_id": "nd_1", "job_id": "job_1"}


def _noisy(n: int, f, seed: int = 1, noise: float = 0.02) -> list[float]:
    rng = random.Random(seed)
    return [f(s) * (1 + rng.uniform(-noise, noise)) for s in range(n)]


def _curve(values, xs=None) -> Curve:
    return Curve.points(list(range(len(values))) if xs is None else xs, values)


def _kinds(found, severity=None) -> list[str]:
    return [f["kind"] for f in found["findings"] if severity is None or f["severity"] == severity]


def _of(found, kind):
    return [f for f in found["findings"] if f["kind"] == kind]


FALLING = _noisy(400, lambda s: 2.0 * math.exp(-s / 150) + 0.1)
FLAT = _noisy(400, lambda s: 0.5, noise=0.005)
RISING = _noisy(400, lambda s: 0.5 + s / 200)


@pytest.mark.parametrize("values, trend, severity", [
    (FALLING, "converging", "info"),
    (FLAT, "plateaued", "info"),
    (RISING, "diverging", "warning"),
])
def test_convergence_by_rolling_slope(values, trend, severity):
    found = diagnose_run(RUN, {"train/loss": _curve(values)})
    conv = _of(found, "convergence")
    assert [(f["facts"]["trend"], f["severity"]) for f in conv] == [(trend, severity)]
    assert conv[0]["evidence"][0]["kind"] == "metric" and conv[0]["evidence"][0]["name"] == "train/loss"


def test_a_noisy_but_healthy_loss_raises_nothing():
    values = _noisy(2000, lambda s: 2.0 * math.exp(-s / 600) + 0.1, noise=0.15, seed=7)
    found = diagnose_run(RUN, {"loss": _curve(values)})
    assert _kinds(found, "warning") == [] and _kinds(found, "critical") == []
    assert "no problem found" in found["summary"]


@pytest.mark.parametrize("eval_values, fires", [
    # 3 evals (each the median of the last 3) over 10% above its best while train falls
    ([1.0, 0.8, 0.7, 0.7, 0.7, 0.85, 0.95, 1.0, 1.05], True),
    ([1.0, 0.8, 0.7, 0.69, 0.68, 0.67], False),
    ([1.0, 0.8, 0.7, 0.72, 0.73, 0.74], False),  # up less than 10%
    ([1.0, 0.8, 0.7, 0.75, 0.85, 0.95], False),  # only 2 evals above
    ([1.0, 0.8, 0.7, 0.7, 0.9, 0.7, 0.9, 0.7, 0.9], False),  # one bad evaluation at a time
])
def test_overfitting_from_eval_against_train_loss(eval_values, fires):
    steps = [50 * k for k in range(len(eval_values))]
    found = diagnose_run(RUN, {"loss": _curve(FALLING[:300]), "val/loss": _curve(eval_values, steps)})
    over = _of(found, "overfitting")
    assert bool(over) == fires
    if fires:
        assert over[0]["facts"]["best_step"] == 150
        assert over[0]["evidence"][0] == {"kind": "metric", "run_id": "run_A", "name": "val/loss",
                                          "steps": [150, 400], "values": [0.7, 1.05]}


def test_nan_at_its_exact_step_from_the_raw_window():
    values = FALLING[:200] + [math.nan] * 5
    coarse = Curve(xs=[0, 100, 200], avg=[1.0, 0.5, None], min=[0.9, 0.4, None], max=[1.1, 0.6, None],
                   nan=[0, 0, 5], count=[100, 100, 5], width=100)
    assert nan_window(coarse) == (200, 299)
    raw = {"loss": {"step": [200, 201, 202], "value": [0.3, math.nan, math.nan]}}
    found = diagnose_run(RUN, {"loss": coarse}, raw=raw)
    nan = [f for f in _of(found, "instability") if f["facts"].get("nan")]
    assert nan[0]["severity"] == "critical" and nan[0]["facts"]["first_bad_step"] == 201
    assert nan[0]["evidence"][0]["steps"] == [0, 201] and nan[0]["evidence"][0]["values"][-1] == "NaN"
    assert found["findings"][0] is nan[0]  # worst first
    # point by point, no raw window needed
    fine = diagnose_run(RUN, {"loss": _curve(values)})
    assert [f["facts"]["first_bad_step"] for f in _of(fine, "instability") if f["facts"].get("nan")] == [200]


def test_a_spike_is_found_in_its_bucket():
    values = list(FLAT)
    values[300] = 9.0
    found = diagnose_run(RUN, {"loss": _curve(values)})
    spikes = [f for f in _of(found, "instability") if f["facts"].get("spike")]
    assert len(spikes) == 1 and spikes[0]["evidence"][0]["steps"] == [300, 300]
    assert spikes[0]["evidence"][0]["values"] == [9.0]


@pytest.mark.parametrize("gap_ms, fires", [(600_000, True), (5_000, False)])
def test_stall_is_a_gap_in_time(gap_ms, fires):
    ts = [1_000 * k for k in range(100)] + [99_000 + gap_ms + 1_000 * k for k in range(100)]
    found = diagnose_run(RUN, {"loss": _curve(FALLING[:200])}, by_time=_curve(FALLING[:200], ts))
    stalls = [f for f in _of(found, "stall") if "gap_ms" in f["facts"]]
    assert bool(stalls) == fires
    if fires:
        assert stalls[0]["facts"]["gap_ms"] == gap_ms
        assert stalls[0]["evidence"][0]["ts"] == [99_000, 99_000 + gap_ms]


def test_step_gap():
    xs = list(range(100)) + list(range(5000, 5100))
    found = diagnose_run(RUN, {"loss": _curve(FALLING[:200], xs)})
    assert [f["facts"]["step_gap"] for f in _of(found, "stall")] == [4901]


SPAN = {"first_step": 0, "last_step": 1000, "first_ts": 0, "last_ts": 100_000}


@pytest.mark.parametrize("util, severity", [([10.0, 12.0, 8.0], "warning"), ([95.0, 90.0, 97.0], "info")])
def test_throughput_against_gpu_utilisation(util, severity):
    gpu = {0: {"ts": [0, 50_000, 100_000], "utilization": util}}
    found = diagnose_run(RUN, {"loss": _curve(FALLING)}, gpu=gpu, span=SPAN)
    (t,) = _of(found, "throughput")
    assert t["severity"] == severity and t["facts"]["steps_per_s"] == 10.0
    assert t["evidence"][0]["kind"] == "gpu" and t["evidence"][0]["ts"] == [0, 100_000]


def test_helpers():
    assert train_loss(["val/loss", "train/loss_aux", "loss", "acc"]) == "loss"
    assert relative_slope([0, 1, 2], [1.0, 0.9, 0.8]) == pytest.approx(-0.2 / 0.9)
    assert config_diff({"lr": 0.1, "opt": {"name": "adam", "b": 1}}, {"lr": 0.2, "opt": {"name": "adam"}}) == [
        {"key": "lr", "a": 0.1, "b": 0.2}, {"key": "opt.b", "a": 1, "b": "<absent>"}]


def _run(run_id, values, config, rate=10.0, util=90.0, **more):
    curves = {"loss": _curve(values), **{name: _curve(v) for name, v in more.items()}}
    return {"id": run_id, "config": config, "curves": curves, "steps_per_s": rate, "gpu_util": util}


def test_compare_runs_divergence_best_rates_config():
    a = [1.0 - k * 0.004 for k in range(200)]
    b = a[:100] + [a[100] + (k + 1) * 0.01 for k in range(100)]  # departs after step 100
    found = compare_runs([_run("run_A", a, {"lr": 0.1}), _run("run_B", b, {"lr": 0.5}, rate=8.0, util=45.0)],
                         "loss", "minimize")
    (div,) = _of(found, "divergence")
    assert 100 < div["facts"]["divergence"] <= 120
    (best,) = _of(found, "best")
    assert best["facts"]["best_x_delta"] == 99 - 199
    (rates,) = _of(found, "throughput")
    assert rates["facts"] == {"run_id": "run_B", "steps_per_s_delta": -2.0, "gpu_util_delta": -45.0}
    (cfg,) = _of(found, "config")
    assert cfg["facts"]["diff"] == [{"key": "lr", "a": 0.1, "b": 0.5}]
    assert found["runs"][0]["best_x"] == 199 and "run_A has the best loss" in found["next_actions"][0]


def test_compare_by_time_points_at_each_runs_own_clock():
    a = [1.0 - k * 0.004 for k in range(200)]
    b = a[:100] + [a[100] + (k + 1) * 0.01 for k in range(100)]
    runs = [{**_run("run_A", a, {}), "t0": 1_000_000}, {**_run("run_B", b, {}), "t0": 5_000_000}]
    (div,) = _of(compare_runs(runs, "loss", "minimize", align="time"), "divergence")
    x = div["facts"]["divergence"]
    assert [(e["run_id"], e["ts"]) for e in div["evidence"]] == [("run_A", [1_000_000 + x] * 2),
                                                                  ("run_B", [5_000_000 + x] * 2)]


def test_compare_covers_every_shared_metric_and_leads_with_the_one_that_departs():
    """Train loss (``loss``) and lr match; the eval loss parts at step 60. The report says so
    first, and names the metrics that track after it."""
    train = [1.0 - k * 0.004 for k in range(200)]
    lr = [0.1] * 200
    eval_a = [0.9 - k * 0.003 for k in range(200)]
    eval_b = eval_a[:60] + [eval_a[60] + (k + 1) * 0.02 for k in range(140)]
    only_b = [5.0] * 200  # not shared: not compared
    found = compare_runs([_run("run_A", train, {}, **{"lr": lr, "val/loss": eval_a}),
                          _run("run_B", train, {}, **{"lr": lr, "val/loss": eval_b, "extra": only_b})],
                         "loss", "minimize")
    first = found["findings"][0]
    assert (first["kind"], first["facts"]["metric"], first["facts"]["run_id"]) == ("divergence", "val/loss", "run_B")
    assert 60 < first["facts"]["divergence"] <= 80
    assert found["summary"].startswith("val/loss of run_B departs from run_A at step ")
    (tracks,) = [f for f in _of(found, "divergence") if f["facts"]["divergence"] is None]
    assert tracks["facts"]["metrics"] == ["loss", "lr"]
    assert [(m["name"], [d["run_id"] for d in m["departures"]]) for m in found["metrics"]] == [
        ("val/loss", ["run_B"]), ("loss", []), ("lr", [])]
    # departures order by where they start, the earliest first
    found = compare_runs([_run("run_A", train, {}, **{"lr": lr, "val/loss": eval_a}),
                          _run("run_B", train, {}, **{"lr": [0.1] * 10 + [1.0] * 190, "val/loss": eval_b})],
                         "loss", "minimize")
    assert [f["facts"].get("metric") for f in found["findings"][:2]] == ["lr", "val/loss"]


def test_compare_identical_runs_tracks():
    a = FALLING[:100]
    found = compare_runs([_run("run_A", a, {}), _run("run_B", a, {})], "loss", "minimize")
    assert _of(found, "divergence")[0]["facts"]["divergence"] is None
    assert _of(found, "config")[0]["facts"]["diff"] == []


def _ck(ck_id, step, value, size, ancestors=(), evals=None):
    return {"id": ck_id, "run_id": "run_A", "step": step, "size_bytes": size, "parent_id": None,
            "metric_value": value, "ancestors": list(ancestors), "deleted_at": None,
            "evaluations": [{"metrics": evals}] if evals else []}


def test_compare_checkpoints():
    found = compare_checkpoints([_ck("ck_1", 10, 0.5, 100, evals={"acc": 0.7}),
                                 _ck("ck_2", 20, 0.4, 120, ["ck_1"], evals={"acc": 0.75})], "val/loss", "minimize")
    assert [f["kind"] for f in found["findings"]] == ["metric", "evaluation", "size", "lineage"]
    assert found["findings"][0]["facts"]["delta"] == pytest.approx(-0.1) and "better" in found["findings"][0]["claim"]
    assert found["findings"][3]["claim"] == "ck_2 descends from ck_1"
    assert found["findings"][0]["evidence"] == [{"kind": "checkpoint", "id": "ck_1"},
                                                {"kind": "checkpoint", "id": "ck_2"}]
    assert "ck_2 has the best" in found["next_actions"][0]


JOB = {"id": "job_1", "status": "FAILED", "attempt": 1, "exit_code": 1, "node_id": "nd_1", "timeout_s": 60}
OOM_LOG = {"stderr": [(0, "Traceback (most recent call last):"),
                      (35, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")]}


@pytest.mark.parametrize("job, logs, events, cause", [
    ({"failure_reason": "SPAWN_FAILED", "failure_message": "no such file"}, {}, [], "spawn_failure"),
    ({"failure_reason": "TIMEOUT"}, {"stdout": [(0, "step 5")]}, [], "timeout"),
    ({"failure_reason": "OOM"}, OOM_LOG, [], "oom"),
    ({"failure_reason": "EXIT_CODE"}, OOM_LOG, [], "oom"),  # the line alone is proof
    ({"failure_reason": "EXIT_CODE"}, {"stderr": [(0, "OSError: [Errno 28] No space left on device")]}, [],
     "disk_full"),
    ({"failure_reason": "EXIT_CODE"}, {}, [{"id": "ev_1", "type": "LOSS_NAN"}], "nan_divergence"),
    ({"failure_reason": "EXIT_CODE"}, {"stderr": [(0, "RuntimeError: DataLoader worker (pid 12) exited "
                                                      "unexpectedly")]}, [], "dataloader_hang"),
    ({"failure_reason": "SIGNAL(SIGKILL)", "exit_code": None}, {"stderr": [(0, "step 9")]},
     [{"id": "ev_2", "type": "RUN_STALLED"}], "stalled"),
    ({"failure_reason": "SIGNAL(SIGKILL)", "exit_code": None}, {}, [], "killed_or_preempted"),
    ({"failure_reason": "LOST", "status": "LOST"}, {}, [], "killed_or_preempted"),
    ({"failure_reason": "EXIT_CODE"}, {"stdout": [(0, "job preempted by scheduler")]}, [], "killed_or_preempted"),
    ({"failure_reason": "SIGNAL(SIGSEGV)", "exit_code": None}, {"stderr": [(0, "Segmentation fault")]}, [],
     "exit_code"),
    ({"failure_reason": "EXIT_CODE"}, {"stderr": [(0, "ValueError: bad"), (16, "")]}, [], "exit_code"),
    ({"status": "SUCCEEDED", "exit_code": 0}, {}, [], "none"),
])
def test_explain_failure_classifies(job, logs, events, cause):
    found = explain_failure({**JOB, **job}, logs, events=events)
    assert found["cause"] == cause
    if cause == "none":
        assert found["findings"] == []
    else:
        assert found["findings"][0]["severity"] == "critical" and found["next_actions"]


@pytest.mark.parametrize("resumable", [True, False])
def test_explain_failure_writes_its_commands_whole_with_this_jobs_ids(resumable):
    """Backquoted, this job's and run's ids in place, a resume only when there is one to resume from."""
    job = {**JOB, "run_id": "run_9"}
    actions = {}
    for reason, logs, events in (("EXIT_CODE", {"stderr": [(0, "ValueError: bad")]}, []),
                                 ("SIGNAL(SIGKILL)", {}, []), ("TIMEOUT", {}, []),
                                 ("EXIT_CODE", {"stderr": [(0, "No space left on device")]}, []),
                                 ("EXIT_CODE", {}, [{"id": "ev_2", "type": "RUN_STALLED"}])):
        found = explain_failure({**job, "failure_reason": reason}, logs, events=events, resumable=resumable)
        actions[found["cause"]] = " ".join(found["next_actions"])
    retry = "`gpuplanectl job retry job_1 --resume-from last`" if resumable else "`gpuplanectl job retry job_1`"
    assert "`gpuplanectl job logs job_1 --stream stderr --tail 50`" in actions["exit_code"]
    assert retry in actions["killed_or_preempted"] and retry in actions["timeout"]
    assert "`gpuplanectl ckpt prune run_9`" in actions["disk_full"]
    assert "`gpuplanectl job logs job_1 --tail 50`" in actions["stalled"]
    for words in actions.values():
        assert "JOB" not in words and "RUN " not in words and "gpuplanectl" not in re.sub(r"`[^`]*`", "", words)


def test_oom_points_at_the_line_and_the_memory_peak():
    gpu = {0: {"ts": [1000, 2000, 3000], "memory_used_mb": [1000.0, 79000.0, 500.0],
               "memory_total_mb": [81920.0] * 3, "utilization": [90.0, 95.0, 0.0]}}
    found = explain_failure({**JOB, "failure_reason": "OOM"}, OOM_LOG, gpu=gpu)
    log, peak = found["findings"][0]["evidence"]
    assert log == {"kind": "log", "job_id": "job_1", "attempt": 1, "stream": "stderr", "offsets": [35, 35],
                   "lines": [OOM_LOG["stderr"][1][1]]}
    assert peak["kind"] == "gpu" and peak["ts"] == [2000, 2000] and peak["values"] == [79000.0]
    assert "79000 of 81920 MiB" in found["summary"]


def test_an_oom_memory_curve_keeps_the_peak_and_the_last_sample_within_its_budget():
    ts = list(range(0, 1000 * 500, 1000))  # 500 samples; the peak at sample 333, between the picks
    used = [1000.0 + k for k in range(500)]
    used[333] = 79_000.0
    gpu = {1: {"ts": ts, "memory_used_mb": used, "memory_total_mb": [81_559.0] * 500},
           0: {"ts": ts, "memory_used_mb": [None] * 500, "memory_total_mb": [None] * 500}}  # never read: left out
    [curve] = memory_curve("node_a", gpu)
    assert (curve["node_id"], curve["gpu"], curve["name"], curve["ts"]) == ("node_a", 1, "gpu1.memory_used_mb",
                                                                             [0, 499_000])
    assert len(curve["values"]) <= CURVE_POINTS + 2 and curve["peak_mb"] == 79_000.0 == max(curve["values"])
    assert curve["samples_ts"][-1] == 499_000 and 333_000 in curve["samples_ts"]
    assert curve["values"][curve["samples_ts"].index(333_000)] == 79_000.0 and curve["total_mb"] == 81_559.0
    assert memory_curve("node_a", {}) == []


def test_a_nodes_gpu_pointers_get_its_id_and_others_are_left_alone():
    own = gpu(None, 0, "gpu0.utilization", [1, 2], [3.0])
    named = gpu("node_b", 1, "gpu1.utilization", [1, 2], [3.0])
    lines = log("job_a", 1, "stderr", [(0, "x")])
    bound = bind_node({"evidence": [own, named, lines], "other": 1}, "node_a")
    assert bound == {"evidence": [own | {"node_id": "node_a"}, named, lines], "other": 1}
    assert bind_node({"gpu_index": 0}, "node_a") == {"gpu_index": 0}
