"""TensorBoard event files: our reader (gpuplaned.tensorboard) against EventAccumulator, and
the tailer's file-closed to points-queryable latency on a real daemon.

    .venv/bin/python bench/tb_bench.py                 # 500k scalars, then 100 latency trials (~2 min on 2 CPUs)
    .venv/bin/python bench/tb_bench.py --quick         # 50k scalars
    .venv/bin/python bench/tb_bench.py --only latency  # the latency trials alone (~1 min)

One file is written by PyTorch's real SummaryWriter (``add_scalar``, the default old-style
``simple_value``; ``--new-style`` for ``new_style=True``), then read in the same run by:

- ``EventAccumulator(size_guidance={scalars: 0}).Reload()`` (keeps every point, as ours does);
- ``EventFileReader.read`` from an empty cursor: 1 MiB reads, both CRCs of every record
  checked, every scalar decoded into per-tag columns.

Each is timed best of ``--repeat``. Then the writer, still open, appends 1k, 10k and 100k
more events: the reader's next pass is timed and its bytes read are counted, to show the
incremental cost follows the bytes appended.

Last, file-closed to points-queryable on a real daemon (``gpuplaned --gpus fake:1`` in a
temporary home, its default ``[tensorboard] poll_interval_s``): a job opens a new
``SummaryWriter`` per trial (at a random moment), logs 100 scalars, closes it and notes the
time; the bench polls ``GET /api/v1/runs/{id}/series`` every 5 ms until all of them are
there. p50, p99 and max over ``--trials`` (``--only latency`` runs just this part,
``--only reader`` the rest). Exits 0 whatever it measures; each figure is printed beside
its target with PASS or FAIL.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpuplaned.tensorboard import EventFileReader  # noqa: E402
from jobs_bench import JobDaemons  # noqa: E402


def report(label: str, value: float, unit: str, target: float, higher_is_better: bool, note: str = "") -> None:
    ok = value >= target if higher_is_better else value <= target
    sign = ">=" if higher_is_better else "<="
    print(f"{label:<46} {value:>12,.3f} {unit:<6} target {sign} {target:,} {unit:<6} "
          f"{'PASS' if ok else 'FAIL'}{'  ' + note if note else ''}", flush=True)


def info(label: str, text: str) -> None:
    print(f"{label:<46} {text}", flush=True)


def best(repeat: int, fn):
    times, result = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return min(times), result


def accumulator(folder: Path) -> int:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    tags = acc.Tags()
    return sum(len(acc.Scalars(t)) for t in tags["scalars"]) + sum(len(acc.Tensors(t)) for t in tags["tensors"])


def ours(path: Path) -> tuple[int, EventFileReader]:
    reader = EventFileReader(path)
    result = reader.read(0.0)
    return sum(len(c) for c in result.scalars.values()), reader


TRIAL_JOB = textwrap.dedent("""
    import os, sys, time
    from torch.utils.tensorboard import SummaryWriter
    trials, points = int(sys.argv[1]), int(sys.argv[2])
    for i in range(trials):
        waited = time.monotonic()
        while not os.path.exists(f"go-{i}"):
            if time.monotonic() - waited > 60:
                sys.exit("no trial for a minute: the bench is gone")
            time.sleep(0.005)
        w = SummaryWriter(f"runs/t{i:04d}")
        for s in range(points):
            w.add_scalar(f"trial{i:04d}", float(s), s)
        w.close()
        closed = time.time()
        with open(f"closed-{i}.tmp", "w") as f:
            f.write(repr(closed))
        os.rename(f"closed-{i}.tmp", f"closed-{i}")
""")


def latency(trials: int, points: int = 100) -> None:
    """File closed by the job -> all its points answered by GET /runs/{id}/series, on a real daemon."""
    from gpuplaned.protocol.errors import ApiError

    root = Path(tempfile.mkdtemp(prefix="tb-latency-"))
    dm = JobDaemons(sys.executable, root, None)
    client = job = None
    try:
        d = dm.start("--gpus", "fake:1")
        client, work = d.client, d.work
        (work / "trials.py").write_text(TRIAL_JOB)
        job = d.submit([sys.executable, "trials.py", str(trials), str(points)])
        while (found := client.get(f"/api/v1/jobs/{job['id']}")["job"])["status"] != "RUNNING":
            time.sleep(0.02)
        run_id = found["run_id"]
        seen: list[float] = []
        for i in range(trials):
            time.sleep(random.uniform(0, 0.6))  # the file closes at any phase of the tailer's passes
            (work / f"go-{i}").touch()
            closed_file = work / f"closed-{i}"
            while not closed_file.exists():
                time.sleep(0.002)
            closed = float(closed_file.read_text())
            while True:
                try:
                    body = client.get(f"/api/v1/runs/{run_id}/series?name=trial{i:04d}&columns=step")
                    if body["count"] == points:
                        break
                except ApiError:
                    pass  # no such series yet
                time.sleep(0.005)
            seen.append(time.time() - closed)
        seen.sort()
        p50, p99 = seen[len(seen) // 2], seen[min(len(seen) - 1, int(len(seen) * 0.99))]
        info("file closed -> points queryable", f"{trials} trials of {points} points: p50 {p50 * 1e3:.0f} ms, "
             f"max {seen[-1] * 1e3:.0f} ms")
        report("file closed -> points queryable, p99", p99, "s", 1.0, False)
    finally:
        if client is not None and job is not None:
            try:
                client.post(f"/api/v1/jobs/{job['id']}/cancel")
            except Exception:  # noqa: BLE001 - it ended already
                pass
        dm.stop_all()
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=500_000)
    parser.add_argument("--quick", action="store_true", help="50k events")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--new-style", action="store_true", help="add_scalar(new_style=True)")
    parser.add_argument("--trials", type=int, default=100, help="file-closed to queryable trials")
    parser.add_argument("--only", choices=("reader", "latency"), help="run only one part")
    args = parser.parse_args()
    if args.only != "reader":
        latency(args.trials)
        if args.only == "latency":
            return
    n = 50_000 if args.quick else args.events
    from torch.utils.tensorboard import SummaryWriter

    work = Path(tempfile.mkdtemp(prefix="tb-bench-"))
    try:
        live = work / "live"
        writer = SummaryWriter(live, max_queue=100_000, flush_secs=3600)
        t = time.perf_counter()
        for step in range(n):
            writer.add_scalar("train/loss", 1.0 / (step + 1), step, new_style=args.new_style)
        writer.flush()
        info("writing (SummaryWriter.add_scalar)", f"{n:,} events in {time.perf_counter() - t:.1f} s")
        [path] = live.glob("events.out.tfevents.*")
        frozen = work / "frozen"
        frozen.mkdir()
        shutil.copy(path, frozen / path.name)
        size = path.stat().st_size
        info("file", f"{size / 2**20:.1f} MiB, {size / n:.1f} bytes per event")

        ea_time, ea_points = best(args.repeat, lambda: accumulator(frozen))
        our_time, (our_points, reader) = best(args.repeat, lambda: ours(frozen / path.name))
        info("EventAccumulator.Reload()", f"{ea_time:.3f} s, {ea_points:,} points, "
             f"{ea_points / ea_time / 1e3:,.0f}k points/s")
        info("EventFileReader.read()", f"{our_time:.3f} s, {our_points:,} points, "
             f"{our_points / our_time / 1e3:,.0f}k points/s, {reader.bytes_read / 2**20:.1f} MiB read")
        report("speed-up over EventAccumulator", ea_time / our_time, "x", 20, True,
               "" if ea_points == our_points == n else f"POINT COUNTS DIFFER ({ea_points} vs {our_points})")

        reader = EventFileReader(path)
        reader.read(0.0)
        step = n
        rows = []
        for added in (1_000, 10_000, 100_000):
            for _ in range(added):
                writer.add_scalar("train/loss", 0.5, step, new_style=args.new_style)
                step += 1
            writer.flush()
            before = reader.bytes_read
            grown = path.stat().st_size - size
            size += grown
            t = time.perf_counter()
            result = reader.read(0.0)
            elapsed = time.perf_counter() - t
            got = sum(len(c) for c in result.scalars.values())
            rows.append((added, grown, reader.bytes_read - before, elapsed, got))
        writer.close()
        for added, grown, read, elapsed, got in rows:
            info(f"append {added:>7,} events", f"{grown:>10,} bytes appended, {read:>10,} bytes read, "
                 f"{got:>7,} points, {elapsed * 1e3:8.2f} ms, {elapsed / max(grown, 1) * 2**20 * 1e3:6.2f} ms/MiB")
        report("bytes read / bytes appended (all appends)", sum(r[2] for r in rows) / sum(r[1] for r in rows),
               "", 1.0, False)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
