"""Which paths under a watched folder are checkpoints, and the step and epoch they tell.

A checkpoint is one of:

- a single file ``*.pt``, ``*.pth``, ``*.safetensors``, ``*.bin`` or ``*.ckpt`` (a Lightning
  ``epoch=E-step=S*.ckpt`` name gives both; ``step_100.pt``, ``ckpt-100.pt``,
  ``model_000100.pt`` give the step);
- a Hugging Face ``checkpoint-<step>/`` directory: the step and epoch come from its
  ``trainer_state.json`` (``global_step``, ``epoch``; ``resolve``), the name's number without one;
- a DeepSpeed shard directory: one holding ``*_model_states.pt`` or ``*optim_states.pt``
  files (``global_step<N>/``, the step).

A directory checkpoint is one unit: the files inside it are not checkpoints of their own.
Names ending in ``.tmp``, ``.partial`` or ``.incomplete`` (and hidden ones) are skipped:
writers save under such a name and rename when done.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterator
from pathlib import Path

import attrs

from gpuplaned.checkpoints.roots import walkable
from gpuplaned.protocol.agent import CHECKPOINT_KINDS
from gpuplaned.protocol.converter import FieldInvalid, check
from gpuplaned.protocol.fields import field

SUFFIXES = (".pt", ".pth", ".safetensors", ".bin", ".ckpt")
UNFINISHED = (".tmp", ".partial", ".incomplete")
TRAINER_STATE = "trainer_state.json"
MAX_DEPTH = 6  # below a watched folder: deep enough for runs/<name>/version_0/checkpoints/
MAX_TRAINER_STATE_BYTES = 64 * 1024 * 1024  # its log_history grows with the run; past this, the name's step

FILE, HF, LIGHTNING, DEEPSPEED = CHECKPOINT_KINDS  # the kinds a found checkpoint travels with

_HF_DIR = re.compile(r"checkpoint-(\d+)")
_DEEPSPEED_SHARD = re.compile(r".*(_model_states|optim_states)\.pt")
_LIGHTNING = re.compile(r"(?:.*[-_])?epoch=(\d+)-step=(\d+)(?:[-_].*)?")
# "step_100", "ckpt-100", "iter100", "global_step100", then a bare trailing number: "model_000100".
_NAMED_STEP = re.compile(r"(?:^|.*[-_.])(?:global_step|step|iter|it|ckpt|checkpoint)[-_=]?(\d+)(?:[-_.].*)?$",
                         re.IGNORECASE)
_TRAILING_NUMBER = re.compile(r".*?[-_](\d+)$")


@attrs.frozen
class Candidate:
    """A checkpoint found on disk; ``path`` absolute, a file or (``hf``, ``deepspeed``) a directory."""

    path: str
    kind: str  # file | hf | lightning | deepspeed
    step: int | None = None
    epoch: float | None = None


def _finite(value: float) -> str | None:
    return None if math.isfinite(value) else "a finite non-negative number"


@attrs.frozen
class TrainerState:
    """The two keys of HF's ``trainer_state.json`` that we read (the rest is left alone)."""

    global_step: int | None = field(default=None, minimum=0)
    epoch: float | None = field(default=None, minimum=0, check=_finite)


def skipped(name: str) -> bool:
    """A name never to look at: hidden, or a save in progress."""
    return name.startswith(".") or name.endswith(UNFINISHED)


def file_step(name: str) -> tuple[str, int | None, float | None]:
    """The kind, step and epoch a single checkpoint file's name tells."""
    stem = name.rsplit(".", 1)[0]
    found = _LIGHTNING.fullmatch(stem)
    if found:
        return LIGHTNING, int(found[2]), float(found[1])
    found = _NAMED_STEP.match(stem) or _TRAILING_NUMBER.fullmatch(stem)
    return FILE, (int(found[1]) if found else None), None


def trainer_state(directory: str) -> TrainerState | None:
    """The directory's ``trainer_state.json``; None if it has none, or not a readable one."""
    path = os.path.join(directory, TRAINER_STATE)
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_TRAINER_STATE_BYTES + 1)
        data = json.loads(raw) if len(raw) <= MAX_TRAINER_STATE_BYTES else None
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    try:
        return check({k: data[k] for k in ("global_step", "epoch") if k in data}, TrainerState)
    except FieldInvalid:
        return None


def directory_checkpoint(directory: str, names: list[str]) -> Candidate | None:
    """``directory`` as a checkpoint (``names``: what it holds), or None if it is not one."""
    base = os.path.basename(directory)
    hf = _HF_DIR.fullmatch(base)
    if hf:
        return Candidate(directory, HF, int(hf[1]))  # its trainer_state.json is read by ``resolve``
    if any(_DEEPSPEED_SHARD.fullmatch(n) for n in names):
        found = re.search(r"(\d+)$", base)
        return Candidate(directory, DEEPSPEED, int(found[1]) if found else None)
    return None


def resolve(candidate: Candidate) -> Candidate:
    """``candidate`` with what its files tell besides its name: an HF dir's step and epoch from
    its ``trainer_state.json`` (read once, when it is registered: the file grows with the run)."""
    if candidate.kind != HF:
        return candidate
    state = trainer_state(candidate.path)
    if state is None:
        return candidate
    step = state.global_step if state.global_step is not None else candidate.step
    return attrs.evolve(candidate, step=step, epoch=state.epoch)


def find_candidates(root: str, cwd: str | None = None) -> Iterator[Candidate]:
    """The checkpoints under ``root`` (absolute), in no set order; a missing root has none.

    No symbolic link is followed, at any level: a linked directory is not walked (a link to a
    dataset, or ``checkpoints -> /elsewhere``) and a linked file is not taken; ``root`` itself
    is resolved. With ``cwd``, the job's folder, a ``root`` under it that resolves outside it
    (``checkpoints -> /elsewhere``) has none (``gpuplaned.checkpoints.roots.walkable``)."""
    if cwd is not None and not walkable(root, cwd):
        return
    yield from _walk(root, 0)


def _walk(directory: str, depth: int) -> Iterator[Candidate]:
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    names = [e.name for e in entries]
    if depth > 0:
        found = directory_checkpoint(directory, names)
        if found is not None:
            yield found
            return
    for entry in entries:
        if skipped(entry.name):
            continue
        try:
            if entry.is_dir(follow_symlinks=False):
                if depth < MAX_DEPTH:
                    yield from _walk(entry.path, depth + 1)
            elif entry.is_file(follow_symlinks=False) and entry.name.endswith(SUFFIXES):
                kind, step, epoch = file_step(entry.name)
                yield Candidate(entry.path, kind, step, epoch)
        except OSError:
            continue


def watched_roots(cwd: str, declared: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The folders to watch for a job started in ``cwd``: its ``checkpoints``, ``outputs`` and
    ``runs``, and the declared ones (relative ones under ``cwd``)."""
    roots = [os.path.join(cwd, name) for name in ("checkpoints", "outputs", "runs")]
    roots += [str(Path(cwd, d)) for d in declared if d]
    return tuple(dict.fromkeys(os.path.normpath(r) for r in roots))
