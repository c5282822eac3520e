"""The READMEs are tests: every ```console transcript runs against a real daemon, and every
```sh example names commands and flags that exist.

A file's transcripts run in order in one bash session (`transcripts.py` says how they are read
and compared), the way a reader would type them: HOME is a private dir (printed paths show it as
``/home/me``, and the daemon's runtime dir as ``/run/user/1000/gpuplane``), the working directory
is ``~/gpuplane``, a checkout as far as the transcripts go (``examples/`` and ``.venv`` are links
to this one's), and one daemon serves the whole file, started as a box without a GPU would run
it (``--gpus none``, its node named ``gpubox``). Its HTTP front is on a free port:
``127.0.0.1:8765`` in a command stands for that address. Every process the session starts is
killed at the end.

A block that cannot run in a test carries ``<!-- readme-test: skip REASON -->`` on the line
before its fence, and one whose read-only command shows another process's progress (an agent
dialling in) ``<!-- readme-test: settle `COMMAND` REASON -->``, which reruns that command for up
to ``SETTLE_S`` until it prints what the README shows; ``test_skips_are_few_and_argued`` keeps
both honest.
"""

from __future__ import annotations

import os
import re
import selectors
import shlex
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from helpers import DaemonProcess, kill_processes_with_env
from transcripts import Block, Ids, blocks, match

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
READMES = [REPO / "README.md", REPO / "examples" / "README.md"]
COMMAND_TIMEOUT = 120.0
DEFAULT_HTTP = "127.0.0.1:8765"
MAX_SKIPS = 2  # per file: a transcript that cannot run must be the rare exception
SETTLE_S = 10.0


class Shell:
    """One bash session; each command's stdout and stderr together, as a terminal shows them."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(["bash", "--noprofile", "--norc"], cwd=cwd, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.buffer = b""

    def run(self, command: str, timeout: float = COMMAND_TIMEOUT) -> tuple[list[str], int]:
        """What ``command`` printed, and its exit status. Its stdin is /dev/null: the session's
        own stdin is the script."""
        marker = f"__readme_test_{uuid.uuid4().hex}__"
        assert self.proc.stdin is not None and self.proc.stdout is not None
        # `$?` in a command is the previous command's status, as at a prompt, not the printf's.
        self.proc.stdin.write(f"(exit ${{_status:-0}}); {{ {command}\n}} </dev/null 2>&1\n_status=$?\n"
                              f"printf '\\n{marker} %s\\n' \"$_status\"\n".encode())
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            selector.register(self.proc.stdout, selectors.EVENT_READ)
            while (end := self.buffer.find(marker.encode())) < 0:
                left = deadline - time.monotonic()
                if left <= 0 or not selector.select(left):
                    raise AssertionError(f"`{command}` did not finish within {timeout:g} s; it printed:\n"
                                         + self.buffer.decode(errors="replace"))
                chunk = os.read(self.proc.stdout.fileno(), 65536)
                if not chunk:
                    raise AssertionError(f"the shell exited during `{command}`:\n"
                                         + self.buffer.decode(errors="replace"))
                self.buffer += chunk
        newline = self.buffer.find(b"\n", end)
        while newline < 0:
            self.buffer += os.read(self.proc.stdout.fileno(), 65536)
            newline = self.buffer.find(b"\n", end)
        output, status = self.buffer[:end], int(self.buffer[end + len(marker):newline])
        self.buffer = self.buffer[newline + 1:]
        return output.decode(errors="replace").splitlines(), status

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


class Session:
    """A reader's terminal for one file: a private HOME, a checkout, a daemon and a shell."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.home = root / "user"
        self.checkout = self.home / "gpuplane"
        self.checkout.mkdir(parents=True)
        (self.checkout / "examples").symlink_to(REPO / "examples")
        # The quick start activates the checkout's .venv: here, the one running the tests.
        assert (Path(sys.prefix) / "bin" / "activate").exists(), f"the tests must run in a virtualenv, not {sys.prefix}"
        (self.checkout / ".venv").symlink_to(Path(sys.prefix))
        # What marks this session's processes, daemons and jobs alike, for the clean-up.
        self.tag = f"GPUPLANE_README_TEST={root}"
        self.daemon = DaemonProcess(root / "daemon", "--gpus", "none", "--node-name", "gpubox",
                                    env={"GPUPLANE_README_TEST": str(root),
                                         "GPUPLANE_HOME": str(self.home / ".local" / "share" / "gpuplane")})
        self.daemon.start()
        try:
            info = self.daemon.wait_ready()
        except BaseException:
            self.daemon.kill()
            raise
        self.http = _http_address(info)
        env = dict(self.daemon.env, HOME=str(self.home), XDG_STATE_HOME=str(self.home / ".local" / "state"),
                   PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
                   COLUMNS="200", TERM="dumb")
        env.pop("VIRTUAL_ENV", None)
        self.shell = Shell(self.checkout, env)
        self.ids = Ids()

    def local(self, text: str) -> str:
        """A printed line with this session's own dirs written as the README would write them."""
        return (text.replace(str(self.daemon.runtime_dir), "/run/user/1000/gpuplane")
                .replace(str(self.home), "/home/me").replace(str(self.root), "<tmp>").replace(self.http, DEFAULT_HTTP))

    def run(self, command: str) -> tuple[list[str], int]:
        command = self.ids.substitute(command).replace(DEFAULT_HTTP, self.http)
        return self.shell.run(command)

    def close(self) -> None:
        self.shell.close()
        self.daemon.kill()
        kill_processes_with_env(self.tag)  # what the shell started: an agent
        kill_processes_with_env(f"GPUPLANE_RUNTIME_DIR={self.daemon.runtime_dir}")  # the daemon's jobs


def _http_address(info: dict) -> str:
    found = re.search(r"127\.0\.0\.1:\d+", repr(info.get("endpoints")))
    assert found, f"the daemon has no HTTP front on loopback: {info.get('endpoints')}"
    return found.group(0)


def console_blocks(path: Path) -> list[Block]:
    return [b for b in blocks(path) if b.lang == "console"]


def sh_blocks(path: Path) -> list[Block]:
    return [b for b in blocks(path) if b.lang in ("sh", "bash", "shell") and not b.skipped]


@pytest.mark.parametrize("readme", [p for p in READMES if console_blocks(p)], ids=lambda p: str(p.relative_to(REPO)))
def test_console_transcripts_print_what_the_readme_shows(readme: Path, tmp_path: Path) -> None:
    runnable = [b for b in console_blocks(readme) if not b.skipped]
    session = Session(tmp_path)
    problems: list[str] = []
    try:
        for block in runnable:
            for step in block.steps():
                output, status = session.run(step.command)
                settles = block.settles is not None and step.command.startswith(block.settles)
                deadline = time.monotonic() + SETTLE_S
                while settles and match(step.expected, output, session.local) is None and time.monotonic() < deadline:
                    time.sleep(0.2)
                    output, status = session.run(step.command)
                problems += _compare(session, block, step.line, step.command, step.expected, output, status)
    finally:
        session.close()
    assert not problems, "\n\n".join(problems)


def _compare(session: Session, block: Block, line: int, command: str, expected: list[str], output: list[str],
             status: int) -> list[str]:
    pairs = match(expected, output, session.local)
    why = "the lines differ" if pairs is None else None
    if pairs is None:  # still learn the ids it printed, so later commands are not all wrong too
        for want, got in zip(expected, output):
            session.ids.learn(want, got)
    for want, got in pairs or []:
        why = why or session.ids.learn(want, got)
    if why is None:
        return []
    return [f"{block.path.name}:{line}: `{command}` ({why}; exit {status})\n"
            f"--- the README shows:\n" + "\n".join(expected)
            + "\n--- it printed:\n" + "\n".join(session.local(line) for line in output)]


# ---- ```sh examples: they parse, and name gpuplanectl commands and flags that exist ----

SEPARATORS = {"|", "||", "&&", ";", "&"}
READ_ONLY = {"gpuplanectl node list", "gpuplanectl jobs", "gpuplanectl status"}


def _invocations(command: str) -> Iterator[list[str]]:
    """Each simple command of a shell line, its ``VAR=...`` prefixes dropped."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    words: list[str] = []
    for token in lexer:
        if token in SEPARATORS:
            yield words
            words = []
        else:
            words.append(token)
    yield words


def _unbracket(words: list[str]) -> list[str]:
    """``[--severity S]`` (an optional part, as in a usage line) as ``--severity S``."""
    return [w.strip("[]") for w in words if w.strip("[]") and w != "..."]


def gpuplanectl_problem(args: list[str]) -> str | None:
    """Why ``gpuplanectl ARGS`` names a command or a flag that does not exist, or None."""
    from gpuplanectl.main import app

    command: Any = typer.main.get_command(app)
    ctx = command.make_context("gpuplanectl", [], resilient_parsing=True)
    path = ["gpuplanectl"]
    rest = list(args)
    while True:
        options = _options(command)
        words: list[str] = []
        while rest:
            word = rest.pop(0)
            if word == "--":
                rest = []
                break
            if word.startswith("-") and word != "-":
                name = word.split("=", 1)[0]
                if name not in options:
                    return f"`{' '.join(path)}` has no option {name}"
                if options[name] and "=" not in word and rest:
                    rest.pop(0)
                continue
            words.append(word)
            if _is_group(command):
                break
            if not command.context_settings.get("allow_interspersed_args", True):
                rest = []  # the rest is the job's (or the hook's) own command: not ours to check
        if not _is_group(command) or not words:
            return None
        sub = command.get_command(ctx, words[0])
        if sub is None:
            return f"`{' '.join(path)}` has no command {words[0]!r}"
        path.append(words[0])
        command = sub


def _is_group(command: Any) -> bool:
    # typer bundles its own click: duck typing works with either.
    return hasattr(command, "list_commands")


def _options(command: Any) -> dict[str, bool]:
    """Each option name of a command, and whether it takes a value."""
    found: dict[str, bool] = {"--help": False, "-h": False}
    for param in command.params:
        if param.param_type_name == "option":
            for name in (*param.opts, *param.secondary_opts):
                found[name] = not param.is_flag and not param.count
    return found


def gpuplaned_problem(args: list[str]) -> str | None:
    from gpuplaned.cli import build_parser

    parser = build_parser()
    known = {s for action in parser._actions for s in action.option_strings}
    for word in args:
        if word.startswith("-") and word.split("=", 1)[0] not in known:
            return f"gpuplaned has no option {word.split('=', 1)[0]}"
    return None


def sh_problems(block: Block) -> list[str]:
    problems = []
    parsed = subprocess.run(["bash", "-n"], input="\n".join(block.text) + "\n", text=True, capture_output=True)
    if parsed.returncode != 0:
        problems.append(f"{block.where}: bash cannot parse it: {parsed.stderr.strip()}")
    for line, command in block.commands():
        for words in _invocations(command):
            words = _unbracket(words)
            while words and re.match(r"^[A-Z_]+=", words[0]):
                words = words[1:]
            if not words:
                continue
            program = Path(words[0]).name
            if program == "gpuplanectl":
                why = gpuplanectl_problem(words[1:])
            elif program == "gpuplaned":
                why = gpuplaned_problem(words[1:])
            else:
                continue
            if why:
                problems.append(f"{block.path.name}:{line}: `{command.strip()}`: {why}")
    return problems


@pytest.mark.parametrize("readme", READMES, ids=lambda p: str(p.relative_to(REPO)))
def test_shell_examples_name_commands_and_flags_that_exist(readme: Path) -> None:
    problems = [p for block in sh_blocks(readme) for p in sh_problems(block)]
    assert not problems, "\n".join(problems)


def test_the_checker_catches_a_command_or_flag_that_does_not_exist() -> None:
    assert gpuplanectl_problem(["submit", "--gpu", "0", "--", "python", "x.py", "--not-ours"]) is None
    assert gpuplanectl_problem(["--json", "jobs"]) == "`gpuplanectl` has no option --json"
    assert gpuplanectl_problem(["jobs", "--no-such-flag"]) == "`gpuplanectl jobs` has no option --no-such-flag"
    assert gpuplanectl_problem(["frobnicate"]) == "`gpuplanectl` has no command 'frobnicate'"
    assert gpuplanectl_problem(["node", "list", "--json"]) is None
    assert gpuplaned_problem(["--gpus", "fake:2", "--colour"]) == "gpuplaned has no option --colour"


@pytest.mark.parametrize("readme", READMES, ids=lambda p: str(p.relative_to(REPO)))
def test_skips_are_few_and_argued(readme: Path) -> None:
    skipped = [b for b in blocks(readme) if b.marker]
    for block in skipped:
        assert block.marker[0] in ("skip", "settle"), f"{block.where}: unknown readme-test marker {block.marker[0]!r}"
        assert len(block.marker[1].split()) >= 4, f"{block.where}: say why"
        if block.marker[0] == "settle":
            assert block.settles in READ_ONLY, f"{block.where}: only a command that changes nothing may run again"
    assert len([b for b in skipped if b.skipped]) <= MAX_SKIPS, [b.where for b in skipped]


def test_every_command_takes_json() -> None:
    """The README's promise: "Every `gpuplanectl` command takes `--json` for scripts"."""
    from gpuplanectl.main import app

    # mcp-stdio speaks JSON-RPC on stdout already: its whole output is JSON.
    exempt = {"gpuplanectl mcp-stdio"}
    missing = []

    def walk(command: Any, path: str) -> None:
        if _is_group(command):
            ctx = command.make_context(path, [], resilient_parsing=True)
            for name in command.list_commands(ctx):
                walk(command.get_command(ctx, name), f"{path} {name}")
        elif path not in exempt and "--json" not in _options(command):
            missing.append(path)

    walk(typer.main.get_command(app), "gpuplanectl")
    assert not missing, missing
