"""The UI's wire types are generated: web/src/api/openapi.ts is what ``npm run gen:types`` (in
web/) writes from the daemon's OpenAPI document, and these tests fail while the committed file
is stale. They run the generator (web/scripts/openapi-types/generate.mjs: openapi-typescript on
``python -m gpuplaned.http.openapi_dump``) into a temp file and compare.

Needs node with ``npm ci`` done in web/ (``make test`` does it); without them the test FAILS and
says what to do, so a machine that cannot check never passes silently. ``GPUPLANE_SKIP_UI_TESTS=1``
skips it on purpose, as it does the browser tests.
"""

from __future__ import annotations

import difflib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpuplaned.http.openapi import document

REPO = Path(__file__).resolve().parents[2]
WEB = REPO / "web"
GENERATOR = WEB / "scripts" / "openapi-types"
COMMITTED = WEB / "src" / "api" / "openapi.ts"
SKIP_ENV = "GPUPLANE_SKIP_UI_TESTS"
REGENERATE = "cd web && npm run gen:types"


def _require_generator() -> None:
    if os.environ.get(SKIP_ENV) == "1":
        pytest.skip(f"{SKIP_ENV}=1: the web UI's checks are skipped on purpose")
    if shutil.which("node") is None:
        pytest.fail("node is not installed (Node.js 20.19+ runs openapi-typescript): install it, or run `make test` "
                    f"(or set {SKIP_ENV}=1 to skip)", pytrace=False)
    if not (GENERATOR / "node_modules" / "openapi-typescript" / "package.json").is_file():
        pytest.fail("openapi-typescript is not installed in web/scripts/openapi-types: run `npm ci` in web/ "
                    f"(`make test` does; or set {SKIP_ENV}=1 to skip)", pytrace=False)


def _generate(out: Path) -> str:
    done = subprocess.run(["node", str(GENERATOR / "generate.mjs"), "--python", sys.executable, "--out", str(out)],
                          cwd=WEB, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"the generator failed:\n{done.stdout}{done.stderr}"
    return out.read_text(encoding="utf-8")


def test_the_committed_api_types_are_what_the_generator_writes(tmp_path: Path) -> None:
    _require_generator()
    fresh = _generate(tmp_path / "openapi.ts")
    committed = COMMITTED.read_text(encoding="utf-8") if COMMITTED.is_file() else ""
    if fresh != committed:
        diff = difflib.unified_diff(committed.splitlines(), fresh.splitlines(), "committed", "generated now",
                                    lineterm="", n=1)
        shown = "\n".join(list(diff)[:60])
        pytest.fail(f"web/src/api/openapi.ts is stale (the OpenAPI document changed): run `{REGENERATE}` and commit "
                    f"it.\n{shown}", pytrace=False)


def test_the_generator_reads_the_document_the_daemon_serves(tmp_path: Path) -> None:
    """The dump is ``document()`` itself, and what the generator makes of it follows it: a field
    added to the document shows up in the types (so a stale file is one the first test can see)."""
    dumped = tmp_path / "openapi.json"
    done = subprocess.run([sys.executable, "-m", "gpuplaned.http.openapi_dump", str(dumped)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    doc = json.loads(dumped.read_text(encoding="utf-8"))
    assert doc == document()

    _require_generator()
    job = doc["components"]["schemas"]["Job"]
    job["properties"]["planted_field"] = {"type": "integer", "description": "planted by the test"}
    job["required"].append("planted_field")
    dumped.write_text(json.dumps(doc), encoding="utf-8")
    out = tmp_path / "planted.ts"
    done = subprocess.run(["node", str(GENERATOR / "generate.mjs"), "--document", str(dumped), "--out", str(out)],
                          cwd=WEB, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    planted = out.read_text(encoding="utf-8")
    assert "planted_field: number;" in planted
    assert planted != COMMITTED.read_text(encoding="utf-8")


def test_no_generated_type_is_lost_to_unknown() -> None:
    """openapi-typescript writes a schema it cannot read as ``unknown``, and ``X | unknown`` is
    ``unknown``: the type checks nothing. generate.mjs rewrites the forms it misreads (a list of
    required alternatives, prefixItems with items); a new one shows here."""
    text = COMMITTED.read_text(encoding="utf-8")
    assert "| unknown" not in text and "unknown |" not in text
    # prefixItems with items: the first word, then the rest (openapi-typescript alone drops the rest).
    assert "command: [\n                string,\n                ...string[]\n            ];" in text
