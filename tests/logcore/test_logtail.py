"""Log files: splitting, tailing real files, resume by offset, following a growing file."""

from __future__ import annotations

import contextlib
import os
import random

import pytest
import trio

from gpuplaned import logtail
from gpuplaned.logtail import FileTail, LineSplitter, follow, read_from, read_tail


def reference_lines(data: bytes, max_line: int) -> list[tuple[int, str]]:
    """The expected (offset, line) list, computed by feeding everything at once."""
    splitter = LineSplitter(max_line=max_line)
    return splitter.feed_lines(data) + splitter.flush_lines()


# --- LineSplitter (pure) ---------------------------------------------------------------


def test_splitter_basic_crlf_and_partial():
    s = LineSplitter()
    assert s.feed(b"one\ntwo\r\nthr") == ["one", "two"]
    assert s.offset == 9 and s.position == 12
    assert s.feed(b"ee\r") == []
    assert s.feed(b"\n\nlast") == ["three", ""]
    assert s.flush() == ["last"]
    assert s.flush() == []
    assert s.offset == s.position == 21


def test_splitter_lone_cr_stays_in_the_line():
    assert LineSplitter().feed(b"10%\r50%\r100%\n") == ["10%\r50%\r100%"]


def test_splitter_utf8_character_cut_by_chunk_boundary():
    data = "héllo wörld €uro 😀\n".encode()
    for cut in range(1, len(data)):
        s = LineSplitter()
        assert s.feed(data[:cut]) + s.feed(data[cut:]) == ["héllo wörld €uro 😀"]


def test_splitter_invalid_utf8_is_replaced_not_fatal():
    assert LineSplitter().feed(b"a\xffb\n") == ["a\ufffdb"]


def test_long_line_split_in_pieces_on_character_boundaries():
    line = "€" * 100  # 3 bytes each: 300 bytes
    s = LineSplitter(max_line=64)
    pieces = s.feed_lines(line.encode() + b"\n")
    assert "".join(p for _, p in pieces) == line
    assert all("\ufffd" not in p and len(p.encode()) <= 64 for _, p in pieces)
    assert [o for o, _ in pieces] == [0, 63, 126, 189, 252]


def test_memory_stays_bounded_without_newlines():
    s = LineSplitter(max_line=1000)
    out = []
    for _ in range(1000):
        out += s.feed(b"x" * 999)
        assert s.position - s.offset <= 1001
    # 999,000 bytes: 998 full pieces, and a last one that might still grow.
    assert all(len(p) == 1000 for p in out) and len(out) == 998
    assert s.flush() == ["x" * 1000]


def test_pieces_do_not_depend_on_how_the_input_is_chunked():
    rng = random.Random(7)
    alphabet = [b"a", b"\xc3\xa9", b"\xe2\x82\xac", b"\xf0\x9f\x98\x80", b"\r", b"\r\n", b"\n", b"\xff"]
    data = b"".join(rng.choice(alphabet) if rng.random() < 0.9 else b"b" * rng.randint(0, 90) for _ in range(5000))
    for max_line in (4, 5, 16, 64):
        expected = reference_lines(data, max_line)
        for _ in range(20):
            s = LineSplitter(max_line=max_line)
            got = []
            i = 0
            while i < len(data):
                n = rng.randint(1, 40)
                got += s.feed_lines(data[i : i + n])
                i += n
            got += s.flush_lines()
            assert got == expected
        # ...and resuming at any reported offset gives the same continuation.
        for k in rng.sample(range(len(expected)), 30):
            offset = expected[k][0]
            s = LineSplitter(max_line=max_line, offset=offset)
            assert s.feed_lines(data[offset:]) + s.flush_lines() == expected[k:]


# --- FileTail ------------------------------------------------------------------------


def test_filetail_missing_file_then_partial_writes(tmp_path):
    path = tmp_path / "stdout.log"
    tail = FileTail(path)
    assert tail.read_new() == [] and tail.size is None
    with open(path, "ab", buffering=0) as f:
        f.write(b"ab")
        assert tail.read_new() == []
        f.write(b"c\nd")
        assert tail.read_new() == [(0, "abc")]
        assert (tail.offset, tail.position) == (4, 5)
        assert tail.read_new() == []
        f.write(b"e\xe2\x82")  # half of a euro sign
        assert tail.read_new() == []
        f.write(b"\xac\n")
        assert tail.read_new() == [(4, "de€")]
        f.write(b"tail")
    assert tail.read_new() == []
    assert tail.flush() == [(10, "tail")]
    assert tail.truncations == 0


def test_filetail_100k_lines_in_chunks_matches_the_file(tmp_path):
    path = tmp_path / "stdout.log"
    rng = random.Random(1)
    lines = [f"step {i} loss={rng.random():.6f} " + "é" * rng.randint(0, 40) for i in range(100_000)]
    data = "".join(line + "\n" for line in lines).encode()
    tail = FileTail(path)
    got: list[tuple[int, str]] = []
    with open(path, "ab", buffering=0) as f:
        # The writer appends in odd-sized chunks while the reader reads in small bites.
        i = 0
        while i < len(data):
            n = rng.randint(1, 200_000)
            f.write(data[i : i + n])
            i += n
            got += tail.read_new(max_bytes=rng.randint(1, 300_000))
    while tail.backlog:
        got += tail.read_new(max_bytes=65536)
    assert len(got) == 100_000
    assert [line for _, line in got] == lines
    assert got[0][0] == 0 and tail.offset == len(data)
    assert all(data[o : o + len(line.encode()) + 1] == line.encode() + b"\n" for o, line in got[::997])


def test_filetail_truncation_restarts_from_zero(tmp_path):
    path = tmp_path / "stdout.log"
    path.write_bytes(b"one\ntwo\n")
    tail = FileTail(path)
    assert tail.read_new() == [(0, "one"), (4, "two")]
    with open(path, "r+b") as f:
        f.truncate(0)
    path.write_bytes(b"x\n")
    assert tail.read_new() == [(0, "x")]
    assert tail.truncations == 1


def test_filetail_replaced_file_restarts_from_zero(tmp_path):
    path = tmp_path / "stdout.log"
    path.write_bytes(b"one\n")
    tail = FileTail(path)
    assert tail.read_new() == [(0, "one")]
    (tmp_path / "new").write_bytes(b"alpha\nbeta\n")  # bigger: size alone would not tell
    os.replace(tmp_path / "new", path)
    assert tail.changed()
    assert tail.read_new() == [(0, "alpha"), (6, "beta")]
    assert tail.truncations == 1
    assert not tail.changed()


def test_filetail_resume_offset_past_the_end_counts_as_truncation(tmp_path):
    path = tmp_path / "stdout.log"
    path.write_bytes(b"short\n")
    tail = FileTail(path, offset=1000)
    assert tail.read_new() == [(0, "short")]
    assert tail.truncations == 1


# --- read_tail / read_from --------------------------------------------------------------


@pytest.fixture
def log_file(tmp_path):
    rng = random.Random(3)
    parts = []
    for i in range(3000):
        kind = rng.random()
        if kind < 0.01:
            parts.append(b"L" * rng.randint(200, 700) + b"\n")  # longer than max_line=128
        elif kind < 0.05:
            parts.append(b"\r\n")
        else:
            parts.append(f"{i} ".encode() + "ü".encode() * rng.randint(0, 30) + b"\n")
    path = tmp_path / "stderr.log"
    path.write_bytes(b"".join(parts) + b"unfinished")
    return path


def all_complete_lines(path, max_line):
    tail = FileTail(path, max_line=max_line)
    out = []
    while True:
        got = tail.read_new(max_bytes=10_000)
        out += got
        if not tail.backlog:
            return out


@pytest.mark.parametrize("block", [16, 100, 4096, 65536, 1 << 20])
def test_read_tail_matches_reading_everything(log_file, block):
    full = all_complete_lines(log_file, 128)
    for n in (1, 2, 7, 100, 2999, 5000):
        assert read_tail(log_file, n, max_line=128, block=block) == full[-n:]


def test_read_tail_small_and_edge_files(tmp_path):
    path = tmp_path / "f"
    assert read_tail(path, 5) == []
    path.write_bytes(b"")
    assert read_tail(path, 5) == []
    path.write_bytes(b"no newline yet")
    assert read_tail(path, 5) == []
    path.write_bytes(b"a\nb\r\n\nc")
    assert read_tail(path, 5) == [(0, "a"), (2, "b"), (5, "")]
    assert read_tail(path, 2) == [(2, "b"), (5, "")]
    assert read_tail(path, 0) == []


def test_read_tail_partial_counts_an_unfinished_last_line(tmp_path):
    """A finished file's last line without its newline is a line, and pieces of a long one are too."""
    path = tmp_path / "f"
    path.write_bytes(b"no newline yet")
    assert read_tail(path, 5, partial=True) == [(0, "no newline yet")]
    path.write_bytes(b"a\nb\r\n\nc")
    assert read_tail(path, 5, partial=True) == [(0, "a"), (2, "b"), (5, ""), (6, "c")]
    assert read_tail(path, 1, partial=True) == [(6, "c")]
    assert read_tail(path, 2, partial=True, block=1) == [(5, ""), (6, "c")]
    path.write_bytes(b"a\nb\n")  # ends in its newline: as without partial
    assert read_tail(path, 5, partial=True) == read_tail(path, 5) == [(0, "a"), (2, "b")]
    path.write_bytes(b"x\n" + b"y" * 10)
    assert read_tail(path, 2, partial=True, max_line=4) == [(6, "yyyy"), (10, "yy")]
    assert read_tail(path, 9, partial=True, max_line=4) == [(0, "x"), (2, "yyyy"), (6, "yyyy"), (10, "yy")]
    assert read_tail(path, 9, partial=True, max_line=4) == read_from(path, 0, 9, partial=True, max_line=4)


def test_read_tail_reads_only_the_end(tmp_path, monkeypatch):
    path = tmp_path / "big.log"
    path.write_bytes(b"".join(b"%08d\n" % i for i in range(400_000)))  # 3.6 MB
    read_bytes = []

    class CountingFile:
        def __init__(self, f):
            self._f = f

        def __getattr__(self, name):
            return getattr(self._f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self._f.close()

        def read(self, n=-1):
            data = self._f.read(n)
            read_bytes.append(len(data))
            return data

    monkeypatch.setattr(logtail, "open", lambda *a: CountingFile(open(*a)), raising=False)
    assert read_tail(path, 3) == [(3_599_973, "00399997"), (3_599_982, "00399998"), (3_599_991, "00399999")]
    assert sum(read_bytes) <= 65536 + 27  # one block backwards, the 3 lines forwards


def test_resume_from_any_offset_neither_loses_nor_repeats(log_file):
    full = all_complete_lines(log_file, 128)
    rng = random.Random(5)
    for k in [0, 1, len(full) - 1, *rng.sample(range(len(full)), 40)]:
        offset = full[k][0]
        assert read_from(log_file, offset, 50, max_line=128) == full[k : k + 50]
        assert read_from(log_file, offset, 50, after=True, max_line=128) == full[k + 1 : k + 51]
        tail = FileTail(log_file, offset, max_line=128)
        resumed = []
        while True:
            resumed += tail.read_new(max_bytes=777)
            if not tail.backlog:
                break
        assert resumed == full[k:]
    last = full[-1][0]
    assert read_from(log_file, last, 10, after=True, max_line=128) == []
    assert read_from(log_file, last, 10, after=True, partial=True, max_line=128) == [
        (log_file.stat().st_size - 10, "unfinished")
    ]
    assert read_from(log_file, 10**9, 10) == []
    assert read_from(log_file.with_name("missing"), 0, 10) == []


# --- follow --------------------------------------------------------------------------


async def test_follow_a_growing_file_until_the_job_ends(tmp_path):
    path = tmp_path / "stdout.log"
    ended = trio.Event()
    expected = [f"line {i} " + "ß" * (i % 5) for i in range(2000)]
    data = "".join(x + "\n" for x in expected).encode() + b"no newline at exit"

    async def job() -> None:
        await trio.sleep(0.02)  # the file does not exist when following starts
        with open(path, "ab", buffering=0) as f:
            rng = random.Random(2)
            i = 0
            while i < len(data):
                n = rng.randint(1, 9000)
                f.write(data[i : i + n])
                i += n
                if rng.random() < 0.3:
                    await trio.sleep(0.005)
        ended.set()

    got = []
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(job)
            async with contextlib.aclosing(follow(path, poll=0.002, until=ended)) as lines:
                async for item in lines:
                    got.append(item)
    assert [line for _, line in got] == [*expected, "no newline at exit"]
    assert got == reference_lines(data, 64 * 1024)


async def test_follow_resumes_at_an_offset_and_can_be_cancelled(tmp_path):
    path = tmp_path / "stdout.log"
    path.write_bytes(b"a\nb\nc\n")
    got = []
    with trio.move_on_after(0.2):
        async with contextlib.aclosing(follow(path, offset=2, poll=0.01)) as lines:
            async for item in lines:
                got.append(item)
    assert got == [(2, "b"), (4, "c")]


async def test_follow_backs_off_when_quiet_and_wakes_when_the_job_ends(tmp_path):
    path = tmp_path / "stdout.log"
    ended = trio.Event()
    got = []

    async def job() -> None:
        with open(path, "ab", buffering=0) as f:
            f.write(b"first\n")
            await trio.sleep(0.15)  # quiet: the interval grows to max_poll
            f.write(b"after a pause\nbye")
        ended.set()

    start = trio.current_time()
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(job)
            async with contextlib.aclosing(follow(path, poll=0.001, max_poll=60, until=ended)) as lines:
                async for item in lines:
                    got.append(item)
    # The intervals had grown far past the pause, yet the end of the job woke the follower.
    assert trio.current_time() - start < 2
    assert got == [(0, "first"), (6, "after a pause"), (20, "bye")]


# --- pages (the API's offset= and next_offset) -----------------------------------------


def _page_file(tmp_path, data: bytes):
    path = tmp_path / "page.log"
    path.write_bytes(data)
    return path


PAGE_DATA = (b"first\n\nsecond\r\n" + "h\u00e9llo \U0001f600\n".encode() + b"bad \xff\xfe bytes\n"
             + b"x" * 300 + b"\n" + b"y" * 9 + b"\nunfinished")


@pytest.mark.parametrize("partial", [False, True])
def test_a_page_from_any_line_starts_with_that_line(tmp_path, partial):
    """offset= is the line that starts there, at 0 and everywhere else (it was skipped past 0)."""
    path = _page_file(tmp_path, PAGE_DATA)
    lines = reference_lines(PAGE_DATA, 128) if partial else LineSplitter(max_line=128).feed_lines(PAGE_DATA)
    for k, (offset, text) in enumerate(lines):
        page, _ = logtail.read_page(path, offset, 1, partial=partial, max_line=128)
        assert page == [(offset, text)], k
        assert logtail.read_page(path, offset, 100, partial=partial, max_line=128)[0] == lines[k:]


@pytest.mark.parametrize("partial", [False, True])
@pytest.mark.parametrize("limit", [1, 2, 3, 1000])
def test_following_next_offset_reads_every_line_once_and_ends(tmp_path, partial, limit):
    """``offset=0&limit=1`` answered ``next_offset: 0``: a reader following it read the first line forever."""
    path = _page_file(tmp_path, PAGE_DATA)
    expected = reference_lines(PAGE_DATA, 128) if partial else LineSplitter(max_line=128).feed_lines(PAGE_DATA)
    read, offset, pages = [], 0, 0
    while True:
        page, after = logtail.read_page(path, offset, limit, partial=partial, max_line=128)
        pages += 1
        assert pages <= len(expected) + 1, "the pages do not end"
        if not page:
            break
        assert after > page[-1][0]
        read += page
        offset = after
    assert read == expected
    assert offset == (len(PAGE_DATA) if partial else len(PAGE_DATA) - len(b"unfinished"))


def test_tail_page_says_where_the_next_line_starts(tmp_path):
    path = _page_file(tmp_path, PAGE_DATA)
    lines = LineSplitter(max_line=128).feed_lines(PAGE_DATA)
    page, after = logtail.tail_page(path, 2, max_line=128)
    assert page == lines[-2:] and after == len(PAGE_DATA) - len(b"unfinished")
    assert logtail.read_page(path, after, 10, partial=True, max_line=128)[0] == [(after, "unfinished")]
    assert logtail.tail_page(path, 1, partial=True, max_line=128)[1] == len(PAGE_DATA)
    assert logtail.tail_page(path.with_name("missing"), 5) == ([], None)
    assert logtail.read_page(path.with_name("missing"), 7, 5) == ([], 7)
    assert logtail.read_page(path, 10**9, 5) == ([], 10**9)
