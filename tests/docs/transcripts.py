"""The console transcripts and shell examples of a Markdown file, and how a run is compared to one.

A ```console block is a transcript: a line starting with ``$ `` is a command (a line ending in
``\\`` goes on to the next), and the lines after it, up to the next command, are what it prints.
An expected line that is exactly ``...`` stands for any number of lines. A ```sh block is
commands without their output. An HTML comment ``<!-- readme-test: skip REASON -->`` on the
line before a fence marks a block that cannot run in a test, and says why;
``<!-- readme-test: settle `COMMAND` REASON -->`` lets the steps of that command (one that only
reads, such as ``gpuplanectl node list``) be run again for a few seconds until they print what
the README shows, where they show another process's progress (an agent dialling in).

Comparing: both sides are split into whitespace-separated tokens (a table's column padding
depends on the widths of what was masked), and masked where a run differs from the README by
nature: ids (``job_<ULID>``; the same README id must stand for the same real id throughout a
file, and a later command's README id is replaced by the real one), UUIDs, long hex, dates,
times, durations, pids, ports, decimal numbers (losses, sizes: training numerics and file
sizes vary with the machine) and sparklines. Integers, words and the number of lines are
compared as printed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

FENCE = re.compile(r"^```(\w*)\s*$")
MARKER = re.compile(r"^<!--\s*readme-test:\s*(?P<verb>\w+)\s*(?P<rest>.*?)\s*-->\s*$")
ELLIPSIS = "..."

# A typed id: job_, run_, ckpt_, node_ ... then a 26-character Crockford base32 ULID.
ID = re.compile(r"\b[a-z]+_[0-9A-HJKMNP-TV-Z]{26}\b")
MASKS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"\bgpp_[A-Za-z0-9_\-]+"), "<secret>"),
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"), "<uuid>"),
    (re.compile(r"\b\d{4}-\d{2}-\d{2}(?:[ T]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?"), "<date>"),
    (re.compile(r"\b\d{1,2}:\d{2}:\d{2}\b"), "<time>"),
    (re.compile(r"\bpid[ =:]?\s*\d+"), "pid <pid>"),
    (re.compile(r"(?<=[\w\]]):\d{2,5}\b"), ":<port>"),
    (re.compile(r"\b[0-9a-f]{12,}\b"), "<hex>"),
    # Durations (12 s, 3.5s, 250ms, 2m10s, 1h) before plain numbers, so the unit goes too.
    (re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?\s?(?:ms|[smhd])(?:\d+(?:\.\d+)?(?:ms|[smhd]))*(?![\w/])"), "<dur>"),
    (re.compile(r"(?<![\w.])[-+]?\d+\.\d+(?:[eE][-+]?\d+)?|(?<![\w.])[-+]?\d+[eE][-+]\d+"), "<num>"),
    (re.compile(r"[▁▂▃▄▅▆▇█]+"), "<spark>"),
]


@dataclass
class Step:
    """One command of a transcript and the lines the README says it prints."""

    command: str
    expected: list[str]
    line: int  # where the command starts in the file, 1-based


@dataclass
class Block:
    path: Path
    line: int  # the fence's line, 1-based
    lang: str
    text: list[str]
    marker: tuple[str, str] | None = None  # (verb, reason) of a readme-test comment

    @property
    def where(self) -> str:
        return f"{self.path.name}:{self.line}"

    @property
    def settles(self) -> str | None:
        """The command whose steps may be rerun until they match, or None."""
        if self.marker and self.marker[0] == "settle":
            found = re.match(r"`([^`]+)`", self.marker[1])
            return found.group(1) if found else None
        return None

    @property
    def skipped(self) -> str | None:
        """The documented reason this block is not run, or None."""
        if self.marker and self.marker[0] == "skip":
            return self.marker[1] or "(no reason given)"
        return None

    def steps(self) -> list[Step]:
        steps: list[Step] = []
        lines = iter(enumerate(self.text, start=self.line + 1))
        for number, line in lines:
            if line.startswith("$ "):
                command = line[2:]
                while command.endswith("\\"):
                    number_more, more = next(lines)
                    command += "\n" + more
                steps.append(Step(command, [], number))
            elif steps:
                steps[-1].expected.append(line)
            elif line.strip():
                raise ValueError(f"{self.where}: output before the first `$ ` command: {line!r}")
        return steps

    def commands(self) -> Iterator[tuple[int, str]]:
        """A ```sh block's commands (continuation lines joined), without comment lines."""
        pending, start = "", 0
        for number, line in enumerate(self.text, start=self.line + 1):
            if not pending:
                start = number
                if not line.strip() or line.lstrip().startswith("#"):
                    continue
            pending += line[:-1] + " " if line.endswith("\\") else line
            if not line.endswith("\\"):
                yield start, pending
                pending = ""


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of a Markdown file, each with the readme-test marker just before it."""
    found: list[Block] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marked = MARKER.match(before)
        found.append(Block(path, i + 1, opening.group(1), lines[i + 1:end],
                           (marked.group("verb"), marked.group("rest")) if marked else None))
        i = end + 1
    return found


def mask(line: str, extra: Callable[[str], str] = lambda s: s) -> list[str]:
    """``line``'s tokens with what varies from run to run masked (ids become ``<id>``)."""
    line = extra(line)
    line = ID.sub("<id>", line)
    for pattern, replacement in MASKS:
        line = pattern.sub(replacement, line)
    return line.split()


@dataclass
class Ids:
    """README ids and the real ids they stand for, one to one across a whole file."""

    real: dict[str, str] = field(default_factory=dict)

    def learn(self, expected: str, actual: str) -> str | None:
        """Pair the ids of two matching lines in order; a contradiction is returned as a message."""
        want, got = ID.findall(expected), ID.findall(actual)
        if len(want) != len(got):
            return f"{len(want)} ids expected, {len(got)} printed"
        for readme_id, real_id in zip(want, got):
            known = self.real.setdefault(readme_id, real_id)
            if known != real_id:
                return f"README's {readme_id} was {known} before, and is {real_id} here"
            if readme_id.split("_")[0] != real_id.split("_")[0]:
                return f"README's {readme_id} is a {real_id.split('_')[0]} id here"
        others = [r for r, a in self.real.items() if a in got and r not in want]
        if others:
            return f"{others[0]} stood for {self.real[others[0]]} before"
        return None

    def substitute(self, command: str) -> str:
        return ID.sub(lambda m: self.real.get(m.group(0), m.group(0)), command)


def match(expected: list[str], actual: list[str],
          extra: Callable[[str], str] = lambda s: s) -> list[tuple[str, str]] | None:
    """The pairs (README line, printed line) if ``actual`` matches ``expected`` (``...`` taking
    any number of lines), else None. Blank lines at either end are ignored."""
    want = _trim(expected)
    got = _trim(actual)
    masked_got = [mask(line, extra) for line in got]
    masked_want = [None if line.strip() == ELLIPSIS else mask(line, extra) for line in want]

    def walk(i: int, j: int) -> list[tuple[str, str]] | None:
        if i == len(want):
            return [] if j == len(got) else None
        if masked_want[i] is None:
            for k in range(j, len(got) + 1):
                rest = walk(i + 1, k)
                if rest is not None:
                    return rest
            return None
        if j < len(got) and masked_want[i] == masked_got[j]:
            rest = walk(i + 1, j + 1)
            if rest is not None:
                return [(want[i], got[j]), *rest]
        return None

    return walk(0, 0)


def _trim(lines: list[str]) -> list[str]:
    lines = [line.rstrip() for line in lines]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return lines
