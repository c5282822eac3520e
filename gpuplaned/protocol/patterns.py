"""Patterns a caller supplies (a grep regex, a metric-name glob), matched in time linear in the text.

Python's ``re`` backtracks: MCP ``tail_logs`` with ``grep: "(.+)+X"`` ran for minutes over one
34-character line, on the event loop, and the daemon stopped answering (issue 29). Every
pattern a caller sends is compiled here by RE2 (``google-re2``), which never backtracks; the
syntax it lacks (backreferences, lookarounds, possessive quantifiers) is a 400 that names the
caller's argument.

Linear is not free: RE2's cost is the text's length times the compiled program's size, and
``(.{0,30}){0,30}X`` compiles to 8,000 instructions (100 ms over one 64 KiB line). So a
program is capped at ``MAX_PROGRAM`` instructions (a 200-character literal needs about 200),
and a scan over many lines (``scan_lines``) stops at a byte and a time budget. Callers run a
large scan in a worker thread: RE2 lets go of the GIL while it matches.

Globs (``gpu*.util``, ``train/*``, ``gpu[01].util``) are translated to RE2 as fnmatch reads
them: ``*`` any run of characters, ``/`` included; ``?`` one character; ``[...]`` a class,
``[!...]`` its complement; an unclosed ``[`` is itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import re2

from gpuplaned.protocol.errors import ApiError, ErrorCode

MAX_PATTERN = 200  # characters: a grep or a glob longer than this is a mistake or an attack
MAX_PROGRAM = 1000  # RE2 instructions (see the module's docstring)
# Per compiled pattern (RE2's own default is 8 MiB); re2 caches the last 128 compiled.
MAX_MEMORY = 2 << 20
# A scan's budgets: about 0.1 s of matching for a pattern near MAX_PROGRAM, then it stops.
SCAN_BYTES = 16 << 20
SCAN_SECONDS = 2.0

_RE2_LACKS = " (RE2 has no backreferences like \\1, no lookarounds like (?=, and \\z where Python has \\Z)"
_REMEMBERED = 10_000  # names a NameFilter remembers the answer for
_NOTHING = r"[^\x00-\x{10FFFF}]"  # matches no character: RE2 has no (?!)


@attrs.frozen
class Pattern:
    """A caller's pattern, compiled by RE2. ``source`` is what the caller sent."""

    source: str
    argument: str = attrs.field(repr=False)
    _regexp: Any = attrs.field(repr=False, eq=False)

    def search(self, text: str) -> bool:
        """True when the pattern matches somewhere in ``text``."""
        return self._regexp.search(text) is not None

    def fullmatch(self, text: str) -> bool:
        """True when the pattern matches all of ``text`` (what a glob means)."""
        return self._regexp.fullmatch(text) is not None


def compile_regex(source: str, argument: str) -> Pattern:
    """A caller's regular expression (RE2's syntax: Python's without backreferences or lookarounds).

    Args:
        source: the pattern as the caller sent it.
        argument: the caller's name for it (``grep``, ``--grep``), for the error.

    Raises:
        ApiError: BAD_REQUEST naming ``argument``, for a pattern too long, one RE2 cannot
            compile, or one whose program is over ``MAX_PROGRAM``.
    """
    return _compile(source, source, argument, "a regular expression")


def compile_glob(source: str, argument: str) -> Pattern:
    """A caller's shell pattern (``gpu*.util``), matched against whole names with ``fullmatch``.

    Raises:
        ApiError: BAD_REQUEST naming ``argument`` (see ``compile_regex``).
    """
    return _compile(source, glob_to_regex(source), argument, "a shell pattern")


def is_glob(text: str) -> bool:
    """Whether ``text`` holds a wildcard (otherwise it is a name, compared as it is)."""
    return any(c in text for c in "*?[")


class PatternRefused(ValueError):
    """Why a caller's pattern is refused, in words that follow the argument's name."""

    def __init__(self, why: str, details: dict[str, Any]) -> None:
        super().__init__(why)
        self.why, self.details = why, details


def glob_fault(source: str) -> str | None:
    """What is wrong with a glob (for a field's ``check``); None when it compiles."""
    try:
        _compile_re2(source, glob_to_regex(source), "a shell pattern")
    except PatternRefused as refused:
        return refused.why
    return None


def _compile(source: str, regex: str, argument: str, what: str) -> Pattern:
    try:
        return Pattern(source, argument, _compile_re2(source, regex, what))
    except PatternRefused as refused:
        raise ApiError(ErrorCode.BAD_REQUEST, f"{argument}: {refused.why}",
                       {"field": argument, "pattern": source[:MAX_PATTERN], **refused.details}) from None


def _compile_re2(source: str, regex: str, what: str) -> Any:
    if len(source) > MAX_PATTERN:
        raise PatternRefused(f"{what} of at most {MAX_PATTERN} characters, got {len(source)}", {})
    options = re2.Options()
    options.max_mem = MAX_MEMORY
    options.never_capture = True  # only whether it matches: no group positions to track
    options.log_errors = False  # a caller's mistake is their 400, not a line in the daemon's log
    try:
        compiled = re2.compile(regex, options)
    except re2.error as exc:
        why = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        hint = _RE2_LACKS if any(w in why for w in ("escape sequence", "perl operator")) else ""
        raise PatternRefused(f"not {what} this daemon accepts: {why}{hint}", {}) from None
    # The binding keeps RE2's own object as _regexp; ProgramSize is RE2's public API, which it does not wrap.
    size = max(compiled._regexp.ProgramSize(), compiled._regexp.ReverseProgramSize())
    if size > MAX_PROGRAM:
        raise PatternRefused(f"{what} too costly to match ({size} RE2 instructions, at most {MAX_PROGRAM}): "
                             "use fewer or smaller repeats", {"program_size": size})
    return compiled


class NameFilter:
    """The series names a caller asked for: exact names, and globs (``gpu*.util``).

    Each name's answer is remembered: a follower asks about the same few series in every batch.
    """

    def __init__(self, wanted: Sequence[str], argument: str) -> None:
        self.wanted = tuple(wanted)
        self._globs = [compile_glob(w, argument) for w in dict.fromkeys(self.wanted) if is_glob(w)]
        self._exact = {w for w in self.wanted if not is_glob(w)}
        self._seen: dict[str, bool] = {}

    def __call__(self, name: str) -> bool:
        """Whether ``name`` is wanted (every name is when none was asked for)."""
        if not self.wanted:
            return True
        answer = self._seen.get(name)
        if answer is None:
            answer = name in self._exact or any(g.fullmatch(name) for g in self._globs)
            if len(self._seen) < _REMEMBERED:
                self._seen[name] = answer
        return answer

    def expand(self, known: Sequence[str]) -> list[str]:
        """The names asked for, in their order: an exact name as given (even one not in
        ``known``), a glob as the names of ``known`` it matches; each name once."""
        if not self.wanted:
            return list(known)
        out: dict[str, None] = {}
        for wanted in self.wanted:
            if is_glob(wanted):
                glob = next(g for g in self._globs if g.source == wanted)
                out.update((n, None) for n in known if glob.fullmatch(n))
            else:
                out[wanted] = None
        return list(out)


def glob_to_regex(glob: str) -> str:
    """``glob`` as an RE2 regular expression, to be matched against a whole name."""
    out: list[str] = []
    i, n = 0, len(glob)
    while i < n:
        c = glob[i]
        i += 1
        if c == "*":
            if not out or out[-1] != ".*":  # '**' is '*': one '.*' scans once
                out.append(".*")
        elif c == "?":
            out.append(".")
        elif c == "[":
            end = _class_end(glob, i)
            if end is None:
                out.append(re2.escape(c))
            else:
                out.append(_class(glob[i:end]))
                i = end + 1
        else:
            out.append(re2.escape(c))
    return "(?s:" + "".join(out) + ")"


def _class_end(glob: str, start: int) -> int | None:
    """The index of the ``]`` that closes a class opened before ``start``; None if none does."""
    i = start
    if i < len(glob) and glob[i] == "!":
        i += 1
    if i < len(glob) and glob[i] == "]":  # a ']' first is a member
        i += 1
    end = glob.find("]", i)
    return end if end >= 0 else None


def _class(body: str) -> str:
    negate = body.startswith("!")
    if negate:
        body = body[1:]
    members: list[str] = []
    i = 0
    while i < len(body):
        if i + 2 < len(body) and body[i + 1] == "-":
            low, high = body[i], body[i + 2]
            if low <= high:  # fnmatch drops a reversed range
                members.append(f"{_member(low)}-{_member(high)}")
            i += 3
        else:
            members.append(_member(body[i]))
            i += 1
    if not members:
        return "(?s:.)" if negate else _NOTHING
    return "[" + ("^" if negate else "") + "".join(members) + "]"


def _member(char: str) -> str:
    return char if char.isalnum() else "\\" + char if char.isascii() else char


@attrs.frozen
class Scan:
    """What ``scan_lines`` found.

    ``found`` holds the last ``keep`` matching lines, oldest first; ``matched`` counts every
    match in the ``scanned`` newest lines; ``stopped`` is None when every line was searched,
    else the budget that stopped the scan ("bytes" or "seconds") before the older lines.
    """

    found: list[tuple[int, str]]
    matched: int
    scanned: int
    stopped: str | None


def scan_lines(lines: Sequence[tuple[int, str]], pattern: Pattern | None, keep: int, *,
               max_bytes: int = SCAN_BYTES, seconds: float = SCAN_SECONDS,
               clock: Callable[[], float] = time.monotonic) -> Scan:
    """Search ``lines`` (``(offset, text)``, oldest first) from the newest back, within budgets.

    Newest first, so that a budget cut leaves out the oldest lines, which a tail wants least.
    Blocking and CPU-bound: run it in a worker thread when ``lines`` is large.

    Args:
        lines: the lines to search, oldest first.
        pattern: the filter; None keeps every line.
        keep: at most this many matching lines come back (the newest).
        max_bytes: stop after searching this many characters.
        seconds: stop after this long by ``clock``, checked after each line.
        clock: a monotonic clock (injected by tests).
    """
    found: list[tuple[int, str]] = []
    matched = spent = scanned = 0
    deadline = clock() + seconds
    stopped = None
    for line in reversed(lines):
        if pattern is not None:
            if spent >= max_bytes:
                stopped = "bytes"
                break
            if clock() >= deadline:
                stopped = "seconds"
                break
            spent += len(line[1])
        scanned += 1
        if pattern is None or pattern.search(line[1]):
            matched += 1
            if len(found) < keep:
                found.append(line)
    found.reverse()
    return Scan(found, matched, scanned, stopped)
