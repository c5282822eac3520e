"""THE cattrs converter: every layer turns wire types into JSON-ready values through it."""

from __future__ import annotations

from typing import Any

from cattrs.preconf.json import make_converter

converter = make_converter()


def unstructure(value: Any) -> Any:
    return converter.unstructure(value)
