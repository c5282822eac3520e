"""The catalog of event types holds every type a rule records."""

from __future__ import annotations

import re
from pathlib import Path

from gpuplaned.domain import event_types

ROOT = Path(__file__).resolve().parents[2] / "gpuplaned"


def test_every_type_a_rule_raises_is_in_the_catalog():
    # A rule's event starts with its type, quoted or as a constant named as its value
    # (``HealthEvent(DISK_LOW, ...)``, ``SummaryEvent("LOSS_NAN", ...)``).
    source = "\n".join(path.read_text() for path in ROOT.rglob("*.py"))
    raised = set(re.findall(r'(?:Summary|Health)Event\(\s*"?([A-Z][A-Z_]+)"?\s*,', source))
    assert {"DISK_LOW", "GPU_LOST", "LOSS_SPIKE"} <= raised
    assert raised <= set(event_types.EVENT_TYPES)
    assert {"JOB_FAILED", "JOB_TIMEOUT", "OOM", "USER_EVENT", "CHECKPOINT_CREATED"} <= set(event_types.EVENT_TYPES)
