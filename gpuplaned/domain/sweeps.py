"""Sweeps, pure (issue 31 item 3): a sweep's parameters expanded into its trials' values, and a
trial's argv, env and name made from them.

Three kinds:
- ``grid``: ``{"lr": [0.1, 0.01], "bs": [32, 64]}``, the cartesian product in the given order
  (the first name varies slowest);
- ``random``: ``{"lr": "log:1e-5:1e-1", "dropout": "uniform:0:0.5", "opt": "choice:adam,sgd",
  "layers": "int:2:8"}`` with a number of trials and a seed (default 0). The values are drawn
  from ``random.Random(seed)`` trial by trial, name by name in the given order, so the same seed
  gives the same trials (and a resubmit dedupes); floats keep 6 significant digits, so they
  print well in argv. A draw equal to an earlier trial's is drawn again (a few choices give
  fewer trials than asked, never a duplicate);
- ``list``: the trials' values given one by one.

Values are JSON scalars (string, integer, number, true/false); names match ``NAME`` and differ
in more than case (each is an env variable, upper-cased). A trial's values are keyed by their
canonical JSON (``values_key``): a sweep has one trial per key (the store's unique index).

Bad parameters raise ``ApiError`` ``bad_request`` naming the field at fault (``grid.lr``,
``random.opt``, ``trials_list[3].bs``).
"""

from __future__ import annotations

import enum
import hashlib
import itertools
import json
import math
import random as randoms
import re
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.sweep_values import Value, parse_scalar, show

NAME_PATTERN = "^[A-Za-z_][A-Za-z0-9_]{0,63}$"
NAME = re.compile(NAME_PATTERN)
MAX_TRIALS = 10_000  # as a batch's (gpuplaned.protocol.batch_wire.MAX_BATCH_JOBS): one transaction
MAX_VALUE_CHARS = 1000
ENV_PREFIX = "GPUPLANE_SWEEP_"
DISTRIBUTIONS = ("uniform", "log", "int", "choice")
_DIGITS = 6  # a random float's significant digits
_REDRAWS = 20  # draws per trial before a random sweep gives up on finding new values
_RESERVED = {"ID": "sweep's id", "TRIAL": "number"}  # env names every trial has already
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]{0,63})\}")



class Kind(enum.StrEnum):
    GRID = "grid"
    RANDOM = "random"
    LIST = "list"


def _bad(field: str, message: str) -> ApiError:
    return ApiError(ErrorCode.BAD_REQUEST, f"{field}: {message}", {"field": field})


# --- names and values ------------------------------------------------------------


def check_names(names: Sequence[str], where: str) -> None:
    """Refuse a name that is no parameter name, or two that differ only in case."""
    seen: dict[str, str] = {}
    for name in names:
        if not isinstance(name, str) or not NAME.match(name):
            raise _bad(f"{where}.{name}" if isinstance(name, str) else where,
                       f"{name!r} is not a parameter name: use 1 to 64 letters, digits or '_', not starting "
                       "with a digit")
        if name.upper() in _RESERVED:
            raise _bad(f"{where}.{name}", f"{name!r} is taken: {ENV_PREFIX}{name.upper()} is the trial's "
                                          f"{_RESERVED[name.upper()]}")
        twin = seen.get(name.upper())
        if twin is not None:
            raise _bad(f"{where}.{name}", f"{name!r} and {twin!r} differ only in case; each is the env variable "
                                          f"{ENV_PREFIX}{name.upper()}")
        seen[name.upper()] = name


def check_value(value: Any, field: str) -> Value:
    """``value`` if it is a JSON scalar a trial can take (finite, printable)."""
    if isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _bad(field, f"{value!r} is not a finite number")
        return value
    if isinstance(value, str):
        if len(value) > MAX_VALUE_CHARS or "\x00" in value:
            raise _bad(field, f"a value is at most {MAX_VALUE_CHARS} characters, without NUL bytes")
        return value
    raise _bad(field, f"a value must be a string, number or true/false, got {_json_type(value)}")


def values_key(values: Mapping[str, Value]) -> str:
    """A trial's values as canonical JSON: the key the sweep's trials are unique by."""
    return json.dumps(values, sort_keys=True, separators=(",", ":"))


# --- expansion -------------------------------------------------------------------


@attrs.frozen
class Distribution:
    """A random parameter: ``uniform:lo:hi``, ``log:lo:hi`` (log-uniform, lo > 0), ``int:lo:hi``
    (an integer, both ends included) or ``choice:a,b,...``."""

    kind: str
    low: float = 0.0
    high: float = 0.0
    choices: tuple[Value, ...] = ()

    def draw(self, rng: randoms.Random) -> Value:
        if self.kind == "choice":
            return self.choices[rng.randrange(len(self.choices))]
        if self.kind == "int":
            return rng.randint(int(self.low), int(self.high))
        if self.kind == "log":
            return _rounded(10 ** rng.uniform(math.log10(self.low), math.log10(self.high)))
        return _rounded(rng.uniform(self.low, self.high))


def _rounded(number: float) -> float:
    return float(f"{number:.{_DIGITS}g}")


def parse_distribution(text: Any, field: str) -> Distribution:
    if not isinstance(text, str):
        raise _bad(field, f"must be a string such as 'uniform:0:1', 'log:1e-5:1e-1', 'int:1:8' or "
                          f"'choice:a,b', got {_json_type(text)}")
    kind, _, rest = text.partition(":")
    if kind not in DISTRIBUTIONS or not rest:
        raise _bad(field, f"{text!r} is not a distribution: use uniform:LO:HI, log:LO:HI, int:LO:HI or "
                          "choice:A,B,...")
    if kind == "choice":
        choices = tuple(check_value(parse_scalar(c), field) for c in rest.split(","))
        if any(c == "" for c in choices) or len(set(map(values_key_of, choices))) != len(choices):
            raise _bad(field, f"{text!r}: the choices must be non-empty and differ")
        return Distribution(kind, choices=choices)
    parts = rest.split(":")
    bounds = [parse_scalar(p) for p in parts]
    if len(parts) != 2 or not all(isinstance(b, int | float) and not isinstance(b, bool) for b in bounds):
        raise _bad(field, f"{text!r}: {kind} takes two numbers, {kind}:LO:HI")
    low, high = float(bounds[0]), float(bounds[1])
    if not low < high:
        raise _bad(field, f"{text!r}: LO must be below HI")
    if kind == "log" and low <= 0:
        raise _bad(field, f"{text!r}: log needs LO > 0")
    if kind == "int" and not all(isinstance(b, int) for b in bounds):
        raise _bad(field, f"{text!r}: int takes two integers")
    return Distribution(kind, low, high)


def values_key_of(value: Value) -> str:
    return json.dumps(value)


def grid_trials(grid: Any, field: str = "grid") -> list[dict[str, Value]]:
    """The cartesian product of ``grid`` (name -> its values), the first name slowest."""
    if not isinstance(grid, Mapping) or not grid:
        raise _bad(field, "must map each parameter name to a list of its values, e.g. {\"lr\": [0.1, 0.01]}")
    check_names(list(grid), field)
    axes: list[list[Value]] = []
    for name, given in grid.items():
        where = f"{field}.{name}"
        if not isinstance(given, list) or not given:
            raise _bad(where, f"must be a non-empty list of values, got {_json_type(given)}")
        axis = [check_value(v, where) for v in given]
        seen: set[str] = set()
        for value in axis:
            key = values_key_of(value)
            if key in seen:
                raise _bad(where, f"{show(value)} is given twice")
            seen.add(key)
        axes.append(axis)
    total = math.prod(len(a) for a in axes)
    if total > MAX_TRIALS:
        raise _bad(field, f"{' x '.join(str(len(a)) for a in axes)} = {total} trials; at most {MAX_TRIALS} a sweep")
    names = list(grid)
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*axes)]


def random_trials(spec: Any, trials: int, seed: int, field: str = "random") -> list[dict[str, Value]]:
    """``trials`` draws from ``random.Random(seed)``, each new (see the module's doc)."""
    if not isinstance(spec, Mapping) or not spec:
        raise _bad(field, "must map each parameter name to a distribution, e.g. {\"lr\": \"log:1e-5:1e-1\"}")
    check_names(list(spec), field)
    if not isinstance(trials, int) or isinstance(trials, bool) or not 1 <= trials <= MAX_TRIALS:
        raise _bad("trials", f"a random sweep needs 1 to {MAX_TRIALS} trials, got {trials!r}")
    dists = {name: parse_distribution(text, f"{field}.{name}") for name, text in spec.items()}
    rng = randoms.Random(seed)
    out: list[dict[str, Value]] = []
    seen: set[str] = set()
    draws = 0
    while len(out) < trials and draws < trials * _REDRAWS:
        draws += 1
        values = {name: dist.draw(rng) for name, dist in dists.items()}
        key = values_key(values)
        if key not in seen:
            seen.add(key)
            out.append(values)
    return out


def list_trials(items: Any, field: str = "trials_list") -> list[dict[str, Value]]:
    """The trials as given; each names the same parameters, and no two are alike."""
    if not isinstance(items, list) or not items:
        raise _bad(field, "must be a non-empty list of trials, each mapping names to values")
    if len(items) > MAX_TRIALS:
        raise _bad(field, f"{len(items)} trials; at most {MAX_TRIALS} a sweep")
    out: list[dict[str, Value]] = []
    first: dict[str, int] = {}
    names: list[str] | None = None
    for index, item in enumerate(items):
        where = f"{field}[{index}]"
        if not isinstance(item, Mapping) or not item:
            raise _bad(where, f"must map parameter names to values, got {_json_type(item)}")
        check_names(list(item), where)
        if names is None:
            names = sorted(item)
        elif sorted(item) != names:
            raise _bad(where, f"names {', '.join(sorted(item))}; every trial must name the same parameters as "
                              f"the first ({', '.join(names)})")
        values = {name: check_value(v, f"{where}.{name}") for name, v in item.items()}
        key = values_key(values)
        if key in first:
            raise _bad(where, f"the same values as {field}[{first[key]}]")
        first[key] = index
        out.append(values)
    return out


def expand(kind: Kind | str, parameters: Mapping[str, Any]) -> list[dict[str, Value]]:
    """The trials' values of a sweep of ``kind`` (its ``parameters`` as stored: ``grid``; ``random``,
    ``trials``, ``seed``; ``trials_list``), in trial order."""
    kind = Kind(kind)
    if kind is Kind.GRID:
        return grid_trials(parameters.get("grid"))
    if kind is Kind.RANDOM:
        return random_trials(parameters.get("random"), parameters.get("trials"), parameters.get("seed", 0))
    return list_trials(parameters.get("trials_list"))


# --- a trial's job ---------------------------------------------------------------


def trial_argv(argv: Sequence[str], values: Mapping[str, Value]) -> list[str]:
    """``argv`` with every ``{name}`` of a parameter replaced by its value; other braces stay."""
    def put(match: re.Match[str]) -> str:
        name = match.group(1)
        return show(values[name]) if name in values else match.group(0)

    return [_PLACEHOLDER.sub(put, arg) if "{" in arg else arg for arg in argv]


def trial_env(values: Mapping[str, Value], sweep_id: str, trial: int) -> dict[str, str]:
    """``GPUPLANE_SWEEP_<NAME>`` per value, ``GPUPLANE_SWEEP_ID`` and ``GPUPLANE_SWEEP_TRIAL``."""
    env = {f"{ENV_PREFIX}{name.upper()}": show(value) for name, value in values.items()}
    env[f"{ENV_PREFIX}ID"] = sweep_id
    env[f"{ENV_PREFIX}TRIAL"] = str(trial)
    return env


def trial_name(sweep_name: str, trial: int) -> str:
    return f"{sweep_name}-{trial}"


def worst_case_gpu_hours(trials: int, gpu: int, timeout_s: float | None) -> float | None:
    """Trials x GPUs x timeout: what the sweep may burn at most; None without a timeout."""
    if timeout_s is None:
        return None
    return trials * gpu * timeout_s / 3600


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


# --- a sweep's state -------------------------------------------------------------

_ON_NODE = ("DISPATCHING", "RUNNING", "LOST")


def status_of(counts: Mapping[str, int], *, paused: bool, cancelled: bool) -> str:
    """A sweep's status from its trials counted by job status: CANCELLED once cancelled; PAUSED
    while paused with trials not ended; RUNNING while one is on a node; QUEUED while one waits;
    once all ended, SUCCEEDED (all did), FAILED (none did) or DONE (some did)."""
    if cancelled:
        return "CANCELLED"
    on_node = sum(counts.get(s, 0) for s in _ON_NODE)
    queued = counts.get("QUEUED", 0)
    if paused and (on_node or queued):
        return "PAUSED"
    if on_node:
        return "RUNNING"
    if queued:
        return "QUEUED"
    succeeded = counts.get("SUCCEEDED", 0)
    total = sum(counts.values())
    if total and succeeded == total:
        return "SUCCEEDED"
    return "DONE" if succeeded else "FAILED"


def best_trial(found: Sequence[tuple[int, float]], goal: str) -> tuple[int, float] | None:
    """``(trial, value)`` of the best of ``found`` (each trial's best): the lowest value for goal
    min, the highest for max; on a tie, the first trial."""
    if not found:
        return None
    sign = 1 if goal == "min" else -1
    return min(found, key=lambda tv: (sign * tv[1], tv[0]))


def default_name(command: Sequence[str], template_key: str) -> str:
    """A sweep's name when none is given: the program's base name and a digest of its job, so
    the same job submitted twice is the same sweep, and another job another sweep."""
    base = re.sub(r"[^A-Za-z0-9_.-]", "_", command[0].rsplit("/", 1)[-1])[:40].lstrip("._-") or "sweep"
    return f"{base}-{hashlib.sha1(template_key.encode()).hexdigest()[:6]}"
