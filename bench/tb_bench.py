"""TensorBoard event files: our reader (gpuplaned.tensorboard) against EventAccumulator.

    .venv/bin/python bench/tb_bench.py            # 500k scalars, about a minute on 2 CPUs
    .venv/bin/python bench/tb_bench.py --quick    # 50k scalars

One file is written by PyTorch's real SummaryWriter (``add_scalar``, the default old-style
``simple_value``; ``--new-style`` for ``new_style=True``), then read in the same run by:

- ``EventAccumulator(size_guidance={scalars: 0}).Reload()`` (keeps every point, as ours does);
- ``EventFileReader.read`` from an empty cursor: 1 MiB reads, both CRCs of every record
  checked, every scalar decoded into per-tag columns.

Each is timed best of ``--repeat``. Then the writer, still open, appends 1k, 10k and 100k
more events: the reader's next pass is timed and its bytes read are counted, to show the
incremental cost follows the bytes appended. Exits 0 whatever it measures; each figure is
printed beside its target with PASS or FAIL.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpuplaned.tensorboard import EventFileReader  # noqa: E402


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=500_000)
    parser.add_argument("--quick", action="store_true", help="50k events")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--new-style", action="store_true", help="add_scalar(new_style=True)")
    args = parser.parse_args()
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
        info("not measured here", "file-closed to points-queryable p99: needs the tbtail actor (not built)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
