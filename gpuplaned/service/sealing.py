"""Sealing secrets the daemon must give back whole (a webhook's signing secret, a job's secret
env) but never keep readable in its database.

Fernet (AES-128-CBC + HMAC-SHA256, ``cryptography``) under a key kept apart from the database,
in ``$GPUPLANE_HOME/webhook.key`` (0600; the name it had when webhooks were its only user, kept
so that secrets sealed before still open). A copy of ``gpuplane.db`` (a backup, a bug report)
then carries no secret; a secret is opened only in memory, where it is used.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

from gpuplaned.home import private_file

if TYPE_CHECKING:
    from pathlib import Path

    from cryptography.fernet import Fernet

KEY_FILE = "webhook.key"


def _fernet(home: Path) -> Fernet:
    from cryptography.fernet import Fernet

    path = home / KEY_FILE
    if not path.exists():
        # Written whole under a temporary name, then linked into place: a crash never leaves
        # an empty or partial key (which would make every sealed secret unreadable).
        tmp = path.with_name(f".{KEY_FILE}.{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(Fernet.generate_key())
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    private_file(path, create=False)
    key = path.read_bytes().strip()
    return Fernet(key)


def seal(home: Path, secret: str) -> str:
    return _fernet(home).encrypt(secret.encode()).decode()


def unseal(home: Path, sealed: str | None) -> str | None:
    return None if sealed is None else _fernet(home).decrypt(sealed.encode()).decode()


def seal_env(home: Path, env: dict[str, str]) -> str | None:
    """A job's secret env as one sealed string (None: it has none)."""
    return seal(home, json.dumps(env)) if env else None


def unseal_env(home: Path, sealed: str | None) -> dict[str, str]:
    opened = unseal(home, sealed)
    return json.loads(opened) if opened else {}
