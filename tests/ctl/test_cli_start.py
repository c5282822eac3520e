"""gpuplanectl's start makes only the command it runs (``gpuplanectl.main.only``): typer makes
every command's click object at each start, and a run needs its own; the root's options still
come first, and whatever is not a command of the tree gets the whole app's answer."""

from __future__ import annotations

import subprocess
import sys

import pytest
from gpuplanectl.main import app, command_word, only
from typer.main import get_command


@pytest.mark.parametrize(("args", "word"), [
    (["job", "submit", "--sweep", "a=1", "--", "echo"], "job"),
    (["--runtime-dir", "/x", "--server", "http://h:1", "sweep", "list"], "sweep"),
    (["--profile=lab", "--token=t", "submit", "--gpu", "0"], "submit"),
    (["--help"], None),
    (["--no-such-option", "job"], None),
    ([], None),
])
def test_the_command_word_comes_after_the_roots_options(args, word):
    assert command_word(args) == word


def test_only_makes_the_one_command_or_noun():
    assert list(get_command(only("job")).commands) == ["job"]
    assert list(get_command(only("submit")).commands) == ["submit"]
    assert only("jbo") is None and only(None) is None
    assert len(get_command(app).commands) > 30


def test_a_trimmed_start_answers_as_the_whole_app(tmp_path):
    def run(*args):
        return subprocess.run([sys.executable, "-m", "gpuplanectl", "--runtime-dir", str(tmp_path), *args],
                              capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)

    help_ = run("job", "submit", "--help")
    assert help_.returncode == 0 and "Usage: gpuplanectl job submit [OPTIONS] [-- COMMAND]..." in help_.stdout
    assert "--sweep NAME=V1,V2" in help_.stdout
    typo = run("jbo")
    assert typo.returncode == 2 and "No such command 'jbo'. Did you mean 'job'?" in typo.stderr
    assert "no gpuplaned is running" in run("sweep", "list").stderr
