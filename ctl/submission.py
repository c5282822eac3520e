"""What ``gpuplanectl job submit`` sends: a job file, the flags and part of the caller's environment, merged
into one ``POST /api/v1/jobs`` body.

Pure: reads the job file and is handed the environment and working directory; talks to no
daemon and prints nothing. Type errors are caught here, naming the file and the key, so
nothing is submitted from a half-understood file; value ranges (``gpu`` between 0 and 64, a
known ``node``) are the daemon's to judge, and it names the field. Whether the job's folder
exists is its node's to say; ``check_folder_here`` looks on this machine, for a job that
will run here.

Precedence, lowest first: the inherited environment subset, the job file, the flags. A
flag replaces the file's value; ``--env`` entries override single variables; ``--label``
replaces the file's whole list. ``--secret-env`` and the file's ``[secrets]`` table make the
body's ``secret_env`` the same way (nothing is inherited into it).
"""

from __future__ import annotations

import math
import os
import shlex
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gpuplaned.protocol.vocabulary import PLACEMENTS

# Enough of the caller's environment that the job runs as it would in this shell: the same
# programs and interpreter (PATH, an activated venv or conda env), the same libraries and
# imports, the same user, locale and time zone. Everything else (tokens, SSH agents, display,
# CUDA_VISIBLE_DEVICES, which the daemon sets) stays out unless passed with --env.
INHERITED_ENV = (
    "PATH", "VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV", "PYTHONPATH", "LD_LIBRARY_PATH",
    "HOME", "USER", "LANG", "LC_ALL", "TZ",
)

FILE_KEYS = ("command", "cwd", "dir", "name", "env", "secrets", "gpu", "labels", "node", "priority", "retry",
             "timeout_s", "stop_grace_s", "type", "retention", "evaluate", "on_oom", "on_nan", "on_lost",
             "on_stalled", "on_preempted", "gpu_model", "min_gpu_memory", "placement")
_MEMORY_UNITS = {"": 1, "m": 1, "mb": 1, "mib": 1, "g": 1024, "gb": 1024, "gib": 1024, "t": 1 << 20, "tb": 1 << 20,
                 "tib": 1 << 20}  # MiB each; MB and GB are read as MiB and GiB, as nvidia-smi writes them
POLICY_KEYS = ("retention", "evaluate")
FAILURE_POLICY_KEYS = ("on_oom", "on_nan", "on_lost", "on_stalled", "on_preempted")  # tables, or a word


class SubmissionError(ValueError):
    """A usage error in what was asked for; nothing was sent. ``field`` names the API key at fault."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field

    def details(self) -> dict[str, str]:
        return {"field": self.field} if self.field else {}


class JobFileError(SubmissionError):
    """A job file that cannot be used, naming the file and, where there is one, the key."""

    def __init__(self, path: Path, key: str | None, message: str) -> None:
        self.path = path
        self.key = key
        super().__init__(f"{path}: {key}: {message}" if key else f"{path}: {message}",
                         key.partition(".")[0] if key else None)

    def details(self) -> dict[str, str]:
        return {**super().details(), "file": str(self.path)}


def parse_memory_mb(text: str) -> int:
    """``40000``, ``40000MB``, ``40GiB``, ``40 GB``, ``1.5T`` -> MiB (a bare number is MiB).

    Raises:
        SubmissionError: not a positive amount with a known unit.
    """
    cleaned = text.strip().replace(" ", "").lower()
    number = cleaned.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = cleaned[len(number):]
    try:
        value = float(number) * _MEMORY_UNITS[unit]
    except (ValueError, KeyError):
        raise SubmissionError(f"--min-gpu-memory {text!r}: expected an amount like 40GiB, 24G or 16000 (MiB)",
                              "min_gpu_memory_mb") from None
    if not math.isfinite(value) or value < 1:
        raise SubmissionError(f"--min-gpu-memory {text!r}: must be at least 1 MiB", "min_gpu_memory_mb")
    return math.ceil(value)


def _type_name(value: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "an array",
            dict: "a table"}.get(type(value), type(value).__name__)


def load_job_file(path: Path) -> dict[str, Any]:
    """Read a job file (TOML with the API body's keys) into the part of a body it sets.

    ``command`` may be an array or a string, which is split like a shell would
    (``shlex.split``); ``cwd`` (or ``dir``) is taken relative to the file's own directory.

    Raises:
        JobFileError: unreadable, not TOML, an unknown key or a value of the wrong type.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise JobFileError(path, None, f"cannot read it: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise JobFileError(path, None, f"not valid TOML: {exc}") from None
    except RecursionError:  # tomllib recurses per level of nesting
        raise JobFileError(path, None, "not valid TOML: arrays or tables nested too deeply") from None
    return _check_table(path, data)


def job_table(path: Path, data: Mapping[str, Any]) -> dict[str, Any]:
    """One job's table of ``path`` (a job file's, or a ``[[jobs]]`` entry of a batch file:
    ``gpuplanectl.commands.batch_submit``) as the body's keys, checked as ``load_job_file`` checks one.

    Raises:
        JobFileError: an unknown key or a value of the wrong type.
    """
    return _check_table(path, data)


def _check_table(path: Path, data: Mapping[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(data) - set(FILE_KEYS))
    if unknown:
        raise JobFileError(path, unknown[0], f"unknown key (known: {', '.join(FILE_KEYS)})")
    if "cwd" in data and "dir" in data:
        raise JobFileError(path, "dir", "give cwd or dir, not both")

    def need(key: str, ok: bool, what: str) -> None:
        if not ok:
            raise JobFileError(path, key, f"must be {what}, not {_type_name(data[key])}")

    body: dict[str, Any] = {}
    for key, value in data.items():
        if key == "command":
            if isinstance(value, str):
                try:
                    value = shlex.split(value)
                except ValueError as exc:
                    raise JobFileError(path, key, f"cannot split the string into arguments: {exc}") from None
            need(key, isinstance(value, list) and all(isinstance(a, str) for a in value),
                 "an array of strings or a string")
            if not value:
                raise JobFileError(path, key, "must not be empty")
            body["command"] = value
        elif key in ("cwd", "dir"):
            need(key, isinstance(value, str), "a string")
            body["cwd"] = os.path.normpath(path.absolute().parent / Path(value).expanduser())
        elif key in ("name", "node", "type", "gpu_model"):
            need(key, isinstance(value, str), "a string")
            body[key] = value.upper() if key == "type" else value
        elif key == "placement":
            need(key, isinstance(value, str) and value in PLACEMENTS, "pack or spread")
            body[key] = value
        elif key == "min_gpu_memory":  # 40960 (MiB) or "40GiB"
            need(key, isinstance(value, (int, str)) and not isinstance(value, bool), "an amount like \"40GiB\"")
            try:
                body["min_gpu_memory_mb"] = parse_memory_mb(str(value))
            except SubmissionError as exc:
                raise JobFileError(path, key, str(exc).partition(": ")[2]) from None
        elif key in ("env", "secrets"):
            need(key, isinstance(value, dict), "a table of strings")
            for name, item in value.items():
                if not isinstance(item, str):
                    raise JobFileError(path, f"{key}.{name}", f"must be a string, not {_type_name(item)}")
            body["env" if key == "env" else "secret_env"] = dict(value)
        elif key == "labels":
            need(key, isinstance(value, list) and all(isinstance(a, str) for a in value), "an array of strings")
            body["labels"] = list(value)
        elif key in POLICY_KEYS:  # checked here, so the error names the file and the key
            need(key, isinstance(value, dict), "a table")
            # Imported here: the converter (cattrs) costs every other command ~10 ms of start-up.
            from gpuplaned.protocol.converter import FieldInvalid, check
            from gpuplaned.protocol.job_policies import EvaluatePolicy, RetentionPolicy
            try:
                check(value, RetentionPolicy if key == "retention" else EvaluatePolicy)
            except FieldInvalid as fault:
                raise JobFileError(path, f"{key}.{fault.field}" if fault.field else key, fault.message) from None
            body[key] = dict(value)
        elif key in FAILURE_POLICY_KEYS:  # on_nan = "stop", on_oom = {retry = 2, env = {BATCH = "half"}}
            from gpuplaned.protocol.converter import FieldInvalid, check
            from gpuplaned.protocol.job_policies import JobPolicies
            try:
                check({key: value}, JobPolicies)
            except FieldInvalid as fault:
                raise JobFileError(path, fault.field or key, fault.message) from None  # field: on_oom.env
            body[key] = dict(value) if isinstance(value, dict) else value
        elif key in ("gpu", "priority", "retry"):
            need(key, isinstance(value, int) and not isinstance(value, bool), "an integer")
            body[key] = value
        else:  # timeout_s, stop_grace_s
            need(key, isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value),
                 "a number of seconds")
            body[key] = value
    return body


AFTER_FLAGS = (("after", "--after", "succeeded"), ("after_any", "--after-any", "ended"),
               ("after_failed", "--after-failed", "failed"))


def parse_after(*given: Sequence[str] | None) -> dict[str, Any] | None:
    """The body's ``after`` from ``--after``, ``--after-any`` and ``--after-failed`` (in that order:
    each a list of ``JOB[,JOB...]`` values, or None); None when none is given.

    Raises:
        SubmissionError: more than one of them, or one without a job id.
    """
    used = [(flag, when, values) for (_, flag, when), values in zip(AFTER_FLAGS, given, strict=True) if values]
    if not used:
        return None
    if len(used) > 1:
        raise SubmissionError(f"give one of {', '.join(flag for flag, _, _ in used)}: a job runs after its "
                              "dependencies under one condition", "after")
    flag, when, values = used[0]
    ids = [part.strip() for value in values for part in value.split(",") if part.strip()]
    if not ids:
        raise SubmissionError(f"{flag}: give job ids (job_...), separated by commas", "after")
    return {"ids": ids, "when": when}


def parse_env_pairs(pairs: Sequence[str], environ: Mapping[str, str], flag: str = "--env") -> dict[str, str]:
    """``--env K=V`` sets K; a bare ``--env K`` passes this shell's value of K (``flag``: the
    option's name, ``--env`` or ``--secret-env``, for the errors).

    Raises:
        SubmissionError: an empty name, or a bare name this shell does not set.
    """
    env: dict[str, str] = {}
    field = flag.removeprefix("--").replace("-", "_")
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not key:
            raise SubmissionError(f"{flag} {pair!r}: expected NAME=VALUE or NAME", field)
        if not eq:
            if key not in environ:
                raise SubmissionError(f"{flag} {key}: not set in this shell; give a value with {key}=VALUE", field)
            value = environ[key]
        env[key] = value
    return env


CKPT_DIRS_VARIABLE = "GPUPLANE_CKPT_DIR"
TB_DIRS_VARIABLE = "GPUPLANE_TB_DIR"


def build_body(
    file_body: Mapping[str, Any],
    flags: Mapping[str, Any],
    *,
    environ: Mapping[str, str],
    cwd: str,
) -> dict[str, Any]:
    """The ``POST /api/v1/jobs`` body.

    Args:
        file_body: what ``load_job_file`` returned (``{}`` without ``--file``).
        flags: the API keys given on the command line (None or absent when not given);
            ``command`` is the argv after ``--``, ``env`` the ``--env`` pairs, ``dir`` the
            ``--dir`` value as typed, ``ckpt_dirs`` the ``--ckpt-dir`` values (relative ones
            from ``cwd``, as ``--dir``), passed as ``GPUPLANE_CKPT_DIR``, and ``tb_dirs`` the
            ``--tb-dir`` ones, passed as ``GPUPLANE_TB_DIR``.
        environ: the caller's environment, for ``INHERITED_ENV`` and bare ``--env K``.
        cwd: the caller's working directory: where a relative ``--dir`` points, and the
            job's ``cwd`` when neither the flags nor the file name one.

    Raises:
        SubmissionError: no command, or a bad ``--env``.
    """
    body = dict(file_body)
    for key in ("name", "gpu", "node", "priority", "retry", "timeout_s", "stop_grace_s", "gpu_model", "placement",
                "group"):
        if flags.get(key) is not None:
            body[key] = flags[key]
    if flags.get("type") is not None:
        body["type"] = flags["type"].upper()
    if flags.get("min_gpu_memory") is not None:
        body["min_gpu_memory_mb"] = parse_memory_mb(flags["min_gpu_memory"])
    for key in ("on_nan", "on_lost"):
        if flags.get(key) is not None:
            body[key] = flags[key]
    if flags.get("on_preempted") is not None:
        body["on_preempted"] = {"resume_from": flags["on_preempted"]}
    if flags.get("on_oom_retry") is not None or flags.get("on_oom_half"):
        oom = dict(body.get("on_oom") or {})
        if flags.get("on_oom_retry") is not None:
            oom["retry"] = flags["on_oom_retry"]
        if flags.get("on_oom_half"):
            oom["env"] = {**oom.get("env", {}), **{name: "half" for name in flags["on_oom_half"]}}
        body["on_oom"] = oom
    if flags.get("labels"):
        body["labels"] = list(flags["labels"])
    after = parse_after(flags.get("after"), flags.get("after_any"), flags.get("after_failed"))
    if after is not None:
        body["after"] = after
    if flags.get("command"):
        body["command"] = list(flags["command"])
    if not body.get("command"):
        raise SubmissionError("no command to run: give it after `--` (job submit -- python train.py) "
                              "or as `command` in the --file", "command")
    if flags.get("dir") is not None:
        body["cwd"] = os.path.normpath(os.path.join(cwd, os.path.expanduser(flags["dir"])))
    body.setdefault("cwd", cwd)
    env = {key: environ[key] for key in INHERITED_ENV if key in environ}
    env.update(body.get("env") or {})
    env.update(parse_env_pairs(flags.get("env") or (), environ))
    if flags.get("ckpt_dirs"):
        # More folders for the node's checkpoint watcher (actors/ckptwatch.py reads this variable).
        env[CKPT_DIRS_VARIABLE] = os.pathsep.join(
            os.path.normpath(os.path.join(cwd, os.path.expanduser(d))) for d in flags["ckpt_dirs"])
    if flags.get("tb_dirs"):
        # More folders for the node's TensorBoard tailer (actors/tbtail.py reads this variable).
        env[TB_DIRS_VARIABLE] = os.pathsep.join(
            os.path.normpath(os.path.join(cwd, os.path.expanduser(d))) for d in flags["tb_dirs"])
    body["env"] = env
    secrets = dict(body.get("secret_env") or {})
    secrets.update(parse_env_pairs(flags.get("secret_env") or (), environ, "--secret-env"))
    if secrets:
        # A secret wins over a plain variable of the same name (an inherited HOME, a file's env).
        body["secret_env"] = secrets
        for name in secrets:
            env.pop(name, None)
    return body


def check_folder_here(body: Mapping[str, Any], flags: Mapping[str, Any], file_body: Mapping[str, Any],
                      file: Path | None) -> None:
    """The job's folder must exist on the node that runs it, and only that node can tell (the
    daemon queues it without looking). A job not pinned to a node usually runs here, where a
    missing folder is a typo: say so now, naming where the folder came from (``--dir``, the
    job file's ``cwd``), rather than as the job's failure. A job pinned with ``--node`` (or
    the file's ``node``) may name a folder that only that node has.

    Raises:
        SubmissionError: the folder is not a directory here.
    """
    cwd = body["cwd"]
    if body.get("node") is not None or os.path.isdir(cwd):
        return
    why = (f"no such directory on this machine ({cwd}); the job runs in it: give one that exists, "
           "or pin the job with --node to the node that has it")
    key = next((k for k in ("cwd", "dir") if k in file_body), None)
    if flags.get("dir") is None and file is not None and key is not None:
        raise JobFileError(file, key, why)
    raise SubmissionError(f"--dir {flags.get('dir') or cwd}: {why}", "cwd")
