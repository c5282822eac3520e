"""The repo's import graph, read with ``ast`` from the files (nothing is imported), and the
layer rules of docs/architecture.md checked over it.

Every ``import`` statement counts: at module level, under ``if TYPE_CHECKING:`` and inside
functions, since each of them ties the two modules together for a reader and a type checker
alike. Relative imports are resolved, and ``from pkg import name`` is an import of the module
``pkg.name`` when there is one, else of ``pkg``.
"""

from __future__ import annotations

import ast
import fnmatch
import json
import sys
import tomllib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # a module of the repo, or the top-level name of anything else
    internal: bool
    path: Path
    line: int
    kind: str  # "module", "TYPE_CHECKING" or "function"


@dataclass(frozen=True)
class Violation:
    rule: str
    edge: str  # "source -> target", or for a cycle the path "a -> b -> a"
    where: str  # path:line of one import behind it


def package_roots(repo: Path = REPO) -> dict[str, Path]:
    """Each top-level or remapped package and its folder, as the two pyprojects install them."""
    roots: dict[str, Path] = {}
    for pyproject in (repo / "pyproject.toml", repo / "sdk" / "pyproject.toml"):
        setuptools = tomllib.loads(pyproject.read_text())["tool"]["setuptools"]
        mapped = setuptools.get("package-dir", {})
        for package, folder in mapped.items():
            roots[package] = pyproject.parent / folder
        for package in setuptools.get("packages", []):
            if "." not in package and package not in mapped:
                roots[package] = pyproject.parent / package
    return roots


def find_modules(roots: dict[str, Path]) -> dict[str, Path]:
    """Module name -> file, for every .py file under each root (a folder that another root
    maps, such as actors/ for gpuplaned.actors, is that root's, not its parent's)."""
    claimed = {folder.resolve() for folder in roots.values()}
    modules: dict[str, Path] = {}
    for package, folder in roots.items():
        for path in _python_files(folder, claimed - {folder.resolve()}):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join([package, *parts])] = path
    return modules


def _python_files(folder: Path, skip: set[Path]) -> Iterator[Path]:
    for entry in sorted(folder.iterdir()):
        if entry.is_dir():
            if entry.resolve() not in skip and entry.name != "__pycache__" and not entry.name.startswith("."):
                yield from _python_files(entry, skip)
        elif entry.suffix == ".py":
            yield entry


def read_imports(modules: dict[str, Path]) -> list[Import]:
    imports = []
    for module, path in sorted(modules.items()):
        finder = _ImportFinder(module, path.name == "__init__.py", modules)
        finder.visit(ast.parse(path.read_text(), str(path)))
        imports += [Import(module, target, target in modules, path, line, kind)
                    for target, line, kind in finder.found]
    return imports


class _ImportFinder(ast.NodeVisitor):
    """Every import in a module, with where it sits: at module level, under
    ``if TYPE_CHECKING:`` or inside a function."""

    def __init__(self, module: str, is_package: bool, modules: dict[str, Path]) -> None:
        self.module, self.is_package, self.modules = module, is_package, modules
        self.found: list[tuple[str, int, str]] = []
        self.kind = "module"

    def visit_If(self, node: ast.If) -> None:
        if not _is_type_checking(node.test):
            return self.generic_visit(node)
        outer, self.kind = self.kind, "TYPE_CHECKING"
        for child in node.body:
            self.visit(child)
        self.kind = outer
        for child in node.orelse:
            self.visit(child)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        outer = self.kind
        self.kind = "function" if outer == "module" else outer
        self.generic_visit(node)
        self.kind = outer

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Import(self, node: ast.Import | ast.ImportFrom) -> None:
        for target in _targets(node, self.module, self.is_package, self.modules):
            self.found.append((target if target in self.modules else target.split(".")[0],
                               node.lineno, self.kind))

    visit_ImportFrom = visit_Import


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _targets(node: ast.AST, module: str, is_package: bool, modules: dict[str, Path]) -> Iterator[str]:
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield _known_prefix(alias.name, modules)
    elif isinstance(node, ast.ImportFrom):
        base = _resolve_base(node, module, is_package)
        if base == "__future__":
            return
        for alias in node.names:
            submodule = f"{base}.{alias.name}"
            yield submodule if submodule in modules else _known_prefix(base, modules)


def _resolve_base(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    package = module.split(".") if is_package else module.split(".")[:-1]
    package = package[: len(package) - (node.level - 1)]
    return ".".join([*package, *([node.module] if node.module else [])])


def _known_prefix(name: str, modules: dict[str, Path]) -> str:
    """The longest prefix of ``name`` that is a module of the repo (``import a.b.c`` loads
    ``a.b.c``; a name the repo does not have stays as it is, for the external check)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in modules:
            return ".".join(parts[:end])
    return name


def find_cycles(imports: Iterable[Import]) -> list[list[str]]:
    """One shortest cycle through each edge that lies on a cycle, deduplicated by rotation:
    a cycle is listed as the path from its smallest module back to it."""
    graph: dict[str, set[str]] = {}
    for imp in imports:
        if imp.internal:
            graph.setdefault(imp.source, set()).add(imp.target)
    cycles = set()
    for source, targets in graph.items():
        for target in targets:
            path = _shortest_path(graph, target, source)
            if path is not None:
                cycles.add(_rotate([source, *path]))
    return [[*cycle, cycle[0]] for cycle in sorted(cycles)]


def _shortest_path(graph: dict[str, set[str]], start: str, goal: str) -> list[str] | None:
    came_from: dict[str, str | None] = {start: None}
    frontier = [start]
    while frontier:
        next_frontier = []
        for node in frontier:
            if node == goal:
                path = []
                while node is not None:
                    path.append(node)
                    node = came_from[node]
                return path[::-1]
            for neighbour in sorted(graph.get(node, ())):
                if neighbour not in came_from:
                    came_from[neighbour] = node
                    next_frontier.append(neighbour)
        frontier = next_frontier
    return None


def _rotate(cycle: list[str]) -> tuple[str, ...]:
    """``cycle`` without its closing repeat, started at its smallest module."""
    if len(cycle) > 1 and cycle[-1] == cycle[0]:
        cycle = cycle[:-1]
    start = cycle.index(min(cycle))
    return tuple(cycle[start:] + cycle[:start])


# The rules: an allow-list. Each layer of docs/architecture.md names the layers and the
# third-party libraries it may import, and the standard library is open to all (sqlite3 has
# a rule of its own). Anything not allowed is a violation, and so is a module in no layer.
# Edges name the target at the grain the rule speaks of (a layer's package, an actor, a
# library), so a module renamed inside a layer leaves the violation's edge as it was.

@dataclass(frozen=True)
class Layer:
    name: str
    packages: tuple[str, ...]  # these modules and everything under them
    may_import: tuple[str, ...]  # the names of the layers it may import (its own always)
    libraries: tuple[str, ...] | None  # third-party top-level names; None: any
    modules: tuple[str, ...] = ()  # these modules alone (a package's ``__init__``)


# Node-side actors run on a GPU host, in a process with no store, service or HTTP app (role agent).
NODE_ACTORS = ("runner", "logs", "monitor", "tbtail", "ckptwatch", "uplink")
NODE_LIBRARIES = ("gpuplaned.launching", "gpuplaned.telemetry", "gpuplaned.gpus", "gpuplaned.logtail",
                  "gpuplaned.cgroup", "gpuplaned.tensorboard", "gpuplaned.checkpoints",
                  "gpuplaned.job_processes", "gpuplaned.testing", "gpuplaned.slurm")
CORE = ("gpuplaned.config", "gpuplaned.home", "gpuplaned.endpoint", "gpuplaned.lifecycle", "gpuplaned.owner",
        "gpuplaned.node_link", "gpuplaned.node_context", "gpuplaned.front_scope", "gpuplaned.job_folders")

_NODE_SIDE = ("package", "protocol", "domain", "runtime", "shim", "node libraries", "core")
_SERVER_SIDE = (*_NODE_SIDE, "store")

LAYERS = (
    Layer("package", (), (), (), modules=("gpuplaned",)),  # its __init__: the version
    Layer("protocol", ("gpuplaned.protocol",), (), ("attrs", "cattrs", "re2")),
    Layer("domain", ("gpuplaned.domain",), ("protocol",), ("attrs", "numpy")),
    Layer("runtime", ("gpuplaned.runtime",), ("protocol", "domain"), ("attrs", "trio")),
    Layer("shim", ("gpuplaned.shim",), (), ()),  # runs by path, in every job's process tree
    Layer("node libraries", NODE_LIBRARIES, ("package", "protocol", "domain", "runtime", "shim"),
          ("attrs", "trio", "psutil", "pynvml", "numpy", "google_crc32c", "watchfiles")),
    Layer("core", CORE, ("package", "protocol", "domain", "runtime", "shim", "node libraries"),
          ("attrs", "cattrs", "trio")),
    Layer("backends", ("gpuplaned.backends",), _NODE_SIDE, ("attrs", "trio")),
    Layer("uplink", ("gpuplaned.uplink",), _NODE_SIDE, ("attrs", "trio", "trio_websocket")),
    Layer("store", ("gpuplaned.store", "gpuplaned.tsdb"), _NODE_SIDE, ("attrs", "trio", "numpy")),
    Layer("service", ("gpuplaned.service",), _SERVER_SIDE, ("attrs", "trio", "numpy", "httpx", "cryptography")),
    Layer("http", ("gpuplaned.http",), (*_SERVER_SIDE, "service"),
          ("attrs", "trio", "quart", "quart_trio", "hypercorn", "werkzeug", "h11")),
    Layer("mcp", ("gpuplaned.mcp",), (*_SERVER_SIDE, "service"), ("attrs", "trio", "hypercorn", "mcp", "mcp_types")),
    Layer("node actors", tuple(f"gpuplaned.actors.{actor}" for actor in NODE_ACTORS), (*_NODE_SIDE, "backends", "uplink"),
          ("attrs", "trio", "trio_websocket", "psutil", "watchfiles", "numpy")),
    Layer("server actors", ("gpuplaned.actors",), (*_SERVER_SIDE, "uplink", "service", "http", "mcp"),
          ("attrs", "trio", "hypercorn", "httpx", "numpy")),
    Layer("daemon", ("gpuplaned.daemon", "gpuplaned.cli", "gpuplaned.__main__"),
          (*_SERVER_SIDE, "uplink", "service", "http", "mcp", "node actors", "server actors"), None,
          modules=("gpuplaned.actors",)),  # actors/__init__.py: the registry of actors and roles
    Layer("ctl", ("gpuplanectl",), ("protocol",), ("typer", "psutil")),
    Layer("sdk", ("gpuplane",), (), ()),
)
LAYER_NAMES = tuple(layer.name for layer in LAYERS)

# sqlite3 is the store's: SQL lives in gpuplaned/store (the *_rows modules) and gpuplaned/tsdb,
# and no other module imports sqlite3 or calls a connection's execute.
# The store actor (the connection's type and errors; its transactions are store.writer's) and
# `gpuplanectl backup` (SQLite's own backup of the file) import it too.
SQLITE_LAYER = "store"
SQLITE_CALLERS = ("gpuplaned.actors.store", "gpuplanectl.commands.backup")
# Of those, only the backup runs statements of its own (its integrity check): the CLI may not
# import the store (it starts light), while the actor's transactions are store.writer's.
SQL_RUNNERS = ("gpuplanectl.commands.backup",)

# protocol/ holds the wire's types: what it checks is the value, never a disk. The port-file
# and the SDK spool are files, and reading them is those readers' whole job.
DISK_READERS = ("gpuplaned.protocol.discovery", "gpuplaned.protocol.sdk_spool")
DISK_MODULES = ("pathlib", "shutil", "glob", "tempfile", "fileinput", "filecmp")
DISK_OS = ("stat", "lstat", "listdir", "scandir", "walk", "open", "access", "mkdir", "makedirs", "remove",
           "unlink", "rename", "replace", "readlink", "rmdir", "chmod", "chown", "getcwd", "statvfs", "truncate")
DISK_OS_PATH = ("exists", "lexists", "isdir", "isfile", "islink", "ismount", "getsize", "getmtime",
                "getatime", "getctime", "realpath", "samefile")
DISK_METHODS = ("exists", "is_dir", "is_file", "is_symlink", "read_text", "read_bytes", "write_text",
                "write_bytes", "iterdir", "glob", "rglob", "resolve", "touch", "mkdir", "samefile")


def layer_of(module: str) -> Layer | None:
    """The layer a module is in: the longest package or module of the table that holds it."""
    best: tuple[int, Layer] | None = None
    for layer in LAYERS:
        for name in layer.modules:
            if module == name and (best is None or len(name) >= best[0]):
                best = (len(name), layer)
        for name in layer.packages:
            if _within(module, name) and (best is None or len(name) > best[0]):
                best = (len(name), layer)
    return best[1] if best else None


def _layer(module: str) -> str:
    """``gpuplaned.service.api.jobs`` -> ``gpuplaned.service``; an actor is its own."""
    return _actor(module) or ".".join(module.split(".")[:2])


def _within(module: str, *packages: str) -> bool:
    return any(module == package or module.startswith(package + ".") for package in packages)


def _actor(module: str) -> str | None:
    """The actor a module belongs to (``gpuplaned.actors.runner``), or None (the package's
    ``__init__``, the registry of roles, is no actor)."""
    parts = module.split(".")
    return ".".join(parts[:3]) if len(parts) >= 3 and parts[:2] == ["gpuplaned", "actors"] else None


def _layer_not_allowed(imp: Import) -> str | None:
    """An import of the repo's own modules that its layer's row does not allow."""
    source, target = layer_of(imp.source), layer_of(imp.target)
    if not imp.internal or source is None or target is None or source is target:
        return None
    return None if target.name in source.may_import else _layer(imp.target)


def _library_not_allowed(imp: Import) -> str | None:
    """A third-party library its layer's row does not list (sqlite3 has its own rule)."""
    source, top = layer_of(imp.source), imp.target.split(".")[0]
    if imp.internal or source is None or source.libraries is None or top == "sqlite3":
        return None
    if top in sys.stdlib_module_names:
        return None
    return None if top in source.libraries else top


def _actor_imports_actor(imp: Import) -> str | None:
    source, target = _actor(imp.source), _actor(imp.target)
    return target if source and target and source != target else None


def _sqlite3_outside_store(imp: Import) -> str | None:
    if imp.internal or imp.target.split(".")[0] != "sqlite3" or _within(imp.source, *SQLITE_CALLERS):
        return None
    source = layer_of(imp.source)
    return None if source is not None and source.name == SQLITE_LAYER else "sqlite3"


EDGE_RULES = {
    "layer-not-allowed": _layer_not_allowed,
    "library-not-allowed": _library_not_allowed,
    "actor-imports-actor": _actor_imports_actor,
    "sqlite3-outside-store": _sqlite3_outside_store,
}
RULES = ("cycle", "module-in-no-layer", *EDGE_RULES, "protocol-looks-at-disk")


@dataclass(frozen=True)
class DiskUse:
    """A call (or an import) that a rule forbids a module, where it is."""

    module: str
    what: str  # "os.path.isdir", "open", "pathlib", "*.exists"; "*.execute" for SQL
    path: Path
    line: int


SQL_CALLS = ("execute", "executemany", "executescript")


def read_sql_calls(modules: dict[str, Path]) -> list[DiskUse]:
    """Each ``x.execute(...)`` (and ``executemany``, ``executescript``) outside the store: SQL
    run on a connection handed in (a ``write``'s or ``read``'s callback) imports no sqlite3."""
    calls = []
    for module, path in sorted(modules.items()):
        layer = layer_of(module)
        if (layer is not None and layer.name == SQLITE_LAYER) or _within(module, *SQL_RUNNERS):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in SQL_CALLS:
                calls.append(DiskUse(module, f"*.{node.func.attr}", path, node.lineno))
    return calls


def read_disk_uses(modules: dict[str, Path]) -> list[DiskUse]:
    """What each protocol module does that touches a disk: a call of ``open``, of ``os``'s or
    ``os.path``'s file functions, a path's file methods, an import of a file library."""
    uses = []
    for module, path in sorted(modules.items()):
        if _within(module, "gpuplaned.protocol") and not _within(module, *DISK_READERS):
            uses += [DiskUse(module, what, path, line) for what, line in _disk_uses(ast.parse(path.read_text()))]
    return uses


def _disk_uses(tree: ast.AST) -> Iterator[tuple[str, int]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in DISK_MODULES:
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom) and not node.level:
            base = node.module or ""
            if base.split(".")[0] in DISK_MODULES:
                yield base, node.lineno
            for alias in node.names:
                if (base, alias.name) in _DISK_NAMES:
                    yield f"{base}.{alias.name}", node.lineno
        elif isinstance(node, ast.Call):
            name = _dotted(node.func)
            if name == "open" or name in _DISK_CALLS:
                yield name, node.lineno
            elif isinstance(node.func, ast.Attribute) and node.func.attr in DISK_METHODS and name not in _DISK_CALLS:
                yield f"*.{node.func.attr}", node.lineno


_DISK_CALLS = {*(f"os.{f}" for f in DISK_OS), *(f"os.path.{f}" for f in DISK_OS_PATH), "io.open"}
_DISK_NAMES = {*(("os", f) for f in DISK_OS), *(("os.path", f) for f in DISK_OS_PATH), ("io", "open")}


def _dotted(node: ast.expr) -> str | None:
    """``os.path.isdir`` for that expression; None for anything but names and attributes."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def check(imports: list[Import], repo: Path = REPO, *, modules: dict[str, Path] | None = None,
          disk_uses: Iterable[DiskUse] = (), sql_calls: Iterable[DiskUse] = ()) -> list[Violation]:
    """Every violation of the rules, one per (rule, edge), each with one import (or call) behind it."""
    found: dict[tuple[str, str], Violation] = {}

    def add(rule: str, edge: str, where: str) -> None:
        found.setdefault((rule, edge), Violation(rule, edge, where))

    by_edge = {(imp.source, imp.target): imp for imp in reversed(imports)}
    for cycle in find_cycles(imports):
        # The import that closes the cycle, back to its first module.
        add("cycle", " -> ".join(cycle), _where(by_edge[cycle[-2], cycle[-1]], repo))
    for module, path in sorted((modules or {}).items()):
        if layer_of(module) is None:
            add("module-in-no-layer", module, str(path.relative_to(repo) if path.is_relative_to(repo) else path))
    for imp in imports:
        for rule, forbidden in EDGE_RULES.items():
            target = forbidden(imp)
            if target:
                add(rule, f"{_actor(imp.source) or imp.source} -> {target}", _where(imp, repo))
    for rule, uses in (("sqlite3-outside-store", sql_calls), ("protocol-looks-at-disk", disk_uses)):
        for use in uses:
            path = use.path.relative_to(repo) if use.path.is_relative_to(repo) else use.path
            add(rule, f"{use.module} -> {use.what}", f"{path}:{use.line}")
    return sorted(found.values(), key=lambda v: (RULES.index(v.rule), v.edge))


def _where(imp: Import, repo: Path) -> str:
    path = imp.path.relative_to(repo) if imp.path.is_relative_to(repo) else imp.path
    return f"{path}:{imp.line}" + ("" if imp.kind == "module" else f" ({imp.kind})")


def check_tree(roots: dict[str, Path], repo: Path = REPO) -> list[Violation]:
    modules = find_modules(roots)
    return check(read_imports(modules), repo, modules=modules, disk_uses=read_disk_uses(modules),
                 sql_calls=read_sql_calls(modules))


# The ratchet: KNOWN lists the violations still allowed, as (rule, edge pattern, reason)
# with fnmatch patterns for the edge.

def unknown(violations: list[Violation], known: Iterable[tuple[str, str, str]]) -> list[Violation]:
    """The violations that no KNOWN entry allows."""
    return [v for v in violations if not any(_allows(entry, v) for entry in known)]


def stale(violations: list[Violation], known: Iterable[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """The KNOWN entries that allow nothing any more: they must go, so the list only shrinks."""
    return [entry for entry in known if not any(_allows(entry, v) for v in violations)]


def _allows(entry: tuple[str, str, str], violation: Violation) -> bool:
    rule, pattern, _reason = entry
    return rule == violation.rule and fnmatch.fnmatchcase(violation.edge, pattern)


def format_known(violations: list[Violation], known: Iterable[tuple[str, str, str]]) -> str:
    """KNOWN as it should read now: the entries that still allow something, then the new
    violations with the import behind each, to be given a reason or fixed."""
    known = list(known)
    lines = ["KNOWN = ["]
    gone = stale(violations, known)
    entries = [(entry, None) for entry in known if entry not in gone]
    entries += [((v.rule, v.edge, "TODO: why, and the change that removes it"), f"new, at {v.where}")
                for v in unknown(violations, known)]
    for (rule, pattern, reason), comment in entries:
        if comment:
            lines.append(f"    # {comment}")
        lines.append(f"    ({json.dumps(rule)}, {json.dumps(pattern)},\n     {json.dumps(reason)}),")
    lines.append("]")
    return "\n".join(lines)
