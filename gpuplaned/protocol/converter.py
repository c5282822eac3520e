"""THE cattrs converter: every layer turns wire types into JSON-ready values through it, and
every edge (request bodies, query parameters, config sections, node frames, runtime and
exit records) turns untrusted JSON into attrs classes through ``structure``.

Structuring is strict: ``"5"`` is no int and ``True`` is no number (JSON has both, and
a client that sends one for the other has a bug worth naming), a key the class does not
have is refused, and a failure becomes one ``ApiError`` (400, ``details.field`` the
dotted path) in ``invalid``, whichever edge it came from.
"""

from __future__ import annotations

import enum
import typing
from typing import Any, TypeVar

import attrs
from cattrs import ClassValidationError, ForbiddenExtraKeysError, IterableValidationError
from cattrs.cols import homogenous_tuple_structure_factory, list_structure_factory, mapping_structure_factory
from cattrs.gen import make_dict_structure_fn
from cattrs.preconf.json import make_converter

from gpuplaned.protocol.errors import ApiError, ErrorCode

T = TypeVar("T")

converter = make_converter(forbid_extra_keys=True)


def unstructure(value: Any) -> Any:
    return converter.unstructure(value)


class FieldInvalid(ValueError):
    """What a validator raises: the field at fault (dotted, relative to its class) and why."""

    known: tuple[str, ...] | None = None  # set by ``check`` for an unknown key: the keys its class has

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def _strict(kind: type, names: str, *accepted: type) -> Any:
    def structure(value: Any, hint: Any) -> Any:
        if type(value) not in accepted:  # bool is an int subclass: compared exactly
            raise FieldInvalid("", f"must be {names}, got {_json_type(value)}")
        if hint is kind:
            return kind(value)
        # A StrEnum (IntEnum) is a str (int) too, so it lands here: its value must be one of its members.
        try:
            return hint(value)
        except ValueError:
            raise FieldInvalid("", f"must be one of {', '.join(str(m.value) for m in hint)}, "
                                   f"got {_json_type(value)}") from None

    return structure


converter.register_structure_hook(int, _strict(int, "an integer", int))
converter.register_structure_hook(float, _strict(float, "a number", int, float))
converter.register_structure_hook(str, _strict(str, "a string", str))
converter.register_structure_hook(bool, _strict(bool, "true or false", bool))
# A StrEnum (IntEnum) member goes out as its plain value: a reply holds JSON's own types. (Registered
# on the enum base, which comes before str and int in a member's MRO, where the default is identity.)
converter.register_unstructure_hook(enum.StrEnum, lambda member: member.value)
converter.register_unstructure_hook(enum.IntEnum, lambda member: member.value)


def _container(origin: type, names: str, accepted: type) -> None:
    """cattrs reads any iterable as a list (a string as its characters) and fails on a list
    where a dict is due: a JSON value of the wrong kind is named first instead."""
    def factory(hint: Any) -> Any:
        args = typing.get_args(hint)
        if origin is dict:
            inner = None if args[1:] in ((Any,), ()) else mapping_structure_factory(hint, converter)
        elif origin is list:
            inner = list_structure_factory(hint, converter)
        elif not args or args[-1] is Ellipsis:
            inner = homogenous_tuple_structure_factory(hint, converter)
        else:  # tuple[str, int, float]: one item of each type (a SysMetrics point)
            inner = _fixed_tuple(args)

        def structure(value: Any, kind: Any) -> Any:
            if type(value) is not accepted:
                raise FieldInvalid("", f"must be {names}, got {_json_type(value)}")
            return dict(value) if inner is None else inner(value, kind)

        return structure

    converter.register_structure_hook_factory(lambda hint: typing.get_origin(hint) is origin or hint is origin,
                                              factory)


def _fixed_tuple(args: tuple[Any, ...]) -> Any:
    hooks = [converter.get_structure_hook(arg) for arg in args]

    def structure(value: Any, _: Any) -> tuple[Any, ...]:
        if len(value) != len(args):
            raise FieldInvalid("", f"must hold {len(args)} items, got {len(value)}")
        return tuple(hook(item, arg) for hook, item, arg in zip(hooks, value, args))

    return structure


def _object(cls: type) -> Any:
    """A nested attrs class given something else than an object: named, not a TypeError."""
    inner = make_dict_structure_fn(cls, converter, _cattrs_forbid_extra_keys=True)

    def structure(value: Any, kind: Any) -> Any:
        if type(value) is not dict:
            raise FieldInvalid("", f"must be an object, got {_json_type(value)}")
        return inner(value, kind)

    return structure


converter.register_structure_hook_factory(attrs.has, _object)
_container(list, "an array", list)
_container(tuple, "an array", list)
_container(dict, "an object", dict)


def structure(data: Any, cls: type[T], *, what: str = "the body") -> T:
    """``data`` as a ``cls``, or ApiError(400) naming the first field at fault."""
    if attrs.has(cls) and not isinstance(data, dict):
        raise ApiError(ErrorCode.BAD_REQUEST, f"{what} must be a JSON object, got {_json_type(data)}")
    try:
        return converter.structure(data, cls)
    except (ClassValidationError, IterableValidationError, FieldInvalid) as exc:
        raise invalid(exc, what) from None


def invalid(exc: BaseException, what: str = "the body") -> ApiError:
    """The one translation of a structuring failure into the wire's error body."""
    path, message = _first_fault(exc, [])
    field = ".".join(str(part) for part in path)
    if not field:
        return ApiError(ErrorCode.BAD_REQUEST, f"{what}: {message}")
    return ApiError(ErrorCode.BAD_REQUEST, f"{field}: {message}", {"field": field})


def check(data: Any, cls: type[T]) -> T:
    """``structure`` for the edges that are not HTTP (config files, node frames, script records):
    ``data`` as a ``cls``, or the first fault as one ``FieldInvalid`` (``field`` dotted from the
    top; ``known`` set when it is a key the class does not have) for the edge to word."""
    if attrs.has(cls) and not isinstance(data, dict):
        raise FieldInvalid("", f"must be an object, got {_json_type(data)}")
    try:
        return converter.structure(data, cls)
    except (ClassValidationError, IterableValidationError, FieldInvalid) as exc:
        path, message = _first_fault(exc, [])
        fault = FieldInvalid(".".join(str(part) for part in path), message)
        leaf = exc
        while isinstance(leaf, (ClassValidationError, IterableValidationError)):
            leaf = leaf.exceptions[0]
        if isinstance(leaf, ForbiddenExtraKeysError) and attrs.has(leaf.cl):
            fault.known = tuple(a.name for a in attrs.fields(leaf.cl))
        raise fault from None


class TaggedUnion:
    """A closed family of messages told apart by one key, ``{"type": "hello", ...}``: the node
    frames (``gpuplaned.protocol.agent.FRAMES``). ``structure`` raises ``FieldInvalid`` as
    ``check`` does (on the key itself when it names no member); ``unstructure`` adds the key."""

    def __init__(self, tags: dict[str, type], *, key: str = "type") -> None:
        self.tags = tags
        self.key = key
        self._tag_of = {cls: tag for tag, cls in tags.items()}

    def tag_of(self, value: Any) -> str:
        return self._tag_of[type(value)]

    def structure(self, data: Any) -> Any:
        if type(data) is not dict:
            raise FieldInvalid("", f"must be an object, got {_json_type(data)}")
        tag = data.get(self.key)
        cls = self.tags.get(tag) if isinstance(tag, str) else None
        if cls is None:
            raise FieldInvalid(self.key, f"must be one of {', '.join(self.tags)}, got {_json_type(tag)}")
        return check({k: v for k, v in data.items() if k != self.key}, cls)

    def unstructure(self, value: Any) -> dict[str, Any]:
        return {self.key: self._tag_of[type(value)], **converter.unstructure(value)}


def _first_fault(exc: BaseException, path: list[Any]) -> tuple[list[Any], str]:
    """The path to the first leaf error under a cattrs exception group, and its message."""
    if isinstance(exc, (ClassValidationError, IterableValidationError)):
        sub = exc.exceptions[0]
        return _first_fault(sub, path + _note_path(sub))
    if isinstance(exc, ForbiddenExtraKeysError):
        extra = sorted(exc.extra_fields)
        known = ", ".join(a.name for a in attrs.fields(exc.cl)) if attrs.has(exc.cl) else ""
        return path + [extra[0]], f"unknown field{' (known: ' + known + ')' if known else ''}"
    if isinstance(exc, FieldInvalid):
        return path + [p for p in exc.field.split(".") if p], exc.message
    if isinstance(exc, KeyError):
        return path, "is required"
    if isinstance(exc, (ValueError, TypeError)):
        return path, str(exc) or type(exc).__name__
    raise exc  # a bug in a hook, not bad input


def _note_path(exc: BaseException) -> list[Any]:
    for note in getattr(exc, "__notes__", ()):
        name = getattr(note, "name", None)
        if name is not None:
            return [name]
        index = getattr(note, "index", None)
        if index is not None:
            return [index]
    return []


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {value[:40]!r}"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__
