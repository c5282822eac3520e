"""Whether a checkpoint file is whole, from its own structure, reading only its end or its header.

Stable size and mtime say a writer paused, not that it finished: a job killed in the middle
of ``torch.save`` leaves a file that never changes again, and once the job has exited the
watcher's final pass would take it. The formats tell:

- a zip (``torch.save`` since PyTorch 1.6, Lightning's ``.ckpt``, HF's ``pytorch_model.bin``)
  is written front to back and ends with its end-of-central-directory record, the last
  thing written;
- a ``.safetensors`` file starts with the length of its JSON header, and the header gives
  each tensor's byte range: the file is whole when it is as long as the last range's end.

Anything else (the legacy pickle ``torch.save``, a format we do not know) cannot be told
and counts as whole, as before. A directory is whole when each file it holds is.
"""

from __future__ import annotations

import json
import os
import struct

_ZIP_LOCAL = b"PK\x03\x04"
_ZIP_END = b"PK\x05\x06"
_ZIP_END_REACH = 22 + 65535  # the end record and the longest comment it may carry
_SAFETENSORS_MAX_HEADER = 100 * 1024 * 1024  # the format's own limit


def incomplete(path: str) -> str | None:
    """Why ``path`` (a file, or each file under a directory) is not whole yet; None when it
    is, or when its format cannot tell.

    Raises:
        OSError: it is gone (or cannot be read).
    """
    if not os.path.isdir(path):
        return _file(path)
    for directory, dirs, names in os.walk(path):
        dirs.sort()
        for name in sorted(names):
            full = os.path.join(directory, name)
            if os.path.islink(full):
                continue
            reason = _file(full)
            if reason is not None:
                return f"{os.path.relpath(full, path)}: {reason}"
    return None


def _file(path: str) -> str | None:
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(8)
        if head.startswith(_ZIP_LOCAL):
            f.seek(max(0, size - _ZIP_END_REACH))
            if not _ends_a_zip(f.read()):
                return "a zip (torch.save) without its end record: still being written, or cut short"
            return None
        if path.endswith(".safetensors"):
            return _safetensors(f, head, size)
    return None


def _ends_a_zip(tail: bytes) -> bool:
    """``tail`` ends with a whole end-of-central-directory record (22 bytes and its comment)."""
    at = tail.rfind(_ZIP_END)
    while at >= 0:
        if len(tail) >= at + 22 and at + 22 + int.from_bytes(tail[at + 20:at + 22], "little") == len(tail):
            return True
        at = tail.rfind(_ZIP_END, 0, at)
    return False


def _safetensors(f, head: bytes, size: int) -> str | None:
    if len(head) < 8:
        return "a safetensors file shorter than its header length"
    (length,) = struct.unpack("<Q", head)
    if length > _SAFETENSORS_MAX_HEADER:
        return None  # not a safetensors file after all: nothing to tell
    if size < 8 + length:
        return "a safetensors file shorter than its header"
    try:
        header = json.loads(f.read(length))
        end = max((int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"), default=0)
    except (ValueError, KeyError, TypeError, IndexError, AttributeError):
        return None  # a header we cannot read: not ours to judge
    if size < 8 + length + end:
        return f"a safetensors file of {size} bytes whose header promises {8 + length + end}"
    return None
