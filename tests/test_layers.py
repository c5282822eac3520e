"""The layers of docs/architecture.md, kept by a test over the import graph (issue 14).

The rules (tests/layerkit.py reads every import with ``ast``, TYPE_CHECKING and
function-local ones included; nothing of the daemon is imported here):

- cycle: no import cycle anywhere;
- pure-layer-reaches-io: ``gpuplaned.domain`` and ``gpuplaned.protocol`` reach neither trio,
  sqlite3 nor quart (nor trio_websocket, quart_trio), directly or through the repo's modules
  they import;
- service-imports-daemon: ``gpuplaned.service`` does not import ``gpuplaned.daemon``;
- service-imports-front: ``gpuplaned.service`` imports nothing of ``gpuplaned.http``,
  ``gpuplaned.mcp`` or ``gpuplaned.actors`` (the layers above it);
- actor-imports-actor: an actor does not import another actor;
- node-actor-imports-server: a node-side actor (runner, logs, monitor, tbtail, ckptwatch,
  uplink) imports nothing of ``gpuplaned.service``, ``gpuplaned.http`` or ``gpuplaned.store``;
- ctl-imports-daemon: ``gpuplanectl`` imports nothing of the daemon but ``gpuplaned.protocol``
  (so neither ``gpuplaned.mcp``);
- ctl-imports-mcp: ``gpuplanectl`` imports neither ``mcp`` nor ``mcp_types`` (seconds to import);
- sdk-imports-non-stdlib: the SDK (``gpuplane``) imports the standard library only.

KNOWN is a ratchet: the violations still there, each with the reason and the change that
removes it. A violation not in KNOWN fails, and so does an entry that no longer allows
anything, so the list only shrinks. ``python tests/test_layers.py`` prints KNOWN as it
should read now: the entries still in use, then each new violation with the import behind it.
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
        "gpuplaned/a.py": "from gpuplaned import b\n",
        "gpuplaned/b.py": """\
            from typing import TYPE_CHECKING
            if TYPE_CHECKING:
                from . import a
            """,
    })
    assert found(violations) == {("cycle", "gpuplaned.a -> gpuplaned.b -> gpuplaned.a")}
    assert violations[0].where == "gpuplaned/b.py:3 (TYPE_CHECKING)"


def test_planted_cycle_through_a_function_local_import(tmp_path):
    violations = plant(tmp_path, {
        "gpuplaned/store/rows.py": "from ..service.flow import submit\n",
        "gpuplaned/service/flow.py": """\
            def submit():
                import gpuplaned.store.rows
            """,
    })
    assert found(violations) == {
        ("cycle", "gpuplaned.service.flow -> gpuplaned.store.rows -> gpuplaned.service.flow")}
    assert violations[0].where == "gpuplaned/store/rows.py:1"


def test_planted_node_actor_importing_the_store(tmp_path):
    violations = plant(tmp_path, {
        "gpuplaned/store/writer.py": "",
        "actors/runner.py": "from gpuplaned.store.writer import write\n",
        "actors/tbtail.py": "from ..store import writer\n",  # resolved across package-dir
        "actors/scheduler.py": "from gpuplaned.store import writer\n",  # server side: allowed
    })
    assert found(violations) == {
        ("node-actor-imports-server", "gpuplaned.actors.runner -> gpuplaned.store"),
        ("node-actor-imports-server", "gpuplaned.actors.tbtail -> gpuplaned.store"),
    }


@pytest.mark.parametrize(("files", "expected"), [
    pytest.param({"gpuplaned/domain/states.py": "import trio\n"},
                 {("pure-layer-reaches-io", "gpuplaned.domain.states -> trio")}, id="domain-imports-trio"),
    pytest.param({"gpuplaned/protocol/wire.py": "from gpuplaned.store import db\n",
                  "gpuplaned/store/db.py": "import sqlite3\n"},
                 {("pure-layer-reaches-io", "gpuplaned.protocol.wire -> sqlite3")}, id="protocol-reaches-sqlite3"),
    pytest.param({"gpuplaned/protocol/wire.py": "import attrs, json\nfrom . import ids\n",
                  "gpuplaned/protocol/ids.py": ""},
                 set(), id="protocol-pure"),
    pytest.param({"gpuplaned/daemon.py": "", "gpuplaned/service/jobs.py": """\
                      from typing import TYPE_CHECKING
                      if TYPE_CHECKING:
                          from gpuplaned.daemon import DaemonContext
                      """},
                 {("service-imports-daemon", "gpuplaned.service.jobs -> gpuplaned.daemon")}, id="service-imports-daemon"),
    pytest.param({"gpuplaned/http/sse.py": "", "gpuplaned/service/logs.py": "from gpuplaned.http.sse import fmt\n"},
                 {("service-imports-front", "gpuplaned.service.logs -> gpuplaned.http")}, id="service-imports-http"),
    pytest.param({"gpuplaned/mcp/server.py": "", "gpuplaned/service/jobs.py": "from gpuplaned.mcp import server\n"},
                 {("service-imports-front", "gpuplaned.service.jobs -> gpuplaned.mcp")}, id="service-imports-mcp"),
    pytest.param({"gpuplaned/mcp/asgi.py": "", "ctl/bridge.py": "def pipe():\n    import mcp.client\n"
                                                              "    from gpuplaned.mcp import asgi\n"},
                 {("ctl-imports-daemon", "gpuplanectl.bridge -> gpuplaned.mcp"),
                  ("ctl-imports-mcp", "gpuplanectl.bridge -> mcp")}, id="ctl-imports-mcp"),
    pytest.param({"actors/scheduler.py": "from gpuplaned.actors.store import StorePort\n", "actors/store.py": ""},
                 {("actor-imports-actor", "gpuplaned.actors.scheduler -> gpuplaned.actors.store")},
                 id="actor-imports-actor"),
    pytest.param({"actors/__init__.py": "from gpuplaned.actors import runner\n", "actors/runner.py": ""},
                 set(), id="the-registry-is-no-actor"),
    pytest.param({"ctl/main.py": "from gpuplaned.config import Config\nfrom gpuplaned.protocol.errors import E\n",
                  "gpuplaned/config.py": "", "gpuplaned/protocol/errors.py": ""},
                 {("ctl-imports-daemon", "gpuplanectl.main -> gpuplaned.config")}, id="ctl-imports-config"),
    pytest.param({"sdk/gpuplane/_run.py": "import json, os\nimport attrs\nfrom . import _env\n",
                  "sdk/gpuplane/_env.py": ""},
                 {("sdk-imports-non-stdlib", "gpuplane._run -> attrs")}, id="sdk-imports-attrs"),
])
def test_planted_rule(tmp_path, files, expected):
    assert found(plant(tmp_path, files)) == expected


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
