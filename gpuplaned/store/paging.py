"""Keyset paging over rows listed newest first, ordered by (created_at DESC, id DESC)."""

from __future__ import annotations

from typing import Any

# The rows after the previous page's last one (see gpuplaned.protocol.cursors).
OLDER_THAN = "(created_at < ? OR (created_at = ? AND id < ?))"


def older_than(before: tuple[int, str]) -> list[Any]:
    """The parameters of ``OLDER_THAN`` for the (created_at, id) of the previous page's last row."""
    return [before[0], before[0], before[1]]
