"""Node rules: each event fires once on a change, and the health tells the scheduler what to avoid."""

from __future__ import annotations

from gpuplaned.domain.node_health import (
    DiskReading,
    GpuReading,
    HealthPolicy,
    NodeHealth,
    Reading,
    RunningJob,
)

GB = 1024**3
MINUTE = 60_000


def reading(ts: int = 0, *, free_gb: float = 50, gpus=None, jobs=(), violations=(), foreign=()) -> Reading:
    return Reading(
        ts_ms=ts,
        gpus=tuple(gpus if gpus is not None else [GpuReading(0, 90, 40_000, 80_000), GpuReading(1, 0, 10, 80_000)]),
        disks=(DiskReading("data", "/data", int(free_gb * GB), 100 * GB),),
        jobs=tuple(jobs), violations=tuple(violations), foreign=tuple(foreign),
    )


def types(events) -> list[str]:
    return [e.type for e in events]


def test_a_healthy_node_reports_nothing_and_accepts_work():
    events, health = NodeHealth().update(reading())
    assert events == []
    assert health.accepting and health.conditions == () and health.blocked_gpus == ()


def test_disk_low_fires_once_blocks_new_work_and_clears_with_a_margin():
    rules = NodeHealth()
    events, health = rules.update(reading(free_gb=4))
    assert types(events) == ["DISK_LOW"] and events[0].severity == "critical"
    assert "4.0% free" in events[0].message and events[0].context["disk"] == "data"
    assert not health.accepting and health.conditions == ("DISK_LOW",)
    assert rules.update(reading(free_gb=3))[0] == []  # still low: no repeat
    events, health = rules.update(reading(free_gb=5.5))  # above 5 % but inside the margin
    assert events == [] and not health.accepting
    events, health = rules.update(reading(free_gb=7))
    assert types(events) == ["DISK_OK"] and health.accepting


def test_a_disk_that_cannot_be_read_is_not_called_low():
    rules = NodeHealth()
    r = Reading(0, (), (DiskReading("jobs", "/gone", None, None),), ())
    events, health = rules.update(r)
    assert events == [] and health.accepting


def test_a_lost_gpu_is_reported_once_blocked_and_recovers():
    rules = NodeHealth()
    lost = [GpuReading(0, 90, 40_000, 80_000), GpuReading(1, None, None, None, error="gpu_lost: GPU is lost")]
    events, health = rules.update(reading(gpus=lost))
    assert types(events) == ["GPU_LOST"] and events[0].context["gpu_index"] == 1
    assert health.blocked_gpus == (1,) and health.conditions == ("GPU_LOST",) and health.accepting
    assert rules.update(reading(gpus=lost))[0] == []
    events, health = rules.update(reading())
    assert types(events) == ["GPU_RECOVERED"] and health.blocked_gpus == ()


def test_pinning_violation_once_per_job_and_gpu():
    rules = NodeHealth()
    job = RunningJob("job_a", (0,))
    events, _ = rules.update(reading(jobs=[job], violations=[("job_a", 1, 4242)]))
    assert types(events) == ["GPU_PINNING_VIOLATION"]
    assert events[0].job_id == "job_a" and events[0].context == {"gpu_index": 1, "pid": 4242}
    assert rules.update(reading(jobs=[job], violations=[("job_a", 1, 4243)]))[0] == []


def test_foreign_processes_block_their_gpu_unless_configured_otherwise():
    _, health = NodeHealth().update(reading(foreign=[(1, 999, 2048)]))
    assert health.blocked_gpus == (1,) and "FOREIGN_GPU_PROCESS" in health.conditions
    _, health = NodeHealth(HealthPolicy(foreign_gpu_busy=False)).update(reading(foreign=[(1, 999, 2048)]))
    assert health.blocked_gpus == () and "FOREIGN_GPU_PROCESS" in health.conditions


def test_only_foreign_processes_holding_the_threshold_of_memory_block_a_gpu():
    rules = NodeHealth()  # foreign_min_memory_mb = 1024
    _, health = rules.update(reading(foreign=[(0, 10, 200), (1, 11, 1023)]))  # a display server, a monitor
    assert health.blocked_gpus == () and health.conditions == ()
    _, health = rules.update(reading(foreign=[(0, 10, 200), (1, 11, 1024)]))
    assert health.blocked_gpus == (1,) and health.conditions == ("FOREIGN_GPU_PROCESS",)
    _, health = rules.update(reading(foreign=[(0, 10, 600), (0, 12, 600)]))  # together they count
    assert health.blocked_gpus == (0,)
    _, health = rules.update(reading(foreign=[(1, 13, None)]))  # a size the driver does not say
    assert health.blocked_gpus == (1,)
    _, health = NodeHealth(HealthPolicy(foreign_min_memory_mb=0)).update(reading(foreign=[(0, 10, 0)]))
    assert health.blocked_gpus == (0,)  # 0: any foreign process, as before


def test_underutilized_after_ten_idle_minutes_once_and_rearmed_by_use():
    rules = NodeHealth()
    job = [RunningJob("job_idle", (1,))]
    for minute in range(10):  # 0..9 min idle: not yet
        assert rules.update(reading(minute * MINUTE, jobs=job))[0] == []
    events, _ = rules.update(reading(10 * MINUTE, jobs=job))
    assert types(events) == ["GPU_UNDERUTILIZED"] and events[0].job_id == "job_idle"
    idle = next(g for g in reading(0).gpus if g.index == 1)
    # The evidence: GPU 1's utilization and memory series over the idle stretch (the server
    # names the node: gpuplaned.service.api.events.record_node_events).
    assert events[0].context["evidence"] == [
        {"kind": "gpu", "node_id": None, "gpu": 1, "name": "gpu1.utilization", "ts": [0, 10 * MINUTE],
         "values": [idle.utilization_pct]},
        {"kind": "gpu", "node_id": None, "gpu": 1, "name": "gpu1.memory_used_mb", "ts": [0, 10 * MINUTE],
         "values": [idle.memory_used_mb]}]
    assert rules.update(reading(11 * MINUTE, jobs=job))[0] == []
    busy = [GpuReading(0, 90, 40_000, 80_000), GpuReading(1, 95, 50_000, 80_000)]
    assert rules.update(reading(12 * MINUTE, jobs=job, gpus=busy))[0] == []
    assert rules.update(reading(13 * MINUTE, jobs=job))[0] == []  # idle again: the clock restarts
    assert types(rules.update(reading(23 * MINUTE, jobs=job))[0]) == ["GPU_UNDERUTILIZED"]


def test_underutilized_needs_every_gpu_idle_and_known_readings():
    rules = NodeHealth()
    job = [RunningJob("job_two", (0, 1))]  # GPU 0 is busy
    for minute in range(0, 30, 5):
        assert rules.update(reading(minute * MINUTE, jobs=job))[0] == []
    unknown = [GpuReading(1, None, None, None)]
    one = [RunningJob("job_one", (1,))]
    for minute in range(0, 30, 5):
        assert rules.update(reading(minute * MINUTE, jobs=one, gpus=unknown))[0] == []


def test_high_memory_alone_means_the_gpu_is_in_use():
    rules = NodeHealth()
    job = [RunningJob("job_mem", (1,))]
    loaded = [GpuReading(1, 5, 70_000, 80_000)]  # low util but 87 % memory: e.g. a data stall
    for minute in range(0, 30, 5):
        assert rules.update(reading(minute * MINUTE, jobs=job, gpus=loaded))[0] == []
