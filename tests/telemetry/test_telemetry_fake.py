"""The fake:N backend: synthetic readings that follow ``busy``, and claims by real processes."""

from __future__ import annotations

import os
import subprocess

from gpuplaned.telemetry.backend import GpuSource, open_backend
from gpuplaned.telemetry.fake import FakeGpus, claim, plant_util
from gpuplaned.telemetry.samples import GpuProcess


def fake(count: int = 2, claims_dir=None) -> FakeGpus:
    return FakeGpus(count, "Fake GPU 80GB", 81920, claims_dir=claims_dir)


def test_open_backend_fake_follows_the_source(tmp_path):
    backend = open_backend(GpuSource("fake", 3, fake_model="Fake 24GB", fake_memory_mb=24576),
                           fake_claims_dir=tmp_path / "fake-gpus")
    assert backend.kind == "fake"
    assert [(g.index, g.model, g.memory_mb) for g in backend.inventory()] == [(i, "Fake 24GB", 24576) for i in range(3)]
    assert sorted(p.name for p in (tmp_path / "fake-gpus").iterdir()) == ["0", "1", "2"]
    (sample, *_) = backend.sample()
    assert sample.memory_total_mb == 24576 and sample.error is None
    backend.close()


def test_busy_gpus_rise_and_idle_ones_fall():
    gpus = fake()
    rising = [gpus.sample({0}) for _ in range(8)]
    busy = [s[0] for s in rising]
    idle = [s[1] for s in rising]
    assert busy[0].utilization_pct < busy[3].utilization_pct
    assert busy[-1].utilization_pct > 80
    assert 0.5 * 81920 < busy[-1].memory_used_mb < 0.7 * 81920
    assert busy[-1].temperature_c > busy[0].temperature_c and busy[-1].power_w > busy[0].power_w
    assert busy[-1].throttle_reasons == ()
    assert all(s.utilization_pct == 0 and s.memory_used_mb < 1024 and s.throttle_reasons == ("idle",) for s in idle)
    falling = [gpus.sample(set())[0] for _ in range(12)]
    assert falling[0].utilization_pct < busy[-1].utilization_pct
    assert falling[-1].utilization_pct < 1 and falling[-1].memory_used_mb < 1024
    assert falling[-1].power_w < busy[-1].power_w


def test_busy_as_a_mapping_sets_how_hard():
    gpus = fake()
    for _ in range(10):
        half, full = gpus.sample({0: 0.5, 1: 1.0})
    assert 30 < half.utilization_pct < 60 < full.utilization_pct


def test_the_same_busy_sequence_gives_the_same_samples():
    sequence = [{0}, {0}, {0, 1}, set(), {1: 0.3}, set()]
    first, second = fake(), fake()
    assert [first.sample(b) for b in sequence] == [second.sample(b) for b in sequence]


def test_eight_gpus_without_claims():
    samples = fake(8).sample(set(range(8)))
    assert [s.index for s in samples] == list(range(8))
    assert all(s.processes == () for s in samples)


def test_a_real_process_claims_a_gpu_until_it_dies(tmp_path):
    gpus = fake(claims_dir=tmp_path)
    proc = subprocess.Popen(["sleep", "60"])
    try:
        path = claim(tmp_path, 1, proc.pid, memory_mb=1234)
        assert [s.processes for s in gpus.sample()] == [(), (GpuProcess(proc.pid, 1234),)]
        assert path.exists()
        proc.kill()
        proc.wait()
        assert [s.processes for s in gpus.sample()] == [(), ()]
        assert not path.exists()
    finally:
        proc.kill()
        proc.wait()


def test_a_zombie_no_longer_holds_its_claim(tmp_path):
    gpus = fake(claims_dir=tmp_path)
    proc = subprocess.Popen(["sleep", "60"])
    try:
        claim(tmp_path, 0, proc.pid)
        assert gpus.sample()[0].processes == (GpuProcess(proc.pid, None),)
        proc.kill()
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # dead, left unreaped: a zombie
        os.kill(proc.pid, 0)  # which still answers, so the backend must look at its state
        assert gpus.sample()[0].processes == ()
    finally:
        proc.kill()
        proc.wait()


def test_odd_claim_files_are_read_leniently(tmp_path):
    gpus = fake(claims_dir=tmp_path)
    proc = subprocess.Popen(["sleep", "60"])
    try:
        (tmp_path / "0" / str(proc.pid)).write_text("not a number")
        (tmp_path / "0" / "notes.txt").write_text("ignored")
        (tmp_path / "9").mkdir()  # no such GPU: ignored
        claim(tmp_path, 9, proc.pid)
        assert [s.processes for s in gpus.sample()] == [(GpuProcess(proc.pid, None),), ()]
    finally:
        proc.kill()
        proc.wait()


def test_a_missing_claims_dir_means_no_processes(tmp_path):
    gpus = fake(claims_dir=tmp_path / "gone")
    (tmp_path / "gone" / "0").rmdir()
    (tmp_path / "gone" / "1").rmdir()
    (tmp_path / "gone").rmdir()
    assert [s.processes for s in gpus.sample()] == [(), ()]


def test_a_gpu_marked_lost_reads_only_an_error_until_the_mark_goes(tmp_path):
    gpus = FakeGpus(2, "Fake", 1000, claims_dir=tmp_path)
    (tmp_path / "1" / "lost").touch()
    lost = gpus.sample()
    assert lost[0].error is None and lost[0].utilization_pct is not None
    assert lost[1].error == "gpu_lost: fake GPU 1 is marked lost" and lost[1].utilization_pct is None
    (tmp_path / "1" / "lost").unlink()
    assert gpus.sample()[1].error is None


def test_a_planted_utilization_is_read_until_it_is_taken_away(tmp_path):
    gpus = FakeGpus(2, "Fake", 1000, claims_dir=tmp_path)
    plant_util(tmp_path, 0, 87.5)
    first = gpus.sample()
    assert first[0].utilization_pct == 87.5 and first[1].utilization_pct == 0.0  # the other one idles
    assert gpus.sample(busy={0})[0].utilization_pct == 87.5  # a job's load does not change what was planted
    (tmp_path / "0" / "util").write_text("not a number")
    assert gpus.sample()[0].utilization_pct < 87.5  # an unreadable plant is none
    plant_util(tmp_path, 0, None)
    plant_util(tmp_path, 0, None)  # already gone: nothing to do
    assert not (tmp_path / "0" / "util").exists()
