"""Text from users (job names, commands, labels, error messages that quote them) made safe for a terminal.

A job named ``"\\x1b[31m..."`` or ``"a\\nb"`` printed raw recolours or clears the reader's
terminal, or forges a line of a table or a log. Every CLI table and ``show`` view, and every
line of the daemon's log, writes each such character as an escape instead: ``\\x1b``,
``\\n``, ``\\u202e``. Printable text, other languages and emoji included, is left as it is.
"""

from __future__ import annotations

import re

# C0 and C1 controls and DEL, the line and paragraph separators, and the bidirectional
# controls, which reorder what a terminal shows ("Trojan source").
_NOT_C0 = r"\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069"
_ANY_UNSAFE = re.compile(rf"[\x00-\x1f{_NOT_C0}]")
_UNSAFE_BUT_NEWLINE = re.compile(rf"[\x00-\x09\x0b-\x1f{_NOT_C0}]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(found: re.Match[str]) -> str:
    char = found.group()
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def printable(text: str) -> str:
    """``text`` on one line, each control character written as an escape."""
    return _ANY_UNSAFE.sub(_escape, text)


def printable_lines(text: str) -> str:
    """``text`` with its line breaks kept (a message with a hint, a traceback), every other
    control character written as an escape."""
    return _UNSAFE_BUT_NEWLINE.sub(_escape, text)
