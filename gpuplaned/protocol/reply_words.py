"""Words the reply types share: what a timestamp is, what a next page's cursor is, and a field
that only some replies of a type carry.

A field declared with ``listed(...)`` defaults to ``ABSENT``, and the converter leaves it out of
the JSON while it is: a checkpoint carries its metric's value in a run's list, not in a verify.
That is not ``None``, which the JSON writes as null.
"""

from __future__ import annotations

from typing import Any

import attrs
from cattrs.gen import make_dict_unstructure_fn, override

from gpuplaned.protocol.converter import converter
from gpuplaned.protocol.fields import doc

MS = "ms since the epoch"
AXES = ("step", "ts")  # a run's series by step, or by time
DIRECTIONS = ("minimize", "maximize", None)


@attrs.frozen
class Ref:  # another object, named (the project a run is in, a node forgotten)
    id: str
    name: str


def next_cursor_field() -> Any:
    """A list reply's ``next_cursor`` field."""
    return doc("pass as cursor= for the next page; null: no more")


@attrs.frozen
class _Absent:
    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()


def listed(description: str | None = None, **keywords: Any) -> Any:
    """A reply field some replies of its type leave out (``ABSENT``): optional in the schema."""
    return doc(description, default=ABSENT, optional=True, **keywords)


def _has_absent(cls: Any) -> bool:
    return attrs.has(cls) and any(a.default is ABSENT for a in attrs.fields(cls))


def _leaving_out_absent(cls: type) -> Any:
    return make_dict_unstructure_fn(cls, converter, **{a.name: override(omit_if_default=True)
                                                       for a in attrs.fields(cls) if a.default is ABSENT})


converter.register_unstructure_hook_factory(_has_absent, _leaving_out_absent)
