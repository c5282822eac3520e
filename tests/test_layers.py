"""The layers of docs/architecture.md, kept by a test over the import graph (issue 14, 30).

The rules are an allow-list (tests/layerkit.py ``LAYERS``, the table of docs/architecture.md):
each layer names the layers and the third-party libraries it may import, and anything else
is a violation. tests/layerkit.py reads every import with ``ast``, TYPE_CHECKING and
function-local ones included; nothing of the daemon is imported here.

- cycle: no import cycle anywhere;
- module-in-no-layer: every module of the four packages is in a layer of the table;
- layer-not-allowed: a module imports only its own layer and those its row lists (so the
  service layer never the daemon, the fronts or the actors; a node-side actor never the
  store, service or HTTP app; ``gpuplanectl`` only ``gpuplaned.protocol``; the domain
  only the protocol);
- library-not-allowed: a third-party library its row does not list (the SDK and the shim:
  the standard library only; ``gpuplanectl`` never ``mcp``, seconds to import);
- actor-imports-actor: an actor does not import another actor;
- sqlite3-outside-store: ``sqlite3`` is imported by ``gpuplaned.store`` and
  ``gpuplaned.tsdb`` only, and by the two that only call into them: the store actor and
  ``gpuplanectl backup``; no other module runs a statement (``x.execute(...)``, on a
  connection it was handed), the backup's integrity check aside (the CLI may not import the
  store);
- protocol-looks-at-disk: ``gpuplaned.protocol``'s modules open, stat or list no file (the
  port-file and SDK spool readers, whose job it is, aside).

KNOWN is a ratchet: the violations still there, each with the reason and the change that
removes it. A violation not in KNOWN fails, and so does an entry that no longer allows
anything, so the list only shrinks. ``python tests/test_layers.py`` prints KNOWN as it
should read now.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import layerkit
import pytest

# (rule, edge as an fnmatch pattern, why it is still there). A pattern stands for a family of
# edges with one cause, so that renames inside a layer leave the entry as it is.
KNOWN: list[tuple[str, str, str]] = []


@pytest.fixture(scope="module")
def violations() -> list[layerkit.Violation]:
    return layerkit.check_tree(layerkit.package_roots())


def test_no_violation_beyond_known(violations):
    new = layerkit.unknown(violations, KNOWN)
    assert not new, "new layer violations (fix them; `python tests/test_layers.py` lists them):\n" + "\n".join(
        f"  {v.rule}: {v.edge}  at {v.where}" for v in new)


def test_known_only_shrinks(violations):
    gone = layerkit.stale(violations, KNOWN)
    assert not gone, "these KNOWN entries no longer occur; remove them:\n" + "\n".join(f"  {e!r}" for e in gone)


def test_known_entries_name_a_rule_and_a_reason():
    for rule, _pattern, reason in KNOWN:
        assert rule in layerkit.RULES and reason.strip()


def test_repo_is_read_whole():
    """The walk finds the four packages where the pyprojects put them (a silent miss would
    make every rule pass)."""
    modules = layerkit.find_modules(layerkit.package_roots())
    assert {"gpuplaned.daemon", "gpuplaned.actors.runner", "gpuplanectl.main", "gpuplane"} <= modules.keys()
    assert modules["gpuplaned.actors.runner"] == layerkit.REPO / "actors" / "runner.py"
    assert modules["gpuplane"] == layerkit.REPO / "sdk" / "gpuplane" / "__init__.py"


# Planted trees: the checker itself, on packages laid out like the repo's.

def plant(tmp_path: Path, files: dict[str, str]) -> list[layerkit.Violation]:
    roots = {"gpuplaned": tmp_path / "gpuplaned", "gpuplaned.actors": tmp_path / "actors",
             "gpuplanectl": tmp_path / "ctl", "gpuplane": tmp_path / "sdk" / "gpuplane"}
    for folder in roots.values():
        folder.mkdir(parents=True, exist_ok=True)
    for name, source in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        for package in path.parents:
            if package == tmp_path:
                break
            (package / "__init__.py").touch()
        path.write_text(textwrap.dedent(source))
    return layerkit.check_tree(roots, tmp_path)


def found(violations: list[layerkit.Violation]) -> set[tuple[str, str]]:
    return {(v.rule, v.edge) for v in violations}


def test_planted_cycle_through_a_type_checking_import(tmp_path):
    violations = plant(tmp_path, {
        "gpuplaned/service/a.py": "from gpuplaned.service import b\n",
        "gpuplaned/service/b.py": """\
            from typing import TYPE_CHECKING
            if TYPE_CHECKING:
                from . import a
            """,
    })
    assert found(violations) == {("cycle", "gpuplaned.service.a -> gpuplaned.service.b -> gpuplaned.service.a")}
    assert violations[0].where == "gpuplaned/service/b.py:3 (TYPE_CHECKING)"


def test_planted_cycle_through_a_function_local_import(tmp_path):
    violations = plant(tmp_path, {
        "gpuplaned/store/rows.py": "from ..service.flow import submit\n",
        "gpuplaned/service/flow.py": """\
            def submit():
                import gpuplaned.store.rows
            """,
    })
    assert found(violations) == {
        ("cycle", "gpuplaned.service.flow -> gpuplaned.store.rows -> gpuplaned.service.flow"),
        ("layer-not-allowed", "gpuplaned.store.rows -> gpuplaned.service")}
    assert violations[0].where == "gpuplaned/store/rows.py:1"


def test_planted_node_actor_importing_the_store(tmp_path):
    violations = plant(tmp_path, {
        "gpuplaned/store/writer.py": "",
        "actors/runner.py": "from gpuplaned.store.writer import write\n",
        "actors/tbtail.py": "from ..store import writer\n",  # resolved across package-dir
        "actors/scheduler.py": "from gpuplaned.store import writer\n",  # server side: allowed
    })
    assert found(violations) == {
        ("layer-not-allowed", "gpuplaned.actors.runner -> gpuplaned.store"),
        ("layer-not-allowed", "gpuplaned.actors.tbtail -> gpuplaned.store"),
    }


@pytest.mark.parametrize(("files", "expected"), [
    pytest.param({"gpuplaned/domain/states.py": "import trio\n"},
                 {("library-not-allowed", "gpuplaned.domain.states -> trio")}, id="domain-imports-trio"),
    pytest.param({"gpuplaned/domain/failures.py": "from gpuplaned.shim.records import signal_name\n",
                  "gpuplaned/shim/records.py": ""},
                 {("layer-not-allowed", "gpuplaned.domain.failures -> gpuplaned.shim")}, id="domain-imports-shim"),
    pytest.param({"gpuplaned/protocol/wire.py": "from gpuplaned.store import db\n",
                  "gpuplaned/store/db.py": "import sqlite3\n"},
                 {("layer-not-allowed", "gpuplaned.protocol.wire -> gpuplaned.store")}, id="protocol-imports-store"),
    pytest.param({"gpuplaned/protocol/wire.py": "import attrs, json\nfrom . import ids\n",
                  "gpuplaned/protocol/ids.py": ""},
                 set(), id="protocol-pure"),
    pytest.param({"gpuplaned/shim/serve.py": "import json, os, signal\nimport attrs\nfrom gpuplaned.protocol import ids\n",
                  "gpuplaned/protocol/ids.py": ""},
                 {("library-not-allowed", "gpuplaned.shim.serve -> attrs"),
                  ("layer-not-allowed", "gpuplaned.shim.serve -> gpuplaned.protocol")}, id="shim-stdlib-only"),
    pytest.param({"gpuplaned/daemon.py": "", "gpuplaned/service/api/jobs.py": """\
                      from typing import TYPE_CHECKING
                      if TYPE_CHECKING:
                          from gpuplaned.daemon import DaemonContext
                      """},
                 {("layer-not-allowed", "gpuplaned.service.api.jobs -> gpuplaned.daemon")}, id="service-imports-daemon"),
    pytest.param({"gpuplaned/http/sse.py": "", "gpuplaned/service/api/logs.py": "from gpuplaned.http.sse import fmt\n"},
                 {("layer-not-allowed", "gpuplaned.service.api.logs -> gpuplaned.http")}, id="service-imports-http"),
    pytest.param({"gpuplaned/mcp/server.py": "", "gpuplaned/service/api/jobs.py": "from gpuplaned.mcp import server\n"},
                 {("layer-not-allowed", "gpuplaned.service.api.jobs -> gpuplaned.mcp")}, id="service-imports-mcp"),
    pytest.param({"gpuplaned/http/replies.py": "", "gpuplaned/mcp/tools.py": "from gpuplaned.http import replies\n"},
                 {("layer-not-allowed", "gpuplaned.mcp.tools -> gpuplaned.http")}, id="mcp-imports-http"),
    pytest.param({"gpuplaned/service/api/jobs.py": "import quart\n"},
                 {("library-not-allowed", "gpuplaned.service.api.jobs -> quart")}, id="service-imports-quart"),
    pytest.param({"gpuplaned/mcp/asgi.py": "", "ctl/bridge.py": "def pipe():\n    import mcp.client\n"
                                                              "    from gpuplaned.mcp import asgi\n"},
                 {("layer-not-allowed", "gpuplanectl.bridge -> gpuplaned.mcp"),
                  ("library-not-allowed", "gpuplanectl.bridge -> mcp")}, id="ctl-imports-mcp"),
    pytest.param({"actors/scheduler.py": "from gpuplaned.actors.store import StorePort\n", "actors/store.py": ""},
                 {("actor-imports-actor", "gpuplaned.actors.scheduler -> gpuplaned.actors.store")},
                 id="actor-imports-actor"),
    pytest.param({"actors/__init__.py": "from gpuplaned.actors import runner\n", "actors/runner.py": ""},
                 set(), id="the-registry-is-no-actor"),
    pytest.param({"ctl/main.py": "from gpuplaned.config import Config\nfrom gpuplaned.protocol.errors import E\n",
                  "gpuplaned/config.py": "", "gpuplaned/protocol/errors.py": ""},
                 {("layer-not-allowed", "gpuplanectl.main -> gpuplaned.config")}, id="ctl-imports-config"),
    pytest.param({"sdk/gpuplane/_run.py": "import json, os\nimport attrs\nfrom . import _env\n",
                  "sdk/gpuplane/_env.py": ""},
                 {("library-not-allowed", "gpuplane._run -> attrs")}, id="sdk-imports-attrs"),
    pytest.param({"gpuplaned/job_peers.py": "import os\n"},
                 {("module-in-no-layer", "gpuplaned.job_peers")}, id="module-in-no-layer"),
])
def test_planted_rule(tmp_path, files, expected):
    assert found(plant(tmp_path, files)) == expected


@pytest.mark.parametrize(("files", "expected"), [
    pytest.param({"gpuplaned/service/api/jobs.py": "import sqlite3\n"},
                 {("sqlite3-outside-store", "gpuplaned.service.api.jobs -> sqlite3")}, id="service"),
    pytest.param({"gpuplaned/http/idempotency.py": """\
                      from typing import TYPE_CHECKING
                      if TYPE_CHECKING:
                          from sqlite3 import Connection
                      """},
                 {("sqlite3-outside-store", "gpuplaned.http.idempotency -> sqlite3")}, id="http-type-checking"),
    pytest.param({"gpuplaned/service/api/runs.py": "def read():\n    import sqlite3.dbapi2\n"},
                 {("sqlite3-outside-store", "gpuplaned.service.api.runs -> sqlite3")}, id="function-local"),
    pytest.param({"gpuplaned/service/api/runs.py": "def config(conn, run_id):\n"
                                               "    return conn.execute('SELECT config FROM runs WHERE id = ?', (run_id,))\n"},
                 {("sqlite3-outside-store", "gpuplaned.service.api.runs -> *.execute")}, id="sql-on-a-connection-handed-in"),
    pytest.param({"ctl/commands/jobs.py": "import sqlite3\n"},
                 {("sqlite3-outside-store", "gpuplanectl.commands.jobs -> sqlite3")}, id="ctl"),
    pytest.param({"gpuplaned/store/run_rows.py": "import sqlite3\n", "gpuplaned/tsdb/query.py": "import sqlite3\n",
                  "actors/store.py": "import sqlite3\nfrom gpuplaned.store.writer import commit_batch\n",
                  "gpuplaned/store/writer.py": "",
                  "ctl/commands/backup.py": "import sqlite3\ndef check(conn):\n    conn.execute('PRAGMA integrity_check')\n"},
                 set(), id="the-store-and-its-two-callers"),
    pytest.param({"actors/store.py": "import sqlite3\ndef commit(conn):\n    conn.execute('COMMIT')\n"},
                 {("sqlite3-outside-store", "gpuplaned.actors.store -> *.execute")}, id="the-store-actor-runs-no-sql"),
])
def test_planted_sqlite3_outside_the_store(tmp_path, files, expected):
    assert found(plant(tmp_path, files)) == expected


@pytest.mark.parametrize(("source", "expected"), [
    pytest.param("import os\ndef check(cwd):\n    return os.path.isdir(cwd)\n",
                 {"os.path.isdir"}, id="os-path-isdir"),
    pytest.param("from os.path import exists\n", {"os.path.exists"}, id="from-os-path"),
    pytest.param("from pathlib import Path\ndef check(p):\n    return Path(p).is_dir() or Path(p).exists()\n",
                 {"pathlib", "*.is_dir", "*.exists"}, id="pathlib"),
    pytest.param("def read(p):\n    with open(p) as f:\n        return f.read()\n", {"open"}, id="open"),
    pytest.param("import os\ndef look(p):\n    return os.stat(p), os.listdir(p), os.getcwd()\n",
                 {"os.stat", "os.listdir", "os.getcwd"}, id="os"),
    pytest.param("import os\ndef check(p):\n    return os.path.isabs(p) and os.path.normpath(p) == os.path.basename(p)\n",
                 set(), id="path-strings-are-no-disk"),
])
def test_planted_protocol_looking_at_disk(tmp_path, source, expected):
    edges = {("protocol-looks-at-disk", f"gpuplaned.protocol.job_wire -> {what}") for what in expected}
    assert found(plant(tmp_path, {"gpuplaned/protocol/job_wire.py": source})) == edges


def test_the_port_file_and_spool_readers_may_read_their_files(tmp_path):
    reader = "from pathlib import Path\ndef read(p):\n    return Path(p).read_text()\n"
    assert found(plant(tmp_path, {"gpuplaned/protocol/discovery.py": reader,
                                  "gpuplaned/protocol/sdk_spool.py": reader})) == set()


def test_the_table_is_whole():
    """Each layer a row allows is a row of the table, and the table is the one
    docs/architecture.md shows (its first column, in order)."""
    for layer in layerkit.LAYERS:
        assert set(layer.may_import) <= set(layerkit.LAYER_NAMES) - {layer.name}, layer.name
    doc = (layerkit.REPO / "docs" / "architecture.md").read_text()
    table = doc[doc.index("| layer | package"):].split("\n\n")[0].splitlines()[2:]
    assert [row.split("|")[1].strip() for row in table] == list(layerkit.LAYER_NAMES)


def test_ratchet_reports_new_and_stale_entries():
    violations = [layerkit.Violation("cycle", "gpuplaned.a -> gpuplaned.b -> gpuplaned.a", "gpuplaned/b.py:3")]
    known = [("cycle", "gpuplaned.a -> * -> gpuplaned.a", "why"), ("cycle", "gpuplaned.c -> gpuplaned.c", "gone")]
    assert layerkit.unknown(violations, known) == []
    assert layerkit.stale(violations, known) == [known[1]]
    assert layerkit.unknown(violations, known[1:]) == violations


if __name__ == "__main__":
    current = layerkit.check_tree(layerkit.package_roots())
    print(layerkit.format_known(current, KNOWN))
    new, gone = layerkit.unknown(current, KNOWN), layerkit.stale(current, KNOWN)
    print(f"# {len(current)} violations: {len(new)} not in KNOWN, {len(gone)} KNOWN entries gone", file=sys.stderr)
    sys.exit(1 if new or gone else 0)
