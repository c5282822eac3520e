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

# Node-side actors run on a GPU host, in a process with no store, service or HTTP app
# (role agent): the coming tbtail, ckptwatch and uplink are listed before they exist.
NODE_ACTORS = ("runner", "logs", "monitor", "tbtail", "ckptwatch", "uplink")
SERVER_LAYERS = ("gpuplaned.service", "gpuplaned.http", "gpuplaned.store")
FRONT_LAYERS = ("gpuplaned.http", "gpuplaned.mcp", "gpuplaned.actors")  # above the service layer
MCP_LIBRARIES = ("mcp", "mcp_types")  # about 2 s to import: the daemon's alone, never the CLI's
PURE_LAYERS = ("gpuplaned.domain", "gpuplaned.protocol")
IO_LIBRARIES = ("trio", "trio_websocket", "sqlite3", "quart", "quart_trio")


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


# The rules. Each names what it forbids at the grain the rule speaks of (a layer, an actor, a
# library), so a module renamed inside a layer leaves the violation's edge as it was.

def _layer(module: str) -> str:
    """``gpuplaned.service.jobs`` -> ``gpuplaned.service``; a top-level module is its own layer."""
    return ".".join(module.split(".")[:2])


def _within(module: str, *packages: str) -> bool:
    return any(module == package or module.startswith(package + ".") for package in packages)


def _actor(module: str) -> str | None:
    """The actor a module belongs to (``gpuplaned.actors.runner``), or None (the package's
    ``__init__``, the registry of roles, is no actor)."""
    parts = module.split(".")
    return ".".join(parts[:3]) if len(parts) >= 3 and parts[:2] == ["gpuplaned", "actors"] else None


def _service_imports_daemon(imp: Import) -> str | None:
    if _within(imp.source, "gpuplaned.service") and _within(imp.target, "gpuplaned.daemon"):
        return "gpuplaned.daemon"
    return None


def _service_imports_front(imp: Import) -> str | None:
    """The service layer is below the HTTP app: REST, the CLI and MCP all call it, so
    nothing in it may be of one front (SSE framing lives in ``protocol.sse_frames``)."""
    if _within(imp.source, "gpuplaned.service") and _within(imp.target, *FRONT_LAYERS):
        return _layer(imp.target)
    return None


def _actor_imports_actor(imp: Import) -> str | None:
    source, target = _actor(imp.source), _actor(imp.target)
    return target if source and target and source != target else None


def _node_actor_imports_server(imp: Import) -> str | None:
    source = _actor(imp.source)
    if source and source.split(".")[2] in NODE_ACTORS and _within(imp.target, *SERVER_LAYERS):
        return _layer(imp.target)
    return None


def _ctl_imports_daemon(imp: Import) -> str | None:
    if (_within(imp.source, "gpuplanectl") and _within(imp.target, "gpuplaned")
            and not _within(imp.target, "gpuplaned.protocol")):
        return _layer(imp.target)
    return None


def _ctl_imports_mcp(imp: Import) -> str | None:
    """``gpuplanectl mcp-stdio`` is a byte pipe to the daemon's /mcp: the CLI stays light."""
    if _within(imp.source, "gpuplanectl") and not imp.internal and imp.target.split(".")[0] in MCP_LIBRARIES:
        return imp.target.split(".")[0]
    return None


def _sdk_imports_non_stdlib(imp: Import) -> str | None:
    if not _within(imp.source, "gpuplane") or _within(imp.target, "gpuplane"):
        return None
    top = imp.target.split(".")[0]
    return None if not imp.internal and top in sys.stdlib_module_names else top


EDGE_RULES = {
    "service-imports-daemon": _service_imports_daemon,
    "service-imports-front": _service_imports_front,
    "actor-imports-actor": _actor_imports_actor,
    "node-actor-imports-server": _node_actor_imports_server,
    "ctl-imports-daemon": _ctl_imports_daemon,
    "ctl-imports-mcp": _ctl_imports_mcp,
    "sdk-imports-non-stdlib": _sdk_imports_non_stdlib,
}
RULES = ("cycle", "pure-layer-reaches-io", *EDGE_RULES)


def check(imports: list[Import], repo: Path = REPO) -> list[Violation]:
    """Every violation of the rules, one per (rule, edge), each with one import behind it."""
    found: dict[tuple[str, str], Violation] = {}

    def add(rule: str, edge: str, where: str) -> None:
        found.setdefault((rule, edge), Violation(rule, edge, where))

    by_edge = {(imp.source, imp.target): imp for imp in reversed(imports)}
    for cycle in find_cycles(imports):
        # The import that closes the cycle, back to its first module.
        add("cycle", " -> ".join(cycle), _where(by_edge[cycle[-2], cycle[-1]], repo))
    for source, library, chain in _pure_layers_reaching_io(imports):
        add("pure-layer-reaches-io", f"{source} -> {library}",
            _where(by_edge[chain[-2], library], repo) + (f" via {' -> '.join(chain)}" if len(chain) > 2 else ""))
    for imp in imports:
        for rule, forbidden in EDGE_RULES.items():
            target = forbidden(imp)
            if target:
                add(rule, f"{_actor(imp.source) or imp.source} -> {target}", _where(imp, repo))
    return sorted(found.values(), key=lambda v: (RULES.index(v.rule), v.edge))


def _pure_layers_reaching_io(imports: list[Import]) -> Iterator[tuple[str, str, list[str]]]:
    """(module, library, import chain) for each domain or protocol module that reaches an I/O
    library, directly or through the repo's modules it imports."""
    graph: dict[str, list[str]] = {}
    for imp in imports:
        if imp.internal or imp.target in IO_LIBRARIES:
            graph.setdefault(imp.source, []).append(imp.target)
    for source in sorted(graph):
        if not _within(source, *PURE_LAYERS):
            continue
        came_from: dict[str, str] = {}
        frontier, seen = [source], {source}
        while frontier:
            node = frontier.pop(0)
            for target in graph.get(node, ()):
                if target not in seen:
                    seen.add(target)
                    came_from[target] = node
                    frontier.append(target)
        for library in IO_LIBRARIES:
            if library in came_from:
                chain = [library]
                while chain[-1] != source:
                    chain.append(came_from[chain[-1]])
                yield source, library, chain[::-1]


def _where(imp: Import, repo: Path) -> str:
    path = imp.path.relative_to(repo) if imp.path.is_relative_to(repo) else imp.path
    return f"{path}:{imp.line}" + ("" if imp.kind == "module" else f" ({imp.kind})")


def check_tree(roots: dict[str, Path], repo: Path = REPO) -> list[Violation]:
    return check(read_imports(find_modules(roots)), repo)


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
