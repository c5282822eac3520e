"""An imported run's logs read back on a real daemon: ``GET /api/v1/runs/{id}/logs`` and
``gpuplanectl logs RUN``, after a real ``import-run`` of a dir a real ``SummaryWriter`` wrote,
with a ``stdout.log`` and a ``stderr.txt``. The tail of a big log reads only its end (the
daemon's own read count, ``/proc/PID/io``); a log deleted, appended to or replaced by a link
since the import is said, never a 500; control characters come back as they are and are
printed escaped; a run without logs has none; an unknown run is a 404."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from urllib.parse import urlencode

import pytest
from helpers import running_jobs
from torch.utils.tensorboard import SummaryWriter

from gpuplaned.protocol.errors import ApiError, ErrorCode

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    """One daemon for the module: each test imports a dir of its own and reads only that run, so
    none needs a fresh daemon, whose start was most of such a test's time."""
    with running_jobs(tmp_path_factory.mktemp("run-logs")) as jobs:
        yield jobs.daemon


def imported(daemon, root, logs: dict[str, bytes]) -> str:
    """Import ``root`` (a SummaryWriter's scalars and ``logs``, name -> bytes); its run id."""
    with SummaryWriter(root) as writer:
        writer.add_scalar("loss", 0.5, 1)
    for name, data in logs.items():
        (root / name).write_bytes(data)
    return daemon.client().post("/api/v1/runs/import", {"dir": str(root)})["run_id"]


def run_logs(daemon, run_id: str, **query) -> dict:
    return daemon.client().get(f"/api/v1/runs/{run_id}/logs" + (f"?{urlencode(query)}" if query else ""))


def refused(daemon, run_id: str, **query) -> ApiError:
    with pytest.raises(ApiError) as caught:
        run_logs(daemon, run_id, **query)
    return caught.value


def ctl(daemon, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuplanectl", "logs", *args], env=daemon.env, capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)


def texts(log: dict) -> list[str]:
    return [line["line"] for line in log["page"]["lines"]]


def test_the_route_and_the_cli_read_an_imported_runs_logs(daemon, tmp_path):
    root = tmp_path / "run"
    out = "".join(f"step {s}\n" for s in range(12)).encode()
    run_id = imported(daemon, root, {"stdout.log": out, "stderr.txt": b"warning: something\nno newline at the end"})

    found = run_logs(daemon, run_id)
    assert (found["run_id"], found["job_id"]) == (run_id, None)
    stderr, stdout = found["logs"]
    assert [(f["path"], f["stream"], f["size_bytes"], f["lines"], f["state"], f["problem"], f["size_now"])
            for f in found["logs"]] == [
        (str(root / "stderr.txt"), "stderr", 40, 2, "ok", None, 40),
        (str(root / "stdout.log"), "stdout", len(out), 12, "ok", None, len(out))]
    assert texts(stdout) == [f"step {s}" for s in range(12)]
    assert texts(stderr) == ["warning: something", "no newline at the end"]  # a finished file's last line counts

    tail = run_logs(daemon, run_id, tail=3, stream="stdout")
    assert [f["page"] is None for f in tail["logs"]] == [True, False]
    assert texts(tail["logs"][1]) == ["step 9", "step 10", "step 11"]

    pages, offset = [], 0  # page the whole file from its start
    while True:
        page = run_logs(daemon, run_id, path=str(root / "stdout.log"), offset=offset, limit=5)["logs"][1]["page"]
        if not page["lines"]:
            break
        pages.append([line["line"] for line in page["lines"]])
        offset = page["next_offset"]
    assert pages == [[f"step {s}" for s in range(i, min(i + 5, 12))] for i in (0, 5, 10)]
    one = run_logs(daemon, run_id, stream="stderr", offset=0)["logs"][0]  # the one file selected: no path needed
    assert texts(one) == ["warning: something", "no newline at the end"]

    bad = refused(daemon, run_id, offset=0)
    assert (bad.code, bad.details["field"]) == (ErrorCode.BAD_REQUEST, "offset") and "give path=" in bad.message
    bad = refused(daemon, run_id, path="/etc/passwd")
    assert (bad.code, bad.details["field"]) == (ErrorCode.NOT_FOUND, "path")
    bad = refused(daemon, run_id, tail=10_001)
    assert bad.code is ErrorCode.BAD_REQUEST
    bad = refused(daemon, "run_01NOSUCHRUN0000000000000000")
    assert bad.code is ErrorCode.NOT_FOUND and "no run" in bad.message

    both = ctl(daemon, run_id, "--tail", "2")
    assert both.returncode == 0, both.stderr
    assert both.stdout == f"==> {root / 'stdout.log'} <==\nstep 10\nstep 11\n"
    assert both.stderr == f"==> {root / 'stderr.txt'} <==\nwarning: something\nno newline at the end\n"
    alone = ctl(daemon, run_id, "--stream", "stdout", "-n", "1")
    assert (alone.returncode, alone.stdout, alone.stderr) == (0, "step 11\n", "")
    body = json.loads(ctl(daemon, run_id, "--json", "--tail", "1").stdout)
    assert [texts(f) for f in body["logs"]] == [["no newline at the end"], ["step 11"]]

    follow = ctl(daemon, run_id, "-f")
    assert follow.returncode == 2 and follow.stdout == ""
    assert "--follow" in follow.stderr and "nothing to follow" in follow.stderr
    assert json.loads(ctl(daemon, run_id, "-f", "--json").stdout)["error"]["details"]["field"] == "follow"
    attempt = ctl(daemon, run_id, "--attempt", "1")
    assert attempt.returncode == 2 and "only a job has attempts" in attempt.stderr
    unknown = ctl(daemon, "run_01NOSUCHRUN0000000000000000")
    assert (unknown.returncode, unknown.stdout) == (1, "") and "no run" in unknown.stderr


def daemon_bytes_read(daemon) -> int:
    """What the daemon process has read so far (every read(2) of its threads, page cache or not)."""
    with open(f"/proc/{daemon.pid}/io") as f:
        return int(next(line for line in f if line.startswith("rchar:")).split()[1])


@pytest.mark.skipif(not os.path.exists("/proc/self/io"), reason="needs Linux /proc/PID/io")
def test_the_tail_of_a_big_log_reads_only_its_end(daemon, tmp_path):
    root = tmp_path / "big"
    line_count = 800_000
    data = b"".join(b"line %09d of the training output\n" % i for i in range(line_count))  # 30 MB
    run_id = imported(daemon, root, {"stdout.log": data})
    run_logs(daemon, run_id, tail=1)  # warm: whatever a first request reads once (the route, the pool)
    before = daemon_bytes_read(daemon)
    found = run_logs(daemon, run_id, tail=5)["logs"][0]
    read = daemon_bytes_read(daemon) - before
    assert texts(found) == [f"line {i:09d} of the training output" for i in range(line_count - 5, line_count)]
    assert found["lines"] == line_count and found["size_bytes"] == len(data) > 30_000_000
    assert read < 2_000_000, f"read {read} bytes of a {len(data)}-byte file for its last 5 lines"


def test_a_log_gone_changed_or_replaced_since_the_import_is_said(daemon, tmp_path):
    root = tmp_path / "run"
    run_id = imported(daemon, root, {"stdout.log": b"one\n", "stderr.txt": b"err\n", "train.log": b"t\n"})
    (root / "stderr.txt").unlink()
    with open(root / "stdout.log", "ab") as f:
        f.write(b"two\n")
    (root / "train.log").unlink()
    (root / "train.log").symlink_to(root / "stdout.log")

    stderr, stdout, train = run_logs(daemon, run_id)["logs"]
    assert (stderr["state"], stderr["page"], stderr["size_now"]) == ("gone", None, None)
    assert stderr["problem"] == "the file is gone since the import"
    assert (stdout["state"], stdout["size_now"], texts(stdout)) == ("changed", 8, ["one", "two"])
    assert stdout["problem"] == "8 bytes now, 4 when imported: read as it is now"
    assert (train["state"], train["page"]) == ("unreadable", None) and "no longer a regular file" in train["problem"]

    shown = ctl(daemon, run_id)
    assert shown.returncode == 1  # a file it could not read
    assert shown.stdout == (f"==> {root / 'stdout.log'} <==\none\ntwo\n==> {root / 'train.log'} <==\n")
    assert f"[{root / 'stderr.txt'}: the file is gone since the import]" in shown.stderr
    assert f"[{root / 'stdout.log'}: 8 bytes now, 4 when imported: read as it is now]" in shown.stderr
    assert f"[{root / 'train.log'}: no longer a regular file" in shown.stderr


def test_control_characters_come_back_as_they_are_and_are_printed_escaped(daemon, tmp_path):
    hostile = b"red \x1b[31mtext\x1b[0m\tend\n50%\r100%\r\n\xe2\x80\xaeevil\x00 \xff\n"
    run_id = imported(daemon, tmp_path / "run", {"stdout.log": hostile})
    (log,) = run_logs(daemon, run_id)["logs"]
    assert texts(log) == ["red \x1b[31mtext\x1b[0m\tend", "50%\r100%", "\u202eevil\x00 \ufffd"]
    shown = ctl(daemon, run_id)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == "red \\x1b[31mtext\\x1b[0m\\tend\n50%\\r100%\n\\u202eevil\\x00 \ufffd\n"


def test_a_run_without_logs_has_an_empty_list(daemon, tmp_path):
    run_id = imported(daemon, tmp_path / "run", {})
    assert run_logs(daemon, run_id) == {"run_id": run_id, "job_id": None, "logs": []}
    shown = ctl(daemon, run_id)
    assert (shown.returncode, shown.stdout, shown.stderr) == (0, "", f"[run {run_id} has no log files]\n")
