"""Following a job's event files pass by pass, and resuming from stored cursors: each point
stored once, across a restart that lost a pass, with a resumed writer's rewind, and a file
truncated and written anew."""

from __future__ import annotations

import os
import socket
import time

from torch.utils.tensorboard import SummaryWriter

from gpuplaned.tensorboard import log_roots
from gpuplaned.tensorboard.tail import JobTail


class Store:
    """What the server keeps: points per series, and the cursors and rewind state stored
    with them in the same transaction."""

    def __init__(self) -> None:
        self.points: dict[str, list[tuple[int, float]]] = {}
        self.cursors: dict = {}
        self.rewinds: dict = {}

    def commit(self, batches) -> None:
        for batch in batches:
            for series, step in batch.cuts.items():
                self.points[series] = [p for p in self.points.get(series, []) if p[0] < step]
            for series, columns in batch.points.items():
                self.points.setdefault(series, []).extend(zip(columns.steps.tolist(), columns.values.tolist()))
            self.cursors[batch.path] = batch.cursor
            self.rewinds.update(batch.rewinds)


def write(writer, steps, offset=0.0):
    for step in steps:
        writer.add_scalar("loss", step + offset, step)
        writer.add_scalars("acc", {"train": float(step)}, step)
    writer.flush()


def test_exactly_once_across_a_lost_pass_and_a_resumed_writer(tmp_path):
    start = time.time()
    roots = log_roots(tmp_path, {"TB_LOG_DIR": "tb"})
    host = socket.gethostname()
    store = Store()
    tail = JobTail(roots, since=start, host=host)
    writer = SummaryWriter(tmp_path / "tb" / "exp", flush_secs=3600)
    write(writer, range(0, 10))
    store.commit(tail.poll(0.0))
    write(writer, range(10, 20))
    store.commit(tail.poll(1.0))
    write(writer, range(20, 30))
    tail.poll(2.0)  # read, then the daemon is killed before the points are stored
    tail.close()
    tail = JobTail(roots, since=start, host=host, cursors=store.cursors, rewinds=store.rewinds)
    store.commit(tail.poll(3.0))
    assert store.points["loss"] == [(s, float(s)) for s in range(30)]
    writer.close()

    resumed = SummaryWriter(tmp_path / "tb" / "exp", flush_secs=3600)  # restarted from step 25's checkpoint
    write(resumed, range(25, 35), offset=0.5)
    store.commit(tail.poll(4.0))
    resumed.close()
    assert store.points["loss"] == [(s, float(s)) for s in range(25)] + [(s, s + 0.5) for s in range(25, 35)]
    assert store.points["acc/train"] == [(s, float(s)) for s in range(35)]
    assert tail.poll(5.0) == []  # nothing new: no batch
    tail.close()


def test_a_file_truncated_and_written_anew_is_read_again_and_replaces_its_points(tmp_path):
    start = time.time()
    tail = JobTail(log_roots(tmp_path), since=start, host=socket.gethostname())
    store = Store()
    writer = SummaryWriter(tmp_path / "runs", flush_secs=3600)
    write(writer, range(0, 20))
    writer.close()
    store.commit(tail.poll(0.0))
    [path] = [f for f in tail.files if os.path.dirname(f) == str(tmp_path / "runs")]
    other = SummaryWriter(tmp_path / "elsewhere", flush_secs=3600)
    write(other, range(3, 8), offset=0.5)
    other.close()
    [anew] = (p for p in (tmp_path / "elsewhere").iterdir() if p.is_file())
    with open(path, "r+b") as f:  # the same inode: truncated below the cursor, then written again
        f.truncate(0)
        f.write(anew.read_bytes())
    batches = tail.poll(1.0)
    assert [p.what for b in batches for p in b.problems] == ["file replaced"]
    store.commit(batches)
    # Like a newer file: its points replace what it gave before, per series.
    assert store.points["loss"] == [(s, s + 0.5) for s in range(3, 8)]
    assert store.points["acc/train"] == [(s, float(s)) for s in range(20)]  # another file: as it was
    assert tail.poll(2.0) == []
    tail.close()
