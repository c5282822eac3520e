"""``gpuplanectl token create|list|revoke`` against a real daemon over its Unix socket."""

from __future__ import annotations

import json
import re

import pytest
import typer
from gpuplanectl.commands.tokens import parse_duration, token_status, token_table
from jobhelpers import ctl

SECRET = re.compile(r"gpp_[0-9A-Z]{26}_[A-Za-z0-9_-]{43}")


def _cells(line: str) -> list[str]:
    return re.split(r"\s{2,}", line.strip())


def test_create_list_revoke(daemon):
    result = ctl(daemon, "token", "create", "ci", "--scope", "read,write", "--scope", "read")
    assert result.returncode == 0, result.stderr
    secret = result.stdout.strip()
    assert SECRET.fullmatch(secret) and result.stdout == secret + "\n"  # the token alone on stdout
    note = result.stderr.splitlines()
    assert len(note) == 1 and "will not be shown again" in note[0] and secret not in result.stderr
    token_id = "tok_" + secret.split("_")[1]
    assert note[0].startswith(f"created token {token_id} (ci, read,write, expires never)")

    created = json.loads(ctl(daemon, "token", "create", "laptop", "--scope", "admin", "--expires", "30d",
                             "--json").stdout)
    laptop = created["token"]
    assert SECRET.fullmatch(created["secret"]) and laptop["scopes"] == ["admin"]
    assert laptop["expires_at"] == laptop["created_at"] + 30 * 86_400_000

    result = ctl(daemon, "token", "list")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert _cells(lines[0]) == ["ID", "NAME", "SCOPES", "CREATED", "EXPIRES", "LAST USED", "STATUS"]
    rows = [_cells(line) for line in lines[1:]]
    assert [(r[0], r[1], r[2], r[4], r[5], r[6]) for r in rows] == [  # newest first
        (laptop["id"], "laptop", "admin", rows[0][4], "-", "active"),
        (token_id, "ci", "read,write", "never", "-", "active"),
    ]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d", rows[0][4])
    listed = ctl(daemon, "token", "list", "--json")
    assert [t["id"] for t in json.loads(listed.stdout)["tokens"]] == [laptop["id"], token_id]
    for output in (result.stdout, listed.stdout):
        for shown in (secret, created["secret"]):
            assert shown.split("_", 2)[2] not in output

    result = ctl(daemon, "token", "revoke", "ci")
    assert (result.returncode, result.stdout) == (0, f"revoked token {token_id} (ci)\n"), result.stderr
    again = ctl(daemon, "token", "revoke", token_id, "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["token"]["revoked_at"] is not None
    statuses = {_cells(line)[0]: _cells(line)[-1] for line in ctl(daemon, "token", "list").stdout.splitlines()[1:]}
    assert statuses == {token_id: "revoked", laptop["id"]: "active"}

    # The name of a revoked token can be given again; an active one's cannot.
    assert ctl(daemon, "token", "create", "ci", "--scope", "read").returncode == 0
    result = ctl(daemon, "token", "create", "laptop", "--scope", "read")
    assert result.returncode == 1 and "a token named 'laptop' exists" in result.stderr

    log = daemon.log()
    assert token_id in log and laptop["id"] in log  # creations and revokes are logged by id
    for shown in (secret, created["secret"]):
        assert shown.split("_", 2)[2] not in log


def test_bad_input(daemon):
    result = ctl(daemon, "token", "create", "ci", "--scope", "read,root")
    assert result.returncode == 2
    assert "unknown scope(s) root; allowed: read, write, agent, sdk, admin" in result.stderr

    result = ctl(daemon, "token", "create", "ci")
    assert result.returncode == 2 and "--scope" in result.stderr

    result = ctl(daemon, "token", "create", "ci", "--scope", "read", "--expires", "soon")
    assert result.returncode == 2 and "not a duration like 30d" in result.stderr

    result = ctl(daemon, "token", "create", "no spaces", "--scope", "read")
    assert result.returncode == 2 and result.stderr.startswith("error: name: must be 1-63 characters")

    result = ctl(daemon, "token", "revoke", "nope")
    assert (result.returncode, result.stderr) == (1, "error: no token 'nope'\n")
    result = ctl(daemon, "token", "revoke", "nope", "--json")
    assert result.returncode == 1 and json.loads(result.stdout)["error"]["code"] == "not_found"

    result = ctl(daemon, "token", "list")
    assert (result.returncode, result.stdout) == (0, "no tokens\n")


def test_no_daemon_exits_1(daemon_factory):
    daemon = daemon_factory()  # never started
    result = ctl(daemon, "token", "list")
    assert result.returncode == 1 and "no gpuplaned is running" in result.stderr


@pytest.mark.parametrize(("text", "seconds"), [
    ("30d", 30 * 86_400), ("12h", 43_200), ("90m", 5_400), ("45s", 45), ("2w", 14 * 86_400), (" 1D ", 86_400),
])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "0d", "30", "d", "1.5h", "-1d", "1y", "1d2h"])
def test_parse_duration_refuses(text):
    with pytest.raises(typer.BadParameter):
        parse_duration(text)


def test_status_and_table():
    base = {"id": "tok_A", "name": "a", "scopes": ["read"], "created_at": 0, "last_used_at": None}
    assert token_status({**base, "expires_at": None, "revoked_at": None}, 10) == "active"
    assert token_status({**base, "expires_at": 10, "revoked_at": None}, 10) == "expired"
    assert token_status({**base, "expires_at": 11, "revoked_at": None}, 10) == "active"
    assert token_status({**base, "expires_at": 5, "revoked_at": 3}, 10) == "revoked"
    text = token_table([{**base, "expires_at": 10, "revoked_at": None}], now_ms=20)
    assert _cells(text.splitlines()[1])[-1] == "expired"
