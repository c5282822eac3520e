"""A run's config as one level of keys for a table: nested objects joined with ".", every
value kept as its JSON type (a None stays null, a bool a bool, a list a list), so that no
column turns into strings because one run's value was missing."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any


def flatten(config: Mapping[str, Any] | None, prefix: str = "") -> dict[str, Any]:
    """``{"optim": {"lr": 0.1}}`` -> ``{"optim.lr": 0.1}``. An empty object stays one value (``{}``),
    so a key the script set is never dropped."""
    out: dict[str, Any] = {}
    for key, value in (config or {}).items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


def json_type(value: Any) -> str:
    """number, string, bool, null, list or object (a bool is no number, though Python says so)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "list"
    return "object"


def key_types(configs: Iterable[Mapping[str, Any]]) -> dict[str, list[str]]:
    """Every key of the flattened ``configs``, by name, with the types its values take."""
    seen: dict[str, set[str]] = {}
    for config in configs:
        for key, value in config.items():
            seen.setdefault(key, set()).add(json_type(value))
    return {key: sorted(types) for key, types in sorted(seen.items())}


def json_safe(value: Any) -> Any:
    """``value`` as JSON can carry it: a NaN or infinite number (which a script's config may hold,
    and JSON cannot) becomes the string ``NaN``, ``Infinity`` or ``-Infinity``, in lists and
    objects too; ``key_types`` still counts it a number."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, list):
        return [json_safe(v) for v in value]
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    return value
