"""What the audit log keeps of a call's arguments: never a secret."""

from __future__ import annotations

import pytest

from gpuplaned.service.api.audit import REDACTED, redact

TOKEN = "gpp_01HZZZZZZZZZZZZZZZZZZZZZZZ_" + "a" * 43


@pytest.mark.parametrize(("arguments", "kept"), [
    ({"token": "abc"}, {"token": REDACTED}),
    ({"body": {"api_key": "k", "Password": "p", "client_secret": "s", "Authorization": "Bearer x"}},
     {"body": {"api_key": REDACTED, "Password": REDACTED, "client_secret": REDACTED, "Authorization": REDACTED}}),
    ({"body": {"env": {"HF_TOKEN": "t", "db_password": "p", "LR": "0.1"}}},
     {"body": {"env": {"HF_TOKEN": REDACTED, "db_password": REDACTED, "LR": REDACTED}}}),
    ({"body": {"on_oom": {"env": {"WANDB_API_KEY": "w", "BATCH": "8"}}}},
     {"body": {"on_oom": {"env": {"WANDB_API_KEY": REDACTED, "BATCH": REDACTED}}}}),
    ({"body": {"url": "https://hooks.slack.com/services/T0/B0/XYZ"}},
     {"body": {"url": f"https://hooks.slack.com/{REDACTED}"}}),
    ({"body": {"url": "https://user:pw@example.com"}}, {"body": {"url": f"https://example.com/{REDACTED}"}}),
    ({"body": {"url": "https://example.com/"}}, {"body": {"url": "https://example.com/"}}),
    ({"note": f"use {TOKEN} please", "list": [TOKEN, 1]}, {"note": f"use {REDACTED} please", "list": [REDACTED, 1]}),
    ({"path": {"job_id": "job_1"}, "query": {"dry_run": "true"}, "body": {"gpu": 2, "command": ["python", "t.py"]}},
     {"path": {"job_id": "job_1"}, "query": {"dry_run": "true"}, "body": {"gpu": 2, "command": ["python", "t.py"]}}),
    ({"secret": None}, {"secret": None}),
])
def test_redact(arguments, kept):
    assert redact(arguments) == kept


def test_redact_copies():
    arguments = {"body": {"env": {"HF_TOKEN": "t"}}}
    redact(arguments)
    assert arguments == {"body": {"env": {"HF_TOKEN": "t"}}}
