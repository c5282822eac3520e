"""The agent's spool on a real directory: seqs that never repeat (reopen, kill -9, a wiped
directory, a reboot), acks that delete segments, bounds that drop oldest with status last,
and damage (a torn tail, garbage lines, a corrupt state file) that is survived, not fatal."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import wait_for

from gpuplaned.uplink import spool as spool_module
from gpuplaned.uplink.spool import Spool, SpoolError


class Clock:
    """The wall clock a spool stamps records with, moved by hand."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def open_spool(path: Path, **kw) -> Spool:
    kw.setdefault("max_bytes", 1 << 30)
    kw.setdefault("max_age_s", 86400)
    return Spool(path, **kw)


def segments(path: Path) -> list[str]:
    return sorted(p.name for p in path.glob("*.jsonl"))


def seqs(spool: Spool, **kw) -> list[tuple[str, int]]:
    return [(r.stream, r.seq) for r in spool.unacked(**kw)]


def test_seqs_per_stream_continue_across_reopen(tmp_path):
    with open_spool(tmp_path) as sp:
        assert [sp.append("status", {"n": 1}), sp.append("metrics", {"n": 2}), sp.append("status", {"n": 3})] \
            == [1, 1, 2]
    assert (tmp_path.stat().st_mode & 0o777) == 0o700
    with open_spool(tmp_path) as sp:
        assert sp.append("metrics", {"n": 4}) == 2
        assert sp.append("status", {"n": 5}) == 3
        records = list(sp.unacked())
        assert [(r.stream, r.seq, r.body["n"]) for r in records] == [
            ("status", 1, 1), ("metrics", 1, 2), ("status", 2, 3), ("metrics", 2, 4), ("status", 3, 5)]
        assert sp.backlog().records == 5
        assert sp.backlog().bytes == sum(p.stat().st_size for p in tmp_path.glob("*.jsonl"))


def test_each_record_is_one_json_line(tmp_path):
    with open_spool(tmp_path, clock=Clock(1_800_000_000.5)) as sp:
        sp.append("events", {"text": "é \ud800 \"quoted\"\n"})
    (line,) = b"".join(p.read_bytes() for p in tmp_path.glob("*.jsonl")).splitlines()
    assert json.loads(line) == {"stream": "events", "seq": 1, "at_ms": 1_800_000_000_500,
                                "body": {"text": "é \ud800 \"quoted\"\n"}}


def test_wrong_arguments_are_refused_by_name(tmp_path):
    with open_spool(tmp_path, max_bytes=500) as sp:
        with pytest.raises(SpoolError, match="unknown stream 'gossip'"):
            sp.append("gossip", {})
        with pytest.raises(SpoolError, match="holds a set"):
            sp.append("events", {"x": {1, 2}})
        with pytest.raises(SpoolError, match="larger than the spool's max_bytes"):
            sp.append("logs", {"x": "y" * 600})
        with pytest.raises(SpoolError, match="unknown stream"):
            sp.ack("gossip", 1)
        assert sp.append("events", {}) == 1  # nothing of the refused ones took a seq
    with pytest.raises(SpoolError, match="fsync must be one of"):
        open_spool(tmp_path, fsync="sometimes")


_CHILD = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    from gpuplaned.uplink.spool import Spool
    spool = Spool(Path(sys.argv[1]), max_bytes=1 << 30, max_age_s=86400, segment_bytes=64 << 10)
    n = 0
    while True:
        n += 1
        stream = "status" if n % 7 == 0 else "metrics"
        spool.append(stream, {"n": n, "pad": "x" * (n % 50)})
        if n % 500 == 0:
            spool.sync()
            os.write(1, b"%d\\n" % n)  # every record up to n has been appended
""")


def test_kill_9_mid_append_loses_nothing_and_reuses_no_seq(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(tmp_path)], stdout=subprocess.PIPE)
    try:
        reported = 0
        while reported < 20_000:
            line = child.stdout.readline()
            assert line, f"the appending child exited with {child.wait()}"
            reported = int(line)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
    assert child.returncode == -signal.SIGKILL
    assert len(segments(tmp_path)) > 3
    with open_spool(tmp_path) as sp:
        assert sp.corrupt_lines == []
        records = list(sp.unacked())
        ns = [r.body["n"] for r in records]
        assert ns == list(range(1, len(ns) + 1))  # append order, nothing missing, nothing torn
        assert len(ns) >= reported
        for stream in ("status", "metrics"):
            got = [r.seq for r in records if r.stream == stream]
            assert got == list(range(1, len(got) + 1))
            assert sp.append(stream, {"after": True}) == len(got) + 1
    for path in tmp_path.glob("*.jsonl"):
        data = path.read_bytes()
        assert not data or data.endswith(b"\n")


def test_a_torn_last_line_is_truncated_away(tmp_path, caplog):
    with open_spool(tmp_path) as sp:
        sp.append("status", {"n": 1})
        sp.append("status", {"n": 2})
    (seg,) = tmp_path.glob("*.jsonl")
    whole = seg.read_bytes()
    with open(seg, "ab") as f:
        f.write(b'{"stream":"status","seq":3,"at_ms":1,"bo')
    with caplog.at_level(logging.WARNING), open_spool(tmp_path) as sp:
        assert seg.read_bytes() == whole
        assert seqs(sp) == [("status", 1), ("status", 2)]
        assert sp.append("status", {"n": 3}) == 3
    assert "torn last line" in caplog.text and seg.name in caplog.text


def test_acks_delete_whole_segments(tmp_path):
    with open_spool(tmp_path, segment_bytes=400) as sp:
        for n in range(30):
            sp.append("status" if n % 3 else "logs", {"n": n, "pad": "p" * 40})
        files = segments(tmp_path)
        assert len(files) >= 5
        per_file = {name: [json.loads(x) for x in (tmp_path / name).read_bytes().splitlines()] for name in files}
        first = per_file[files[0]]
        # Ack the first file's records on both streams: that file goes, the rest stay.
        sp.ack("status", max(r["seq"] for r in first if r["stream"] == "status"))
        assert segments(tmp_path)[0] == files[0]  # logs records in it are not acked yet
        sp.ack("logs", max(r["seq"] for r in first if r["stream"] == "logs"))
        assert segments(tmp_path) == files[1:]
        assert sp.acked()["logs"] == max(r["seq"] for r in first if r["stream"] == "logs")
        assert all(r.seq > sp.acked()[r.stream] for r in sp.unacked())
        sp.ack("status", 20)
        sp.ack("logs", 10)
        assert segments(tmp_path) == files[-1:]  # the one being appended to stays until close
        assert sp.backlog().records == 0 and sp.backlog().bytes == 0 and sp.backlog().oldest_ms is None
        sp.ack("status", 5)  # an older ack changes nothing
        assert sp.acked() == {"status": 20, "metrics": 0, "events": 0, "logs": 10, "checkpoints": 0}
        # The emptied segment being appended to fills again, and the next one starts.
        for n in range(10):
            sp.append("status", {"n": n, "pad": "p" * 40})
        assert len(segments(tmp_path)) >= 2
        assert seqs(sp) == [("status", s) for s in range(21, 31)]
        sp.ack("status", 25)
        assert seqs(sp) == [("status", s) for s in range(26, 31)]
    with open_spool(tmp_path) as sp:
        assert seqs(sp) == [("status", s) for s in range(26, 31)]
        sp.ack("status", 30)
    assert segments(tmp_path) == []
    with open_spool(tmp_path) as sp:
        assert sp.acked()["status"] == 30 and list(sp.unacked()) == []
        assert sp.append("status", {}) == 31 and sp.append("logs", {}) == 11


def test_set_floor_moves_marks_up_never_down(tmp_path):
    with open_spool(tmp_path) as sp:  # a wiped spool directory: the server knows better
        sp.set_floor({"status": 41, "logs": 7, "nonsense": 9})
        assert sp.append("status", {}) == 42
        assert sp.append("metrics", {}) == 1
        sp.set_floor({"status": 3})
        assert sp.acked()["status"] == 41
        assert sp.append("status", {}) == 43
        sp.set_floor({"status": 42})
        assert seqs(sp) == [("metrics", 1), ("status", 43)]
        assert sp.append("logs", {}) == 8
    with open_spool(tmp_path) as sp:
        assert sp.acked() == {"status": 42, "metrics": 0, "events": 0, "logs": 7, "checkpoints": 0}
        assert sp.append("status", {}) == 44


def test_unacked_after_skips_what_was_sent(tmp_path):
    with open_spool(tmp_path, segment_bytes=200) as sp:
        for n in range(6):
            sp.append("events", {"n": n})
            sp.append("checkpoints", {"n": n})
        assert seqs(sp, after={"events": 4}) == [("checkpoints", s) for s in range(1, 5)] + [
            ("events", 5), ("checkpoints", 5), ("events", 6), ("checkpoints", 6)]
        assert seqs(sp, after={"events": 6, "checkpoints": 5}) == [("checkpoints", 6)]
        # An ack while a replay is under way: the lines not yet read honour it.
        it = sp.unacked()
        assert (next(it).stream, next(it).stream) == ("events", "checkpoints")
        sp.ack("events", 5)
        sp.append("events", {"n": 6})
        assert [(r.stream, r.seq) for r in it] == [("checkpoints", s) for s in range(2, 6)] + [
            ("events", 6), ("checkpoints", 6), ("events", 7)]


def test_byte_bound_drops_metrics_first_and_status_last(tmp_path):
    clock = Clock()
    with open_spool(tmp_path, max_bytes=3000, clock=clock, segment_bytes=1000) as sp:
        for n in range(6):
            sp.append("status", {"n": n, "pad": "s" * 60})
            sp.append("metrics", {"n": n, "pad": "m" * 60})
            sp.append("logs", {"n": n, "pad": "l" * 60})
            clock.now += 1
        assert sp.take_dropped() is None and sp.backlog().records == 18
        drops = []  # (stream, seq) in the order they went
        first_report = None
        n = 6
        while not any(stream == "status" for stream, _ in drops):
            sp.append("status", {"n": n, "pad": "s" * 60})
            n += 1
            assert sp.backlog().bytes <= 3000
            if (dropped := sp.take_dropped()) is not None:
                first_report = first_report or dropped
                assert sum(dropped.counts.values()) == sum(b - a + 1 for a, b in dropped.seqs.values())
                for stream in ("metrics", "logs", "status"):
                    if stream in dropped.seqs:
                        a, b = dropped.seqs[stream]
                        drops += [(stream, seq) for seq in range(a, b + 1)]
        assert drops == [("metrics", s) for s in range(1, 7)] + [("logs", s) for s in range(1, 7)] + [("status", 1)]
        assert first_report.seqs == {"metrics": (1, 1)} and first_report.counts == {"metrics": 1}
        assert first_report.oldest_ms == first_report.newest_ms == 1_800_000_000_000
        assert sp.take_dropped() is None
        left = [r.seq for r in sp.unacked()]
        assert {r.stream for r in sp.unacked()} == {"status"} and left == list(range(2, n + 1))
        assert sp.backlog().records == len(left)
        assert sp.acked()["status"] == 0 and sp.acked()["metrics"] == 0  # drops are not acks
        # A metric never pushes out a status record: with only status left, it is dropped itself.
        assert sp.append("metrics", {"pad": "m" * 60}) == 7  # drops do not free a seq
        assert sp.take_dropped().seqs == {"metrics": (7, 7)}
        assert [r.seq for r in sp.unacked()] == left
        assert sp.append("status", {"n": n, "pad": "s" * 60}) == n + 1
        assert sp.take_dropped().seqs == {"status": (2, 2)}
        left = left[1:] + [n + 1]
    with open_spool(tmp_path, max_bytes=3000, clock=clock) as sp:  # the drops are remembered
        assert [r.seq for r in sp.unacked() if r.stream == "status"] == left
        # Disk follows: files with no live record left are gone, the rest were rewritten.
        assert sum(p.stat().st_size for p in tmp_path.glob("*.jsonl")) <= 2 * 3000 + 1000


def test_disk_stays_bounded_when_kept_status_records_are_spread_out(tmp_path):
    # One status record among nine metrics: without rewriting, every old segment would be
    # kept for the status line in it.
    with open_spool(tmp_path, max_bytes=3000, segment_bytes=1000) as sp:
        for n in range(600):
            sp.append("status" if n % 10 == 0 else "metrics", {"n": n, "pad": "x" * 60})
            assert sum(p.stat().st_size for p in tmp_path.glob("*.jsonl")) <= 2 * 3000 + 1000
        assert sp.backlog().bytes <= 3000
        live = list(sp.unacked())
        assert [r.body["n"] for r in live] == sorted(r.body["n"] for r in live)
        assert sum(r.stream == "status" for r in live) > 10  # status is what stays
        assert sp.backlog().records == len(live)


def test_age_bound_drops_on_trim_and_on_append(tmp_path):
    clock = Clock()
    with open_spool(tmp_path, max_age_s=60, clock=clock) as sp:
        sp.append("status", {"n": 0})
        sp.append("metrics", {"n": 0})
        clock.now += 30
        sp.append("metrics", {"n": 1})
        clock.now += 31
        sp.trim()
        dropped = sp.take_dropped()
        assert (dropped.counts, dropped.seqs) == ({"metrics": 1, "status": 1}, {"metrics": (1, 1), "status": (1, 1)})
        assert sp.backlog().oldest_ms == 1_800_000_030_000
        assert seqs(sp) == [("metrics", 2)]
        clock.now += 30
        sp.append("events", {"n": 2})  # the metric of t=30 is now 61 s old
        assert sp.take_dropped().counts == {"metrics": 1}
        assert seqs(sp) == [("events", 1)]
        sp.trim()
        assert sp.take_dropped() is None


def test_a_garbage_line_in_the_middle_is_reported_and_skipped(tmp_path, caplog):
    with open_spool(tmp_path) as sp:
        for n in range(3):
            sp.append("status", {"n": n})
    (seg,) = tmp_path.glob("*.jsonl")
    lines = seg.read_bytes().splitlines(keepends=True)
    seg.write_bytes(lines[0] + b"\x00\xff\xfegarbage{\n" + b'{"stream":"nope","seq":1}\n' + b"".join(lines[1:]))
    with caplog.at_level(logging.WARNING), open_spool(tmp_path) as sp:
        assert sp.corrupt_lines == [(str(seg), 2), (str(seg), 3)]
        assert [r.body["n"] for r in sp.unacked()] == [0, 1, 2]
        assert sp.append("status", {"n": 3}) == 4
    assert f"{seg}: line 2 is not a record" in caplog.text


def test_a_corrupt_state_file_is_rebuilt_from_the_records(tmp_path, caplog):
    with open_spool(tmp_path) as sp:
        for n in range(5):
            sp.append("logs", {"n": n})
        sp.ack("logs", 3)
    (tmp_path / "state.json").write_bytes(b"{\"acked\": {\"logs\": \x00")
    with caplog.at_level(logging.WARNING), open_spool(tmp_path) as sp:
        assert sp.acked()["logs"] == 0
        assert seqs(sp) == [("logs", s) for s in range(1, 6)]  # resent; the server dedupes
        assert sp.append("logs", {}) == 6
    assert "state.json is unreadable" in caplog.text and "acked marks 0" in caplog.text


def test_after_a_reboot_past_an_unclean_stop_seqs_jump(tmp_path, monkeypatch):
    boot = tmp_path / "boot_id"
    boot.write_text("boot-a\n")
    monkeypatch.setattr(spool_module, "_BOOT_ID", boot)
    home = tmp_path / "spool"
    with open_spool(home) as sp:
        sp.append("status", {})
    boot.write_text("boot-b\n")  # a clean stop, then a reboot: nothing can be lost
    sp = open_spool(home)
    assert sp.append("status", {}) == 2
    os.close(sp._fd), os.close(sp._lock_fd)  # as a kill -9 would leave it: never closed
    sp2 = open_spool(home)  # the same boot: kill -9 loses nothing, no jump
    assert sp2.append("status", {}) == 3
    os.close(sp2._fd), os.close(sp2._lock_fd)
    boot.write_text("boot-c\n")  # an unclean stop, then a reboot: the tail may be lost
    with open_spool(home) as sp3:
        assert sp3.append("status", {}) == 3 + spool_module.REBOOT_SEQ_GAP + 1


def test_one_spool_per_directory_and_unusable_directories(tmp_path):
    with open_spool(tmp_path):
        with pytest.raises(SpoolError, match="in use by another process"):
            open_spool(tmp_path)
    (tmp_path / "file").write_text("")
    with pytest.raises(SpoolError, match=str(tmp_path / "file")):
        open_spool(tmp_path / "file")


def test_unacked_batches_keep_append_order_and_bounds_and_bodies_as_spooled(tmp_path):
    with open_spool(tmp_path, segment_bytes=4096) as sp:
        for n in range(300):
            sp.append("metrics", {"n": n, "pad": "x" * 20})
        sp.append("status", {"n": "end"})
        sp.append("metrics", {"n": 300, "text": "caf\u00e9 \ud800"})  # non-ASCII and a lone surrogate
        sp.ack("metrics", 5)
        batches = list(sp.unacked_batches({"metrics": 10}, 100, 2000))
    # One stream a batch, in append order; at most 100 records and about 2,000 body bytes each.
    assert [(stream, len(s)) for stream, s, _ in batches][-2:] == [("status", 1), ("metrics", 1)]
    assert all(len(s) <= 100 and sum(map(len, b)) <= 2000 for _, s, b in batches)
    sent = [seq for stream, s, _ in batches if stream == "metrics" for seq in s]
    assert sent == list(range(11, 302))  # above both the ack and ``after``
    bodies = [json.loads(body) for _, _, b in batches for body in b]
    assert bodies[0] == {"n": 10, "pad": "x" * 20} and bodies[-1] == {"n": 300, "text": "caf\u00e9 \ud800"}
    assert all(body.isascii() for _, _, b in batches for body in b)


def test_unacked_batches_skip_damaged_lines_found_at_open(tmp_path):
    with open_spool(tmp_path) as sp:
        for n in range(4):
            sp.append("events", {"n": n})
    seg = tmp_path / segments(tmp_path)[0]
    lines = seg.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace(b'{"n":1}', b'{"n":1')  # the head intact, the body broken
    seg.write_bytes(b"".join(lines))
    with open_spool(tmp_path) as sp:
        assert [(s, [json.loads(b) for b in bodies]) for _, s, bodies in sp.unacked_batches({}, 100, 1 << 20)] == [
            ([1, 3, 4], [{"n": 0}, {"n": 2}, {"n": 3}])]


def test_an_ack_over_many_records_and_segments_keeps_the_backlog_exact(tmp_path):
    with open_spool(tmp_path, segment_bytes=2048) as sp:
        for n in range(500):
            sp.append("metrics" if n % 3 else "logs", {"n": n})
        sp.ack("metrics", 200)
        sp.ack("logs", 40)
        kept = sp.backlog()
        left = seqs(sp)
    with open_spool(tmp_path) as again:  # the open counts from the files alone
        assert again.backlog().records == kept.records == len(left)
        assert again.backlog().bytes == kept.bytes
        assert seqs(again) == left
