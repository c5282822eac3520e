"""The CLI's shape: one noun per resource with its verbs, and every earlier spelling still
running, hidden from ``--help``, with the same output and exit code as its new one."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from gpuplanectl.main import app
from torch.utils.tensorboard import SummaryWriter
from typer.main import get_command
from typer.testing import CliRunner

from jobhelpers import ctl_in_process, wait_job

DAEMON_WIDE = ["status", "top", "events", "event-hook", "daemon", "shutdown", "ui", "mcp-stdio", "sync", "audit",
               "backup", "restore", "clean"]
NOUNS = {
    "job": ["submit", "submit-batch", "list", "show", "logs", "cancel", "retry", "priority", "remove", "explain"],
    "run": ["list", "show", "metrics", "logs", "diagnose", "compare", "import"],
    "ckpt": ["list", "best", "verify", "prune", "eval", "evals"],
    "project": ["list", "show"],
    "primary-metric": ["show", "set", "clear"],
    "node": ["list", "show", "drain", "undrain", "forget"],
    "token": ["create", "list", "revoke"],
    "webhook": ["add", "list", "test", "remove"],
    "actor": ["list", "start", "stop", "restart"],
    "group": ["list", "set", "pause", "resume"],
    "queue": ["status", "pause", "resume"],
    "sweep": ["list", "show", "set", "cancel", "pause", "resume", "retry-failed"],
}
OLD = ["start", "stop", "restart", "submit", "jobs", "logs", "explain", "runs", "metrics", "diagnose", "compare",
       "import-run", "checkpoints", "eval", "evals", "projects"]


def listed(help_text: str) -> list[str]:
    """The names in a --help's "Commands:" section."""
    section = help_text.split("\nCommands:\n", 1)[1].split("\n\n", 1)[0]  # the epilog follows a blank line
    return [m[1] for m in re.finditer(r"^  (\S+)", section, re.M)]


def test_help_lists_only_the_new_tree():
    shown = subprocess.run([sys.executable, "-m", "gpuplanectl", "--help"], capture_output=True, text=True,
                           timeout=30, stdin=subprocess.DEVNULL)
    assert shown.returncode == 0, shown.stderr
    assert listed(shown.stdout) == DAEMON_WIDE + list(NOUNS)
    runner = CliRunner()
    for noun, verbs in NOUNS.items():
        result = runner.invoke(app, [noun, "--help"], prog_name="gpuplanectl")
        assert result.exit_code == 0, result.output
        assert listed(result.output) == verbs, noun
    # The old spellings are there, hidden; none is a name of the new tree.
    root = get_command(app)
    assert all(root.commands[name].hidden for name in OLD)
    assert not set(OLD) & set(listed(shown.stdout))


def test_old_spellings_run_like_the_new(daemon, tmp_path, capsys):
    api = daemon.client()
    opened = api.post("/api/v1/sessions", {"project": "demo", "experiment": "lr-1"})
    sid, run_id = opened["session_id"], opened["run_id"]
    steps = list(range(0, 200, 10))
    api.post(f"/api/v1/sessions/{sid}/batches", {"seq": 0, "metrics": {
        "train/loss": {"step": steps, "ts": [1_000 + s for s in steps], "value": [10.0 - s / 20 for s in steps]}},
        "checkpoints": [{"path": "/ck/a.pt", "step": 50, "size_bytes": 2048}, {"path": "/ck/b.pt", "step": 150}]})
    other = api.post("/api/v1/sessions", {"name": "other"})["run_id"]
    ck = api.get(f"/api/v1/runs/{run_id}/checkpoints")["checkpoints"][0]["id"]
    job = api.post("/api/v1/jobs", {"command": ["sh", "-c", "echo hello"], "gpu": 0,
                                    "cwd": str(tmp_path)})["job"]["id"]
    root = tmp_path / "tb"
    with SummaryWriter(root) as writer:
        writer.add_scalar("loss", 0.5, 1)
    (root / "stdout.log").write_text("step 1\n")
    imported = api.post("/api/v1/runs/import", {"dir": str(root)})["run_id"]
    assert wait_job(daemon, job)["status"] == "SUCCEEDED"  # logs and explain then see it whole

    pairs = [
        (["jobs", "--json"], ["job", "list", "--json"]),  # the text has the jobs' ages, which move on
        (["jobs", "--status", "QUEUED"], ["job", "list", "--status", "QUEUED"]),
        (["submit", "--dry-run", "--gpu", "0", "--", "true"],
         ["job", "submit", "--dry-run", "--gpu", "0", "--", "true"]),
        (["logs", job], ["job", "logs", job]),
        (["logs", imported], ["run", "logs", imported]),
        (["explain", job], ["job", "explain", job]),
        (["start", "job_nope"], ["job", "retry", "job_nope"]),  # start JOB was retry
        (["stop", "job_nope"], ["job", "cancel", "job_nope"]),  # stop JOB was cancel
        (["start", "nope"], ["actor", "start", "nope"]),
        (["stop", "nope"], ["actor", "stop", "nope"]),
        (["restart", "nope"], ["actor", "restart", "nope"]),
        (["runs"], ["run", "list"]),
        (["metrics", run_id, "--points", "5"], ["run", "metrics", run_id, "--points", "5"]),
        (["diagnose", run_id], ["run", "diagnose", run_id]),
        (["compare", run_id, other], ["run", "compare", run_id, other]),
        (["import-run", str(root)], ["run", "import", str(root)]),  # again: the same run, nothing added
        (["checkpoints", run_id, "--metric", "train/loss"], ["ckpt", "list", run_id, "--metric", "train/loss"]),
        (["checkpoints", "best", "lr-1", "--project", "demo", "--metric", "train/loss"],
         ["ckpt", "best", "lr-1", "--project", "demo", "--metric", "train/loss"]),
        (["eval", ck], ["ckpt", "eval", ck]),  # no command: a usage error
        (["eval", "ck_nope", "--gpu", "0", "--", "true"], ["ckpt", "eval", "ck_nope", "--gpu", "0", "--", "true"]),
        (["evals", ck], ["ckpt", "evals", ck]),
        (["projects"], ["project", "list"]),
    ]
    codes = {}
    for old, new in pairs:
        was, now = ctl_in_process(daemon, capsys, *old), ctl_in_process(daemon, capsys, *new)
        assert was == now, (old, new)
        assert was[1] or was[2], old  # it said something
        codes[" ".join(old)] = was[0]
    # Both sides of each pair really ran, to their success or to the daemon's answer.
    assert codes["jobs --json"] == codes["runs"] == codes["projects"] == codes[f"logs {job}"] == 0
    assert codes["start job_nope"] == codes["stop job_nope"] == codes["stop nope"] == 1
    assert codes[f"eval {ck}"] == 2 and codes[f"import-run {root}"] == 0
    # And the real console script, once: an old spelling in a new process.
    assert daemon.run_ctl("import-run", str(root)).stdout == f"{imported}\n"


REPO = Path(__file__).resolve().parents[2]
# Where the code and the docs tell people what to type: messages, hints, help, the UI, the READMEs.
SOURCES = [("gpuplaned", "*.py"), ("actors", "*.py"), ("ctl", "*.py"), ("sdk/gpuplane", "*.py"), ("web/src", "*.ts*"),
           ("docs", "*.md"), (".", "README.md"), ("examples", "README.md"), ("packaging", "README.md")]
COMMAND_LINE = re.compile(r"gpuplanectl ([a-z][a-z-]*)")


def test_every_command_the_code_and_docs_name_is_in_the_new_tree():
    """A command line named anywhere (`gpuplanectl ckpt list RUN`) uses the new spelling, not a
    hidden alias. A word after `gpuplanectl` that is no command (prose) is not checked."""
    root = get_command(app)
    found, stale = 0, []
    for folder, pattern in SOURCES:
        for path in sorted((REPO / folder).glob(pattern) if folder in (".", "examples", "packaging")
                           else (REPO / folder).rglob(pattern)):
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                for match in COMMAND_LINE.finditer(line):
                    command = root.commands.get(match[1])
                    if command is None:
                        continue
                    found += 1
                    if command.hidden:
                        stale.append(f"{path.relative_to(REPO)}:{number}: {match[0]}")
    assert found > 100  # the scan saw the commands that are named
    assert stale == []
