"""``gpuplanectl submit|jobs|job show|cancel|retry``, ``start|stop JOB`` and the status GPU/queue sections.

Real daemons with fake GPUs run real (tiny) commands; the job file and the request body are
also checked without a daemon.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys

import pytest
from gpuplanectl.submission import INHERITED_ENV, JobFileError, SubmissionError, build_body, load_job_file
from jobhelpers import ctl, ctl_in_process, submit, wait_job
from helpers import wait_for

JOBS_HEADER = ["ID", "NAME", "STATUS", "GPUS", "ATTEMPT", "AGE", "RUNTIME", "EXIT/REASON"]


def _columns(line: str) -> list[str]:
    return re.split(r"\s{2,}", line)


def _row(out: str, first: str) -> list[str]:
    return _columns(next(line for line in out.splitlines() if line.split(" ", 1)[0] == first))


# --- with a daemon -------------------------------------------------------------


def test_submit_then_list_show_and_tail(gpu_daemon, tmp_path):
    workdir = tmp_path / "work"
    workdir.mkdir()
    shell = {"FROM_SHELL": "passed", "SECRET_TOKEN": "kept out", "VIRTUAL_ENV": "/venvs/x"}
    result = ctl(gpu_daemon, "submit", "--name", "hello", "--env", "FROM_SHELL", "--env", "SET=2",
                 "--", "sh", "-c", 'echo hi; echo "$FROM_SHELL $SET"; pwd', cwd=workdir, env=shell)
    assert result.returncode == 0, result.stderr
    match = re.fullmatch(r"(job_\w+) (QUEUED|DISPATCHING)\n", result.stdout)  # a free slot takes it at once
    assert match, result.stdout
    job_id = match[1]

    job = wait_job(gpu_daemon, job_id)
    assert (job["status"], job["exit_code"], job["failure_reason"]) == ("SUCCEEDED", 0, None)
    assert job["command"] == ["sh", "-c", 'echo hi; echo "$FROM_SHELL $SET"; pwd']
    assert (job["cwd"], job["name"], job["gpu"], job["attempt"]) == (str(workdir), "hello", 1, 1)
    assert len(job["gpu_indexes"]) == 1
    # The environment: the documented subset of the caller's, plus --env; nothing else.
    env = job["env"]
    assert (env["FROM_SHELL"], env["SET"], env["VIRTUAL_ENV"]) == ("passed", "2", "/venvs/x")
    assert env["PATH"] == gpu_daemon.env["PATH"]
    assert set(env) <= set(INHERITED_ENV) | {"FROM_SHELL", "SET"}
    assert "SECRET_TOKEN" not in env

    result = ctl(gpu_daemon, "jobs")
    assert result.returncode == 0, result.stderr
    assert _columns(result.stdout.splitlines()[0]) == JOBS_HEADER
    row = _row(result.stdout, job_id)
    assert row[1:5] == ["hello", "SUCCEEDED", str(job["gpu_indexes"][0]), "1"]
    assert row[7] == "0"

    assert [j["id"] for j in json.loads(ctl(gpu_daemon, "jobs", "--json").stdout)["jobs"]] == [job_id]
    assert json.loads(ctl(gpu_daemon, "jobs", "--status", "queued,running", "--json").stdout) == {"jobs": []}
    assert ctl(gpu_daemon, "jobs", "--status", "RUNNING").stdout == "no jobs in RUNNING\n"

    result = ctl(gpu_daemon, "job", "show", job_id)
    assert result.returncode == 0, result.stderr
    fields = dict(re.split(r":\s+", line, maxsplit=1) for line in result.stdout.splitlines())
    assert fields["status"] == "SUCCEEDED"
    assert fields["command"] == shlex.join(job["command"])
    assert fields["cwd"] == str(workdir)
    assert fields["gpus"] == f"1 (held {job['gpu_indexes'][0]})"
    assert fields["exit code"] == "0"
    assert "passed" not in result.stdout  # values stay out of the text view; names are listed
    assert "FROM_SHELL" in fields["env"]

    result = ctl(gpu_daemon, "logs", job_id)
    assert (result.returncode, result.stdout, result.stderr) == (0, f"hi\npassed 2\n{workdir}\n", "")
    result = ctl(gpu_daemon, "logs", job_id, "--tail", "1")
    assert (result.returncode, result.stdout) == (0, f"{workdir}\n")


def test_submit_from_a_job_file_with_flags_overriding(gpu_daemon, tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    job_file = project / "job.toml"
    job_file.write_text(
        'command = "sh -c \'echo file $FOO $KEEP; pwd\'"\n'
        'dir = "."\n'
        'name = "from-file"\n'
        'gpu = 2\n'
        'env = { FOO = "bar", KEEP = "kept" }\n'
        'labels = []\n'
        'priority = 3\n'
        'retry = 1\n'
        'timeout_s = 30\n'
        'stop_grace_s = 2.5\n'
        'type = "evaluate"\n'
    )
    # Run from elsewhere: the file's dir is relative to the file, not to where we are.
    job = submit(gpu_daemon, "--file", "project/job.toml", "--env", "FOO=baz", "--priority", "7", cwd=tmp_path)
    assert job["command"] == ["sh", "-c", "echo file $FOO $KEEP; pwd"]
    assert (job["cwd"], job["name"], job["gpu"], job["type"]) == (str(project), "from-file", 2, "EVALUATE")
    assert (job["priority"], job["max_attempts"], job["timeout_s"], job["stop_grace_s"]) == (7, 2, 30, 2.5)
    assert (job["env"]["FOO"], job["env"]["KEEP"]) == ("baz", "kept")

    assert wait_job(gpu_daemon, job["id"])["status"] == "SUCCEEDED"
    assert ctl(gpu_daemon, "logs", job["id"]).stdout == f"file baz kept\n{project}\n"

    # A command after `--` replaces the file's; so does --dir its dir.
    other = submit(gpu_daemon, "--file", str(job_file), "--dir", str(tmp_path), "--", "echo", "override")
    assert (other["command"], other["cwd"], other["name"]) == (["echo", "override"], str(tmp_path), "from-file")
    # Without `--`, the command starts at the first word that is not an option; its own
    # options are its own.
    bare = submit(gpu_daemon, "--gpu", "0", "echo", "--lr", "0.1", "--json")
    assert (bare["command"], bare["gpu"], bare["name"]) == (["echo", "--lr", "0.1", "--json"], 0, "echo")
    assert wait_job(gpu_daemon, other["id"])["status"] == "SUCCEEDED"


def test_bad_submissions_exit_2_and_create_nothing(gpu_daemon, tmp_path, capsys):
    (tmp_path / "broken.toml").write_text('command = ["echo"\n')
    (tmp_path / "deep.toml").write_text('command = ["echo"]\nlabels = ' + '[' * 5000 + '\n')
    (tmp_path / "typed.toml").write_text('command = ["echo"]\ngpu = "two"\n')
    (tmp_path / "unknown.toml").write_text('command = ["echo"]\ngpus_wanted = 1\n')
    (tmp_path / "nowhere.toml").write_text('command = ["echo"]\ncwd = "gone"\n')
    cases = [
        (["--node", "nope", "--", "true"], "node", "node: no node named 'nope'"),
        (["--gpu", "-1", "--", "true"], "gpu", "gpu: must be between 0 and 64, got -1"),
        (["--gpu", "3", "--", "true"], "gpu", "gpu: the job asks for 3 GPU(s) but the largest matching node has 2"),
        (["--"], "command", "no command to run"),
        (["--", ""], "command", "command: every argument must be a string and the program name non-empty"),
        (["--dir", str(tmp_path / "missing"), "--", "true"], "cwd",
         f"--dir {tmp_path / 'missing'}: no such directory on this machine ({tmp_path / 'missing'})"),
        (["--file", str(tmp_path / "nowhere.toml")], "cwd",
         f"{tmp_path / 'nowhere.toml'}: cwd: no such directory on this machine ({tmp_path / 'gone'})"),
        (["--type", "nope", "--", "true"], "type", "type: must be one of"),
        (["--env", "NOT_SET_ANYWHERE", "--", "true"], "env", "--env NOT_SET_ANYWHERE: not set in this shell"),
        (["--file", str(tmp_path / "broken.toml")], None, f"{tmp_path / 'broken.toml'}: not valid TOML"),
        (["--file", str(tmp_path / "deep.toml")], None,
         f"{tmp_path / 'deep.toml'}: not valid TOML: arrays or tables nested too deeply"),
        (["--file", str(tmp_path / "typed.toml")], "gpu", f"{tmp_path / 'typed.toml'}: gpu: must be an integer, not a string"),
        (["--file", str(tmp_path / "unknown.toml")], "gpus_wanted", f"{tmp_path / 'unknown.toml'}: gpus_wanted: unknown key"),
        (["--file", str(tmp_path / "absent.toml")], None, f"{tmp_path / 'absent.toml'}: cannot read it"),
    ]
    for args, field, message in cases:
        code, out, err = ctl_in_process(gpu_daemon, capsys, "submit", *args)
        assert (code, out) == (2, ""), (args, out, err)
        assert err.startswith(f"error: {message}"), (args, err)

        code, out, err = ctl_in_process(gpu_daemon, capsys, "submit", "--json", *args)
        assert code == 2, (args, err)
        error = json.loads(out)["error"]
        assert error["code"] == "bad_request"
        assert error["message"].startswith(message)
        assert error["details"].get("field") == field, (args, error)
    # The same through a real process, once.
    result = ctl(gpu_daemon, "submit", "--gpu", "-1", "--", "true")
    assert (result.returncode, result.stdout, result.stderr) == (2, "", "error: gpu: must be between 0 and 64, got -1\n")
    assert json.loads(ctl(gpu_daemon, "jobs", "--json").stdout) == {"jobs": []}


def test_a_shell_in_a_deleted_folder_is_told_so(gpu_daemon, tmp_path):
    gone = tmp_path / "gone"
    gone.mkdir()
    # The shell enters the folder and removes it, as `rm -rf` from another terminal would.
    script = f"cd {shlex.quote(str(gone))} && rmdir {shlex.quote(str(gone))} && exec {shlex.quote(sys.executable)} " \
             "-m gpuplanectl submit -- true"
    result = subprocess.run(["sh", "-c", script], env=gpu_daemon.env, capture_output=True, text=True, timeout=30)
    assert (result.returncode, result.stdout) == (2, ""), result.stderr
    assert result.stderr.startswith("error: this shell's current directory no longer exists"), result.stderr
    assert json.loads(ctl(gpu_daemon, "jobs", "--json").stdout) == {"jobs": []}


def test_a_job_pinned_to_a_node_fails_there_when_its_folder_is_missing(gpu_daemon, tmp_path):
    """The daemon queues a job without looking for its folder (it is the node's to have);
    the node that runs it finds it missing, and the job's failure says so, naming the node."""
    [node] = json.loads(ctl(gpu_daemon, "node", "list", "--json").stdout)["nodes"]
    missing = tmp_path / "not-here"
    job = submit(gpu_daemon, "--node", node["name"], "--dir", str(missing), "--gpu", "0", "--", "true")
    done = wait_job(gpu_daemon, job["id"])
    why = f"the working directory {missing} does not exist on node {node['name']}"
    assert (done["status"], done["failure_reason"], done["failure_message"]) == ("FAILED", "SPAWN_FAILED", why)
    shown = ctl(gpu_daemon, "job", "show", job["id"])
    assert shown.returncode == 0 and f"does not exist on node {node['name']}" in shown.stdout, shown.stdout


def test_cancel_a_running_job_while_status_shows_its_gpus_and_the_queue(gpu_daemon, tmp_path):
    sleeper = submit(gpu_daemon, "--name", "sleeper", "--gpu", "2", "--grace", "1", "--", "sleep", "60")
    job = wait_job(gpu_daemon, sleeper["id"], lambda j: j["status"] == "RUNNING", what="RUNNING")
    assert sorted(job["gpu_indexes"]) == [0, 1]
    # Both GPUs are taken: these wait, the higher priority first although submitted later.
    low = submit(gpu_daemon, "--name", "low", "--gpu", "1", "--", "true")
    high = submit(gpu_daemon, "--name", "high", "--gpu", "1", "--priority", "5", "--", "true")

    result = ctl(gpu_daemon, "status")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    gpu_header = next(i for i, line in enumerate(lines) if line.startswith("NODE  GPU  "))
    assert _columns(lines[gpu_header]) == ["NODE", "GPU", "MODEL", "UTIL", "MEMORY", "TEMP", "POWER", "JOB"]
    for index, line in enumerate(lines[gpu_header + 1:gpu_header + 3]):
        cells = _columns(line)
        assert cells[1:3] == [str(index), "Fake GPU 80GB"] and cells[-1] == f"{sleeper['id']} (sleeper)"
        assert cells[4].endswith("/80.0 GiB")  # used (once sampled) of total
    node_header = next(i for i, line in enumerate(lines) if line.startswith("NODE  STATUS"))
    assert _columns(lines[node_header + 1])[1:] == ["ONLINE", "fake", "2", "0", "0/2", "-"]
    queue = lines.index("queue: 2 jobs")
    assert [line.split()[0] for line in lines[queue + 2:queue + 4]] == [high["id"], low["id"]]

    body = json.loads(ctl(gpu_daemon, "status", "--json").stdout)
    (node,) = body["nodes"]
    assert [gpu["owner_job_id"] for gpu in node["gpus"]] == [sleeper["id"]] * 2
    assert [j["id"] for j in body["queue"]] == [high["id"], low["id"]]

    # A queued job is simply dequeued.
    result = ctl(gpu_daemon, "job", "cancel", "--wait", "--json", low["id"])
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["job"]["status"] == "CANCELLED"

    # `stop JOB` is `job cancel`: SIGTERM now, the job ends as CANCELLED.
    result = ctl(gpu_daemon, "stop", sleeper["id"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"{sleeper['id']} (sleeper): ")
    job = wait_job(gpu_daemon, sleeper["id"], timeout=10)
    assert job["status"] == "CANCELLED"
    assert job["cancel_requested"] is True

    result = ctl(gpu_daemon, "job", "cancel", sleeper["id"])
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr.startswith("error: ") and "CANCELLED" in result.stderr
    result = ctl(gpu_daemon, "stop", sleeper["id"], "--json")
    assert (result.returncode, json.loads(result.stdout)["error"]["code"]) == (1, "conflict")

    assert wait_job(gpu_daemon, high["id"])["status"] == "SUCCEEDED"  # it got the freed GPUs


def test_retry_runs_attempt_2(gpu_daemon, tmp_path):
    count = "n=$(cat count 2>/dev/null || echo 0); n=$((n+1)); echo $n > count; echo attempt $n; exit 1"
    job = submit(gpu_daemon, "--gpu", "0", "--dir", str(tmp_path), "--", "sh", "-c", count)
    first = wait_job(gpu_daemon, job["id"])
    assert (first["status"], first["attempt"], first["exit_code"], first["failure_reason"]) == ("FAILED", 1, 1, "EXIT_CODE")

    # `start JOB` is `job retry`.
    result = ctl(gpu_daemon, "start", job["id"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"{job['id']} (sh): QUEUED, attempt 2,")  # the attempt it runs as, not the last
    second = wait_job(gpu_daemon, job["id"], lambda j: j["attempt"] == 2 and j["status"] == "FAILED", what="attempt 2")
    assert second["exit_code"] == 1
    assert ctl(gpu_daemon, "logs", job["id"]).stdout == "attempt 2\n"
    assert ctl(gpu_daemon, "logs", job["id"], "--attempt", "1").stdout == "attempt 1\n"

    result = ctl(gpu_daemon, "job", "retry", "--json", job["id"])
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["job"]["status"] == "QUEUED"
    wait_job(gpu_daemon, job["id"], lambda j: j["attempt"] == 3 and j["status"] == "FAILED", what="attempt 3")
    shown = ctl(gpu_daemon, "job", "show", job["id"]).stdout
    assert re.search(r"^attempt: +3 \(2 retries\)$", shown, re.M), shown  # was "3 of 1"

    result = ctl(gpu_daemon, "job", "retry", "job_nope")
    assert (result.returncode, result.stderr) == (1, "error: no job 'job_nope'\n")


def test_status_leaves_out_jobs_on_a_daemon_without_a_job_store(daemon_factory):
    server = daemon_factory("--role", "server", "--http", "127.0.0.1:0", name="server").start()
    server.wait_ready()
    url = wait_for(lambda: server.client().get("/api/v1/daemon")["endpoints"].get("http"), what="the front")
    token = server.client().post("/api/v1/tokens", {"name": "agent", "scopes": ["agent"]})["secret"]
    agent = daemon_factory("--role", "agent", "--server", url, "--gpus", "fake:1", name="agent",
                           env={"GPUPLANE_TOKEN": token}).start()
    agent.wait_ready()
    result = ctl(agent, "status", "--json")
    assert result.returncode == 0, result.stderr
    assert set(json.loads(result.stdout)) == {"daemon", "actors"}
    result = ctl(agent, "status")
    assert result.returncode == 0, result.stderr
    assert "NODE" not in result.stdout and "queue" not in result.stdout
    result = ctl(agent, "jobs")
    assert result.returncode == 1 and "this daemon is a GPUPlane agent, and the server at " + url in result.stderr


# --- without a daemon ----------------------------------------------------------


def test_body_precedence_environment_then_file_then_flags(tmp_path):
    environ = {"PATH": "/bin", "HOME": "/home/me", "SECRET": "s", "PASSED": "p", "FOO": "shell"}
    file_body = {"command": ["python", "a.py"], "name": "n", "gpu": 2, "labels": ["a"], "env": {"FOO": "file", "X": "1"}}
    body = build_body(file_body, {"gpu": 0, "labels": ["b"], "env": ["X=2", "PASSED"], "dir": "sub", "type": "export"},
                      environ=environ, cwd="/work")
    assert body == {
        "command": ["python", "a.py"], "name": "n", "gpu": 0, "labels": ["b"], "type": "EXPORT", "cwd": "/work/sub",
        "env": {"PATH": "/bin", "HOME": "/home/me", "FOO": "file", "X": "2", "PASSED": "p"},
    }
    assert build_body({}, {"command": ["true"]}, environ={}, cwd="/here") == {"command": ["true"], "cwd": "/here", "env": {}}
    with pytest.raises(SubmissionError, match="no command to run"):
        build_body({"command": []}, {"command": []}, environ={}, cwd="/")
    with pytest.raises(SubmissionError, match="--env '=x'"):
        build_body({}, {"command": ["true"], "env": ["=x"]}, environ={}, cwd="/")
    ckpt = build_body({}, {"command": ["true"], "ckpt_dirs": ["out/ck", "/abs/ck"]}, environ={}, cwd="/work")
    assert ckpt["env"] == {"GPUPLANE_CKPT_DIR": "/work/out/ck:/abs/ck"}
    tb = build_body({}, {"command": ["true"], "tb_dirs": ["tb", "/abs/tb"]}, environ={}, cwd="/work")
    assert tb["env"] == {"GPUPLANE_TB_DIR": "/work/tb:/abs/tb"}


@pytest.mark.parametrize(("text", "key", "message"), [
    ('command = 5\n', "command", "must be an array of strings or a string, not an integer"),
    ('command = ["a", 1]\n', "command", "must be an array of strings or a string, not an array"),
    ('command = "a \'b"\n', "command", "cannot split the string into arguments"),
    ('command = ""\n', "command", "must not be empty"),
    ('cwd = "/a"\ndir = "/b"\n', "dir", "give cwd or dir, not both"),
    ('env = { A = 1 }\n', "env.A", "must be a string, not an integer"),
    ('labels = "gpu"\n', "labels", "must be an array of strings, not a string"),
    ('retry = true\n', "retry", "must be an integer, not a boolean"),
    ('timeout_s = "1h"\n', "timeout_s", "must be a number of seconds, not a string"),
    ('[job]\ncommand = "x"\n', "job", "unknown key"),
])
def test_job_file_errors_name_the_file_and_key(tmp_path, text, key, message):
    path = tmp_path / "job.toml"
    path.write_text(text)
    with pytest.raises(JobFileError) as caught:
        load_job_file(path)
    assert caught.value.key == key
    assert str(caught.value).startswith(f"{path}: {key}: {message}")


def test_job_file_paths_are_relative_to_the_file(tmp_path):
    (tmp_path / "sub").mkdir()
    path = tmp_path / "sub" / "job.toml"
    path.write_text('command = ["true"]\ncwd = "../data"\ntimeout_s = 1.5\n')
    assert load_job_file(path) == {"command": ["true"], "cwd": str(tmp_path / "data"), "timeout_s": 1.5}
    path.write_text('command = ["true"]\ndir = "~/x"\n')
    assert load_job_file(path)["cwd"] == os.path.join(os.path.expanduser("~"), "x")
