"""A sweep parameter's value as typed and as printed, for the daemon and the CLI alike: a command
line's ``0.1`` is the number 0.1, ``32`` the integer, ``true`` a boolean, anything else the
string; a trial's argv and env get ``true``/``false`` for a boolean, else ``str()``."""

from __future__ import annotations

import math

Value = str | int | float | bool


def parse_scalar(text: str) -> Value:
    """A value as typed on a command line: ``true``/``false``, an integer, a number, else the
    string itself (``0.1`` is 0.1, ``32`` is 32, ``adam`` is "adam")."""
    if text in ("true", "false"):
        return text == "true"
    try:
        return int(text)
    except ValueError:
        pass
    try:
        number = float(text)
    except ValueError:
        return text
    return number if math.isfinite(number) else text


def show(value: Value) -> str:
    """A value as a trial's argv and env get it: ``true``/``false`` for a bool, else ``str()``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
