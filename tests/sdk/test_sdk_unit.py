"""The SDK without gpuplaned: log() never raises, the queue stays bounded, fork detaches, 3.8 grammar."""

from __future__ import annotations

import ast
import math
import subprocess
import sys
import textwrap
import time
import tracemalloc
from pathlib import Path

import pytest
from sdk_fake import SDK_DIR, FakeDaemon, sdk_env

sys.path.insert(0, str(SDK_DIR))

import gpuplane  # noqa: E402
from gpuplane import _endpoint  # noqa: E402
from gpuplane._run import DROPPED_METRIC, Run  # noqa: E402
from helpers import wait_for  # noqa: E402


def nowhere(tmp_path: Path) -> dict[str, str]:
    """No daemon, and no spool (test_sdk_spool.py covers it): the queue alone holds the points."""
    return {"GPUPLANE_RUNTIME_DIR": str(tmp_path / "no-daemon"), "GPUPLANE_HOME": str(tmp_path / "home"),
            "GPUPLANE_SPOOL_MAX_BYTES": "0"}


def test_the_sdk_source_parses_with_python_3_8_grammar():
    files = sorted(SDK_DIR.glob("gpuplane/**/*.py"))
    assert len(files) >= 3
    for path in files:
        ast.parse(path.read_text(), filename=str(path), feature_version=(3, 8))


def test_the_sdk_imports_nothing_from_the_daemon_or_the_cli():
    for path in SDK_DIR.glob("gpuplane/**/*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                assert name.split(".")[0] not in {"gpuplaned", "gpuplanectl", "trio", "attrs", "httpx"}, path


def test_log_never_raises_and_counts_what_it_skipped(tmp_path):
    run = Run(env=nowhere(tmp_path))
    try:
        run.log({"nan": math.nan, "inf": math.inf, "-inf": -math.inf, "int": 3, "float": 0.5})
        run.log({"s": "text", "none": None, "b": b"x", "list": [1, 2], "obj": object()})
        run.log({"flag": True, "nested": {"a": 1, "b": {"c": 2.5, "d": "skip"}}})
        run.log({i: float(i) for i in range(50_000)})
        run.log({"deep": _deep(20)})
        for bad in (None, [1, 2], "loss", 3, object(), {"x": 1}.keys()):
            run.log(bad)  # type: ignore[arg-type]
        run.log({"x": 1}, step=-1)
        run.log({"x": 1}, step="ten")  # type: ignore[arg-type]
        run.log({"x": 1}, step=2.5)  # type: ignore[arg-type]
        run.log({"x": 1}, step=7.0)  # type: ignore[arg-type]
        stats = run.stats()
        # 5 + 0 + 3 (flag, nested/a, nested/b/c) + 50k + 1 (deep, cut at MAX_DEPTH... skipped) + 1 (step 7)
        assert stats["logged"] == 5 + 3 + 50_000 + 1
        assert stats["skipped"] == 5 + 1 + 1 + 3  # strings etc., nested/b/d, deep, three bad steps
        assert stats["errors"] == 6  # the non-mapping inputs
        assert run._step == 7
    finally:
        run.finish(timeout=0)


def _deep(levels: int) -> dict:
    value: dict = {"leaf": 1}
    for _ in range(levels):
        value = {"x": value}
    return value


def test_steps_count_up_by_one_per_call_from_the_last_given_step(tmp_path):
    run = Run(env=nowhere(tmp_path))
    run.log({"a": 1})
    run.log({"a": 1, "b": 2})
    run.log({"a": 1}, step=10)
    run.log({"a": 1})
    steps = [item[1] for item in run._queue]
    run.finish(timeout=0)
    assert steps == [0, 1, 1, 10, 11]


def test_without_a_daemon_the_queue_stays_bounded_and_counts_what_it_dropped(tmp_path):
    run = Run(env=nowhere(tmp_path), max_queue=1_000)
    try:
        for i in range(20_000):
            run.log({"loss": float(i), "acc": 0.5})
        assert len(run._queue) == 1_000
        assert run._queue[-1][3] == 0.5 and run._queue[-2][3] == 19_999.0  # the newest stay
        run._wake.set()
        wait_for(lambda: run.stats()["dropped"] == 40_000 - 1_000, what="the sender to count the drops")
        assert run.stats()["logged"] == 40_000
    finally:
        run.finish(timeout=0)


def test_memory_stays_bounded_however_much_is_logged(tmp_path):
    run = Run(env=nowhere(tmp_path), max_queue=10_000)
    try:
        tracemalloc.start()
        for i in range(10_000):
            run.log({"a": float(i), "b": float(i), "c": float(i), "d": float(i)})
        after_some, _ = tracemalloc.get_traced_memory()
        for i in range(200_000):
            run.log({"a": float(i), "b": float(i), "c": float(i), "d": float(i)})
        after_many, _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert len(run._queue) == 10_000
        assert after_many - after_some < 512 * 1024
    finally:
        run.finish(timeout=0)


def test_finish_without_a_daemon_returns_at_once(tmp_path):
    run = Run(env=nowhere(tmp_path))
    run.log({"a": 1.0})
    started = time.monotonic()
    run.finish()
    assert time.monotonic() - started < 1.0
    run.log({"a": 2.0})  # ignored after finish, and no error
    assert run.finished and run.stats()["errors"] == 0


def test_finish_refuses_an_unknown_status(tmp_path):
    run = Run(env=nowhere(tmp_path))
    with pytest.raises(ValueError):
        run.finish("DONE")
    run.finish(timeout=0)


def test_every_point_reaches_the_daemon_once_with_increasing_seq(tmp_path):
    with FakeDaemon(tmp_path / "run") as fake:
        run = Run(env={"GPUPLANE_RUNTIME_DIR": str(fake.runtime_dir)}, project="p", name="n",
                  config={"lr": 0.1, "obj": object()}, tags=["a", "b"])
        assert run.session_id is not None and run.id is not None and run.id.startswith("run_")
        for step in range(25_000):
            run.log({"loss": float(step), "nan": math.nan})
        run.finish(timeout=10)
        assert fake.finished == {run.session_id: "SUCCEEDED"}
        assert [s for s, _ in fake.points("loss")] == list(range(25_000))
        assert all(math.isnan(v) for _, v in fake.points("nan"))
        seqs = sorted(seq for _, seq in fake.batches)
        assert seqs == list(range(len(seqs))) and len(seqs) >= 5  # 50k points, 10k per batch
        body = fake.sessions[run.session_id]
        assert body["project"] == "p" and body["name"] == "n" and body["tags"] == ["a", "b"]
        assert body["config"]["lr"] == 0.1 and isinstance(body["config"]["obj"], str)
        assert run.stats()["sent_points"] == 50_000


def test_a_batch_is_resent_after_503_and_lost_answers_and_stored_once(tmp_path):
    with FakeDaemon(tmp_path / "run") as fake:
        fake.fail_batches = 2
        fake.drop_batches = 2
        run = Run(env={"GPUPLANE_RUNTIME_DIR": str(fake.runtime_dir)})
        for step in range(100):
            run.log({"x": float(step)})
        run.finish(timeout=10)
        assert [s for s, _ in fake.points("x")] == list(range(100))
        assert fake.finished == {run.session_id: "SUCCEEDED"}
        assert len([p for p, _ in fake.requests if p.endswith("/batches")]) == 5


def test_the_dropped_total_is_reported_as_a_metric_once_the_daemon_answers(tmp_path):
    with FakeDaemon(tmp_path / "run") as fake:
        fake.not_ready = True
        # Without the spool (which would take the points off the queue while the daemon is not ready).
        run = Run(env={"GPUPLANE_RUNTIME_DIR": str(fake.runtime_dir), "GPUPLANE_SPOOL_MAX_BYTES": "0"},
                  max_queue=500, wait=0)
        for step in range(2_000):
            run.log({"x": float(step)})
        fake.not_ready = False
        run.finish(timeout=15)
        assert fake.points(DROPPED_METRIC)[-1][1] == 1_500.0
        assert [s for s, _ in fake.points("x")] == list(range(1_500, 2_000))


def test_a_run_joins_the_run_of_its_job(tmp_path):
    with FakeDaemon(tmp_path / "run") as fake:
        env = {"GPUPLANE_RUNTIME_DIR": str(fake.runtime_dir), "GPUPLANE_RUN_ID": "run_abc",
               "GPUPLANE_JOB_ID": "job_1", "RANK": "3"}
        run = Run(env=env)
        assert run.id == "run_abc"
        run.finish()
        body = fake.sessions[run.session_id]
        assert body["run_id"] == "run_abc" and body["job_id"] == "job_1" and body["rank"] == 3


def test_the_with_form_finishes_failed_on_an_exception(tmp_path, monkeypatch):
    with FakeDaemon(tmp_path / "run") as fake:
        monkeypatch.setenv("GPUPLANE_RUNTIME_DIR", str(fake.runtime_dir))
        with pytest.raises(RuntimeError):
            with gpuplane.init(project="p") as run:
                run.log({"a": 1})
                raise RuntimeError("boom")
        assert fake.finished == {run.session_id: "FAILED"}
        assert gpuplane.current_run() is None


def test_module_level_log_opens_a_run_lazily(tmp_path, monkeypatch):
    with FakeDaemon(tmp_path / "run") as fake:
        monkeypatch.setenv("GPUPLANE_RUNTIME_DIR", str(fake.runtime_dir))
        assert gpuplane.current_run() is None
        gpuplane.log({"a": 1.0})
        gpuplane.log({"a": 2.0})
        run = gpuplane.current_run()
        assert run is not None
        gpuplane.finish()
        assert gpuplane.current_run() is None
        assert fake.points("a") == [(0, 1.0), (1, 2.0)]
        assert fake.finished == {run.session_id: "SUCCEEDED"}


SCRIPT_FORK = """
import os, sys, gpuplane
run = gpuplane.init(project="fork")
run.log({"parent": 1.0})
pid = os.fork()
if pid == 0:
    for i in range(1000):
        run.log({"child": float(i)})
        gpuplane.log({"child_module": float(i)})
    assert gpuplane.current_run() is run and run.finished
    gpuplane.finish()
    sys.exit(0)  # runs atexit in the child
_, status = os.waitpid(pid, 0)
run.log({"parent": 2.0})
print("child", os.waitstatus_to_exitcode(status), flush=True)
"""


def test_after_fork_the_child_is_a_detached_no_op(tmp_path):
    with FakeDaemon(tmp_path / "run") as fake:
        done = subprocess.run([sys.executable, "-c", SCRIPT_FORK], env=sdk_env(fake.runtime_dir),
                              capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        assert "child 0" in done.stdout
        assert fake.names() == {"parent"}
        assert [v for _, v in fake.points("parent")] == [1.0, 2.0]
        assert len(fake.sessions) == 1 and list(fake.finished.values()) == ["SUCCEEDED"]


SCRIPT_EXIT = """
import sys, gpuplane
gpuplane.init(project="exit")
for i in range(1000):
    gpuplane.log({"x": float(i)})
if sys.argv[1] == "raise":
    raise RuntimeError("boom")
"""


@pytest.mark.parametrize(("how", "status"), [("ok", "SUCCEEDED"), ("raise", "FAILED")])
def test_at_exit_the_run_is_flushed_and_finished(tmp_path, how, status):
    with FakeDaemon(tmp_path / "run") as fake:
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-c", SCRIPT_EXIT, how], env=sdk_env(fake.runtime_dir),
                              capture_output=True, text=True, timeout=30)
        assert time.monotonic() - started < 10
        assert done.returncode == (0 if how == "ok" else 1), done.stderr
        assert [s for s, _ in fake.points("x")] == list(range(1000))
        assert list(fake.finished.values()) == [status]


def test_a_script_without_any_daemon_exits_promptly(tmp_path):
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", SCRIPT_EXIT, "ok"], env=sdk_env(tmp_path / "none"),
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 5
    assert "undelivered" in done.stderr


# ---------------------------------------------------------------- discovery


def test_the_portfile_parser_agrees_with_the_daemons():
    from gpuplaned.protocol.discovery import PortFile

    assert _endpoint.parse_portfile(PortFile(pid=7, unix="/run/x.sock").render()) == ("/run/x.sock", None)
    assert _endpoint.parse_portfile(PortFile(pid=7, tcp_port=4242).render()) == (None, 4242)
    for bad in ("", "protocol=1\npid=1\nunix=/x\n", "protocol=2\npid=1\nunix=/x\nEOF\n",
                "protocol=1\npid=1\nunix=rel\nEOF\n", "protocol=1\npid=1\nsock=70000\nEOF\n",
                "protocol=1\npid=1\nEOF\n"):
        assert _endpoint.parse_portfile(bad) is None


def test_discovery_order(tmp_path):
    rdir = tmp_path / "rt"
    rdir.mkdir()
    assert _endpoint.discover({"GPUPLANE_RUNTIME_DIR": str(rdir)}) is None
    (rdir / "gpuplaned.port").write_text("protocol=1\npid=1\nsock=4242\nEOF\n")
    (rdir / "gpuplaned.secret").write_text("s3cret\n")
    found = _endpoint.discover({"GPUPLANE_RUNTIME_DIR": str(rdir)})
    assert found is not None and (found.host, found.port, found.token) == ("127.0.0.1", 4242, "s3cret")
    sock = tmp_path / "d.sock"
    sock.touch()
    found = _endpoint.discover({"GPUPLANE_RUNTIME_DIR": str(rdir), "GPUPLANE_ENDPOINT": f"unix://{sock}"})
    assert found is not None and found.unix == str(sock)
    found = _endpoint.discover({"GPUPLANE_RUNTIME_DIR": str(rdir), "GPUPLANE_ENDPOINT": "tcp://127.0.0.1:9"})
    assert found is not None and (found.port, found.token) == (9, "s3cret")
    found = _endpoint.discover({"GPUPLANE_RUNTIME_DIR": str(rdir), "GPUPLANE_ENDPOINT": f"unix://{sock}",
                                "GPUPLANE_SERVER": "https://gpu.example.com/plane/", "GPUPLANE_TOKEN": "tok"})
    assert found is not None
    assert (found.host, found.port, found.https, found.base, found.token) == (
        "gpu.example.com", 443, True, "/plane", "tok")
    assert "tok" not in repr(found)
    found = _endpoint.discover({"XDG_RUNTIME_DIR": str(tmp_path / "xdg")})
    assert found is None


def test_a_script_reports_through_gpuplane_endpoint(tmp_path):
    with FakeDaemon(tmp_path / "run") as fake:
        (fake.runtime_dir / "gpuplaned.port").unlink()
        env = sdk_env(tmp_path / "elsewhere")
        env["GPUPLANE_ENDPOINT"] = f"unix://{fake.socket_path}"
        script = textwrap.dedent("""
            import gpuplane
            gpuplane.log({"x": 1.0})
        """)
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                              timeout=30)
        assert done.returncode == 0, done.stderr
        assert fake.points("x") == [(0, 1.0)]


def test_a_daemon_that_appears_later_gets_the_queued_points(tmp_path):
    rdir = tmp_path / "run"
    run = Run(env={"GPUPLANE_RUNTIME_DIR": str(rdir)}, wait=0)
    try:
        for step in range(10):
            run.log({"x": float(step)})
        time.sleep(0.5)  # the sender has looked and found no daemon
        assert run.session_id is None
        with FakeDaemon(rdir) as fake:
            wait_for(lambda: len(fake.points("x")) == 10, timeout=15, what="the queued points")
            run.finish()
            assert [s for s, _ in fake.points("x")] == list(range(10))
            assert fake.finished == {run.session_id: "SUCCEEDED"}
    finally:
        run.finish(timeout=0)
