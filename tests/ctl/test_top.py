"""``gpuplanectl top``: the frame composed from API data (pure), ``--once`` and ``--json``
against a real daemon, and the live view in a pseudo-terminal."""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time

import pytest
from gpuplanectl import topview
from gpuplanectl.commands.top import RESIZE_CHECK_S
from helpers import DaemonProcess, running_jobs
from jobhelpers import ctl, submit, wait_job

NOW = 1_700_000_000.0
MS = int(NOW * 1000)
NODE_ID = "nd_01JD00000000000000000000AA"
OWNER = "job_01JD0000000000000000000001"


def _reading(index: int, *, util: float | None = 71.0, used: int | None = 49152, owner: str | None = None,
             processes: list[dict] | None = None, error: str | None = None) -> dict:
    return {"index": index, "uuid": f"GPU-{index}", "model": "NVIDIA H100 80GB HBM3", "utilization_pct": util,
            "memory_used_mb": used, "memory_total_mb": 81559, "temperature_c": 72.4, "power_w": 600.4,
            "power_limit_w": 700.0, "sm_clock_mhz": 1980, "fan_pct": None, "throttle_reasons": [],
            "error": error, "owner_job_id": owner, "processes": processes or []}


def node_fixture(*, gpus: int = 2, sampled: bool = True, name: str = "gpu-box-1", node_id: str = NODE_ID) -> dict:
    """A NODE as ``GET /api/v1/nodes`` answers it: GPU 0 held by OWNER, GPU 1 used by a foreign process."""
    node = {
        "id": node_id, "name": name, "status": "ONLINE", "connected": True, "labels": ["h100"],
        "gpu_backend": "nvml", "max_cpu_jobs": 2, "cpu_jobs": 0, "last_heartbeat_at": MS - 2000,
        "accepting": True, "conditions": [], "gpu_backend_note": None, "snapshot": None,
        "gpus": [{"index": i, "model": "NVIDIA H100 80GB HBM3", "memory_mb": 81559,
                  "owner_job_id": OWNER if i == 0 else None, "owner_job_name": "train" if i == 0 else None}
                 for i in range(gpus)],
    }
    if sampled:
        node["snapshot"] = {
            "ts": MS - 1000,
            "gpus": [_reading(0, owner=OWNER, processes=[{"pid": 4242, "gpu_memory_mb": 48000, "job_id": OWNER,
                                                          "foreign": False}])]
                    + [_reading(i, util=0.0, used=420, processes=[{"pid": 999, "gpu_memory_mb": 512, "job_id": None,
                                                                   "foreign": True}] if i == 1 else None)
                       for i in range(1, gpus)],
            "host": {"cpu_percent": 12.3, "load1": 0.52, "load5": 0.4, "load15": 0.33, "memory_used_mb": 3174,
                     "memory_total_mb": 15974, "swap_used_mb": 0, "swap_total_mb": 2047, "disks": [],
                     "net_rx_bytes": None, "net_tx_bytes": None},
            "jobs": [{"job_id": OWNER, "gpu_indexes": [0], "gpu_memory_mb": 48000}],
        }
    return node


def job_fixture(n: int, status: str = "RUNNING", *, name: str | None = None, gpus: int = 1) -> dict:
    return {"id": f"job_01JD{n:022d}", "name": name or f"job-{n}", "status": status, "gpu": gpus,
            "gpu_indexes": [0] if status == "RUNNING" else [], "priority": 0, "node_id": NODE_ID,
            "created_at": MS - 600_000 + n, "started_at": MS - 185_000 if status == "RUNNING" else None,
            "finished_at": None}


def _check_fits(lines: list[str], width: int, height: int) -> None:
    assert len(lines) <= height
    assert all(len(line) <= width for line in lines), [line for line in lines if len(line) > width]


# --- the frame, from fixtures ---------------------------------------------------


def test_frame_shows_host_gpus_and_jobs_in_80x24():
    jobs = [job_fixture(1, name="train")] + [job_fixture(n, "QUEUED") for n in (2, 3)]
    lines = topview.compose([node_fixture()], jobs, width=80, height=24, now=NOW)
    _check_fits(lines, 80, 24)
    assert lines[0].startswith("gpuplane  ") and "1 node  1 running  2 queued" in lines[0]
    assert lines[0].endswith("q quits") and len(lines[0]) == 80
    assert lines[1] == "gpu-box-1 ONLINE  cpu 12%  mem 3.1/15.6G  load 0.52 0.40 0.33  swap 0.0/2.0G"
    gpu0 = next(line for line in lines if line.startswith("  0 ["))
    assert re.fullmatch(r"  0 \[\|+ +\]  71%   48\.0/79\.6G   72C   600/700W  train", gpu0)
    gpu1 = next(line for line in lines if line.startswith("  1 ["))
    assert re.fullmatch(r"  1 \[ +\]   0%    0\.4/79\.6G   72C   600/700W  -", gpu1)
    assert "    foreign: GPU 1 pid 999 (512M)" in lines
    header = lines.index(next(line for line in lines if line.startswith("ID ")))
    assert re.split(r"\s{2,}", lines[header]) == ["ID", "STATUS", "GPUS", "GPU MEM", "TIME", "NAME"]
    rows = [re.split(r"\s{2,}", line) for line in lines[header + 1:]]
    # Running first, then the queue in the order it will run; the job's GPU memory from the sample.
    assert rows == [[OWNER, "RUNNING", "0", "46.9G", "3m05s", "train"],
                    [job_fixture(2)["id"], "QUEUED", "(1)", "-", "9m59s", "job-2"],
                    [job_fixture(3)["id"], "QUEUED", "(1)", "-", "9m59s", "job-3"]]


def test_frame_without_a_snapshot_shows_dashes():
    lines = topview.compose([node_fixture(sampled=False)], [], width=80, height=24, now=NOW)
    _check_fits(lines, 80, 24)
    assert lines[1] == "gpu-box-1 ONLINE  (no sample yet)"
    assert re.fullmatch(r"  0 \[ +\]    -      -/79\.6G     -          -  train", lines[3])
    assert lines[-1] == "no running or queued jobs"


def test_many_jobs_are_cut_to_the_height_and_long_names_shortened():
    long_name = "a-very-long-job-name-" * 5
    jobs = [job_fixture(1, name=long_name)] + [job_fixture(n, "QUEUED", name=long_name) for n in range(2, 60)]
    lines = topview.compose([node_fixture()], jobs, width=80, height=24, now=NOW)
    _check_fits(lines, 80, 24)
    assert len(lines) == 24
    # Title, node, GPU header, 2 GPUs, foreign processes, blank, table header: 16 lines are left.
    assert lines[-1] == "... 44 more jobs"
    named = [line for line in lines if line.startswith("job_")]
    assert len(named) == 15
    assert all(len(line) == 80 and line.endswith("..") for line in named)


def test_the_gpus_keep_their_lines_and_the_jobs_get_the_rest():
    nodes = [node_fixture(gpus=8, name=f"box-{i}", node_id=f"nd_{i}") for i in range(3)]
    jobs = [job_fixture(n, "QUEUED") for n in range(10)]
    lines = topview.compose(nodes, jobs, width=80, height=24, now=NOW)
    _check_fits(lines, 80, 24)
    assert len(lines) == 24
    assert re.fullmatch(r"\.\.\. \d+ more lines", lines[-4])
    assert lines[-3] == "" and lines[-2].startswith("ID ")
    assert lines[-1] == "... 10 more jobs"
    # With more than one node, the table says where each job is.
    wide = topview.compose(nodes, jobs[:1], width=120, height=60, now=NOW)
    assert re.split(r"\s{2,}", next(line for line in wide if line.startswith("ID "))) == [
        "ID", "STATUS", "GPUS", "NODE", "GPU MEM", "TIME", "NAME"]


@pytest.mark.parametrize(("width", "height"), [(80, 24), (40, 10), (200, 60), (10, 3), (1, 1), (20, 2)])
def test_any_size_is_respected(width, height):
    nodes = [node_fixture(gpus=4), node_fixture(sampled=False, name="n" * 50, node_id="nd_2")]
    jobs = [job_fixture(n, "QUEUED" if n % 2 else "RUNNING", name="x" * 90) for n in range(30)]
    lines = topview.compose(nodes, jobs, width=width, height=height, now=NOW)
    _check_fits(lines, width, height)
    assert lines[0]


def test_a_lost_gpu_and_conditions():
    node = node_fixture()
    node["snapshot"]["gpus"][1] = _reading(1, util=None, used=None, error="gpu_lost: fell off the bus")
    node["accepting"], node["conditions"] = False, ["DISK_LOW"]
    lines = topview.compose([node], [], width=80, height=24, now=NOW)
    assert lines[1].startswith("gpu-box-1 ONLINE DISK_LOW (not accepting jobs)  cpu 12%  mem 3.1/15.6G  load ")
    assert lines[4].startswith("  1 [???") and lines[4].endswith("] error: gpu_lost: fell off the bus")


def test_shorten_and_bar():
    assert topview.shorten("abcdef", 6) == "abcdef"
    assert topview.shorten("abcdefg", 6) == "abcd.."
    assert topview.shorten("abcdefg", 2) == "ab"
    assert topview.bar(50, 10) == "[|||||     ]"
    assert topview.bar(None, 4) == "[    ]"
    assert topview.bar(250, 4) == "[||||]"


# --- against a real daemon -------------------------------------------------------


def test_once_and_json_show_the_job_holding_a_gpu(gpu_daemon, tmp_path):
    job = submit(gpu_daemon, "--gpu", "1", "--name", "holder", "--dir", str(tmp_path), "--", "sleep", "60")
    wait_job(gpu_daemon, job["id"], lambda j: j["status"] == "RUNNING", what="the job to run")
    result = ctl(gpu_daemon, "top", "--once", env={"COLUMNS": "80", "LINES": "24"})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    _check_fits(lines, 80, 24)
    assert lines[0].endswith("1 running  0 queued")  # no "q quits": nothing to quit
    gpu_lines = [line for line in lines if re.match(r"  [01] \[", line)]
    assert len(gpu_lines) == 2
    assert [line.endswith("  holder") for line in gpu_lines].count(True) == 1
    row = next(line for line in lines if line.startswith(job["id"]))
    assert re.split(r"\s{2,}", row)[1] == "RUNNING" and row.endswith("holder")

    body = json.loads(ctl(gpu_daemon, "top", "--json").stdout)
    assert [j["id"] for j in body["jobs"]] == [job["id"]]
    assert [slot["owner_job_id"] for slot in body["nodes"][0]["gpus"]].count(job["id"]) == 1


def test_no_daemon(tmp_path):
    nobody = DaemonProcess(tmp_path / "nobody")
    result = nobody.run_ctl("top", "--once")
    assert result.returncode == 1
    assert result.stderr.startswith("error: no gpuplaned is running")


# --- the live view in a pseudo-terminal ---------------------------------------------

ANSI = re.compile(rb"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07]*\x07|[()][0-9A-Za-z]|[=>78MDEHc])")


class Terminal:
    """``gpuplanectl top`` running on the slave side of a pty, with a window of the given size."""

    def __init__(self, daemon: DaemonProcess, *args: str, rows: int = 24, cols: int = 80) -> None:
        self.master, self.slave = os.openpty()
        self.resize(rows, cols)
        self.settings = termios.tcgetattr(self.slave)
        env = {**daemon.env, "TERM": "xterm", "LC_ALL": "C.UTF-8"}
        env.pop("COLUMNS", None)
        env.pop("LINES", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gpuplanectl", "top", *args], env=env,
            stdin=self.slave, stdout=self.slave, stderr=self.slave, start_new_session=True,
            preexec_fn=self._controlling_terminal)
        self.output = b""

    def _controlling_terminal(self) -> None:
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)  # so Ctrl-C on the terminal reaches it

    def resize(self, rows: int, cols: int) -> None:
        fcntl.ioctl(self.slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def read_until(self, pattern: bytes, timeout: float = 15.0) -> bytes:
        """Read what top writes until the text (escapes taken out) matches ``pattern``."""
        deadline = time.monotonic() + timeout
        start = len(self.output)
        while True:
            text = ANSI.sub(b" ", self.output[start:])
            if re.search(pattern, text):
                return text
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {pattern!r} on the screen; it shows: {text[-2000:]!r}")
            if select.select([self.master], [], [], min(left, 0.2))[0]:
                try:
                    self.output += os.read(self.master, 65536)
                except OSError:  # the slave side closed: top has exited
                    pass

    def send(self, data: bytes) -> None:
        os.write(self.master, data)

    def wait(self, timeout: float = 10.0) -> int:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            if time.monotonic() > deadline:
                raise AssertionError(f"top did not exit; it showed: {ANSI.sub(b' ', self.output)[-2000:]!r}")
            if select.select([self.master], [], [], 0.1)[0]:
                try:
                    self.output += os.read(self.master, 65536)
                except OSError:
                    pass
        self.drain()
        return self.proc.returncode

    def drain(self) -> None:
        while select.select([self.master], [], [], 0.1)[0]:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:
                return
            if not chunk:
                return
            self.output += chunk

    def restored(self) -> bool:
        """The terminal's modes are back to what they were (echo, line editing) and the
        alternate screen was left."""
        now = termios.tcgetattr(self.slave)
        return now == self.settings and b"\x1b[?1049l" in self.output

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.master)
        os.close(self.slave)


@pytest.fixture
def terminal():
    opened: list[Terminal] = []

    def start(daemon: DaemonProcess, *args: str, **size: int) -> Terminal:
        term = Terminal(daemon, *args, **size)
        opened.append(term)
        return term

    yield start
    for term in opened:
        term.close()


def test_live_view_in_a_terminal_quits_on_q(gpu_daemon, tmp_path, terminal):
    job = submit(gpu_daemon, "--gpu", "2", "--name", "both-gpus", "--dir", str(tmp_path), "--", "sleep", "60")
    wait_job(gpu_daemon, job["id"], lambda j: j["status"] == "RUNNING", what="the job to run")
    term = terminal(gpu_daemon, "--interval", "0.3")
    # Both GPU lines (the first with the job as owner); curses may write them in pieces.
    screen = term.read_until(rb"(?s)both-gpus.*\b1\s+\[")
    assert b"Traceback" not in screen
    # It refreshes: curses rewrites what changed (the clock, at least).
    term.read_until(rb"\d", timeout=5)
    term.send(b"q")
    assert term.wait() == 0
    assert term.restored()
    assert b"Traceback" not in term.output


def test_live_view_follows_a_resize_and_ctrl_c_ends_it(gpu_daemon, tmp_path, terminal):
    name = "resize-check-" + "x" * 30  # too long for the name column at 80 columns, not at 120
    job = submit(gpu_daemon, "--gpu", "1", "--name", name, "--dir", str(tmp_path), "--", "sleep", "60")
    wait_job(gpu_daemon, job["id"], lambda j: j["status"] == "RUNNING", what="the job to run")
    term = terminal(gpu_daemon, "--interval", "30", rows=24, cols=80)
    screen = term.read_until(rb"resize-check-x+\.\.")
    assert b"x" * 25 not in screen
    term.resize(30, 120)
    os.killpg(term.proc.pid, signal.SIGWINCH)
    # Redrawn at once (long before the next refresh) with the whole name; curses writes only
    # what changed on the screen, so look for the name's end.
    screen = term.read_until(b"x" * 25)
    assert b"Traceback" not in screen
    term.send(b"\x03")  # Ctrl-C, through the terminal's line discipline
    assert term.wait() == 130
    assert term.restored()
    assert b"Traceback" not in term.output


def test_daemon_gone_mid_view_restores_the_screen_and_says_so(gpu_daemon, terminal):
    term = terminal(gpu_daemon, "--interval", "0.2")
    term.read_until(rb"q quits")
    gpu_daemon.kill()
    text = term.read_until(rb"error: ")
    assert term.wait() == 1
    assert term.restored()
    assert b"Traceback" not in term.output
    assert re.search(rb"error: .*gpuplaned", ANSI.sub(b" ", term.output)), text


@pytest.fixture(scope="module")
def idle_daemon(tmp_path_factory) -> DaemonProcess:
    """One daemon (two fake GPUs, no jobs) for the tests that only draw or list what it has: none
    changes it, so none needs a fresh one, whose start was most of such a test's time."""
    with running_jobs(tmp_path_factory.mktemp("top"), "--gpus", "fake:2") as jobs:
        yield jobs.daemon


def test_the_new_commands_import_nothing_heavy(idle_daemon):
    from test_imports import HEAVY

    probe = (
        "import json, sys\n"
        "from gpuplanectl.main import app\n"
        "codes = {}\n"
        "for args in (['node', 'list'], ['node', 'show', 'nope'], ['events'], ['top', '--once'], ['top', '--json']):\n"
        "    try:\n"
        "        app(args, prog_name='gpuplanectl')\n"
        "    except SystemExit as exit:\n"
        "        codes[' '.join(args)] = exit.code\n"
        f"heavy = sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})\n"
        "print('PROBE ' + json.dumps({'codes': codes, 'heavy': heavy}))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], env=idle_daemon.env, capture_output=True, text=True,
                            timeout=30, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout.splitlines()[-1].removeprefix("PROBE "))
    assert found == {"codes": {"node list": 0, "node show nope": 1, "events": 0, "top --once": 0, "top --json": 0},
                     "heavy": []}


@pytest.mark.parametrize(("rows", "cols"), [(0, 0), (1, 1), (0, 80), (2, 500)])
def test_live_view_survives_a_tiny_or_odd_terminal(idle_daemon, terminal, rows, cols):
    """It starts in 3 rows of 10 columns; a pty nobody sized reports 0 x 0, which ncurses
    refuses ("resizeterm() returned ERR" was a crash)."""
    term = terminal(idle_daemon, "--interval", "0.2", rows=3, cols=10)
    term.read_until(rb"gpuplane")
    term.resize(rows, cols)
    os.killpg(term.proc.pid, signal.SIGWINCH)
    # Nothing may be drawn at that size to wait for: give it a few of its size checks and
    # refreshes (RESIZE_CHECK_S, --interval), then see that it is still there.
    time.sleep(4 * RESIZE_CHECK_S)
    assert term.proc.poll() is None, ANSI.sub(b" ", term.output)[-2000:]
    term.resize(24, 100)  # and back: it draws again
    os.killpg(term.proc.pid, signal.SIGWINCH)
    term.read_until(rb"q quits")
    term.send(b"q")
    assert term.wait() == 0, ANSI.sub(b" ", term.output)[-2000:]
    assert term.restored()
    assert b"Traceback" not in term.output


def test_drawing_in_a_window_curses_refuses_never_raises():
    import curses

    from gpuplanectl.commands.top import _draw

    class Refusing:
        """A window too small or odd for ncurses: every call that draws fails."""

        encoding = "utf-8"

        def getmaxyx(self) -> tuple[int, int]:
            return 3, 10

        def erase(self) -> None:
            raise curses.error("werase() returned ERR")

        def addstr(self, *args) -> None:
            raise curses.error("addwstr() returned ERR")

        def refresh(self) -> None:
            raise curses.error("wrefresh() returned ERR")

    _draw(Refusing(), {"nodes": [node_fixture()], "jobs": [job_fixture(1, name="\x1b[2Jx")]})


def test_control_characters_in_names_show_escaped():
    nodes = [node_fixture(name="box\x1b[2J")]
    lines = topview.compose(nodes, [job_fixture(1, name="a\nb\x1b[31m")], width=120, height=30, now=NOW)
    assert not any(ch in line for line in lines for ch in "\x1b\n\r")
    text = "\n".join(lines)
    assert "box\\x1b[2J ONLINE" in text and "a\\nb\\x1b[31m" in text
