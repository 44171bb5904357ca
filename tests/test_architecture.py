"""The house rules of imports, read from the source with ``ast`` (issue #22).

Every ``import`` and ``from ... import`` counts: at module level, inside functions, and under
``if TYPE_CHECKING:`` (a type-only circle is still a circle a reader has to untangle).
``from pkg import name`` counts as an import of ``pkg`` (its ``__init__.py`` runs), and of
``pkg.name`` too when that is a module; ``from a.b import name`` does not count ``a``.

Rules:
* no import circle among the modules of ``protocol``, ``broker``, ``client``, ``spark_connector``;
* ``protocol`` is sans-I/O: it imports none of the other packages, and neither it nor
  ``broker/storage`` imports an event loop (asyncio, uvloop, aiohttp);
* ``broker`` and ``client`` never import each other.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("protocol", "broker", "client", "spark_connector")
EVENT_LOOPS = ("asyncio", "uvloop", "aiohttp")
Graph = dict[str, set[str]]


@dataclass(frozen=True)
class Edge:
    source: str
    target: str  # a module of PACKAGES, or the top-level name of anything else
    line: int


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def discover(root: Path) -> dict[str, Path]:
    return {
        module_name(path, root): path
        for package in PACKAGES
        for path in sorted((root / package).rglob("*.py"))
    }


def _absolute(module: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute module name ``from <node.module> import`` refers to in ``module``."""
    if not node.level:
        return node.module or ""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _resolve(name: str, modules: Iterable[str]) -> str:
    """The longest known module ``name`` is in, or its top-level name if it is not ours."""
    known = set(modules)
    candidate = name
    while candidate and candidate not in known:
        candidate = candidate.rpartition(".")[0]
    return candidate or name.split(".")[0]


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> Iterator[Edge]:
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Edge(module, _resolve(alias.name, modules), node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, path, node)
            # ``from pkg import sub`` runs ``pkg/__init__.py`` and then ``sub``: both count.
            yield Edge(module, _resolve(base, modules), node.lineno)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                if submodule in modules:
                    yield Edge(module, submodule, node.lineno)


def all_edges(root: Path) -> list[Edge]:
    modules = discover(root)
    return [
        edge
        for module, path in modules.items()
        for edge in imports_of(module, path, modules)
        if edge.target != module
    ]


def graph_of(edges: Iterable[Edge], modules: Iterable[str]) -> Graph:
    known = set(modules)
    graph: Graph = {module: set() for module in known}
    for edge in edges:
        if edge.target in known:
            graph[edge.source].add(edge.target)
    return graph


def circles(graph: Graph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def in_package(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def violations(edges: Iterable[Edge]) -> list[str]:
    """Every import that breaks a layering rule (module docstring), as ``source:line -> target``."""
    found: list[str] = []
    for edge in edges:
        source, target = edge.source, edge.target
        where = f"{source}:{edge.line} -> {target}"
        if in_package(source, "protocol") and any(
            in_package(target, other) for other in PACKAGES if other != "protocol"
        ):
            found.append(f"protocol imports a higher package: {where}")
        pure = in_package(source, "protocol") or in_package(source, "broker.storage")
        if pure and target.split(".")[0] in EVENT_LOOPS:
            found.append(f"sans-I/O module imports an event loop: {where}")
        for one, other in (("broker", "client"), ("client", "broker")):
            if in_package(source, one) and in_package(target, other):
                found.append(f"{one} imports {other}: {where}")
    # One line may import a package and its submodule: report each rule once per line.
    return list(dict.fromkeys(_per_line(v) for v in found))


def _per_line(violation: str) -> str:
    """``rule: source:line -> target`` without the target (one line, one report)."""
    return violation.rpartition(" -> ")[0]


# --------------------------------------------------------------------------- the project


@pytest.fixture(scope="module")
def project_edges() -> list[Edge]:
    return all_edges(REPO)


def test_no_import_circle(project_edges: list[Edge]) -> None:
    assert circles(graph_of(project_edges, discover(REPO))) == []


def test_layering(project_edges: list[Edge]) -> None:
    assert violations(project_edges) == []


def test_the_walk_sees_type_only_and_function_level_imports(project_edges: list[Edge]) -> None:
    """Guards the guard: imports it must see are seen (one of each kind the rules rely on)."""
    targets = {(e.source, e.target) for e in project_edges}
    # ``from broker.service import BrokerService`` under TYPE_CHECKING in the web app.
    assert ("broker.web", "broker.service") in targets
    # ``from broker.web import start_web_server`` inside ``Broker.start``.
    assert ("broker.server", "broker.web") in targets
    assert ("protocol.framing", "protocol._pb.PulsarApi_pb2") in targets


# --------------------------------------------------------------------------- the checker


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for package in PACKAGES:
        (root / package).mkdir(exist_ok=True)
        (root / package / "__init__.py").touch()


def test_checker_finds_a_type_only_circle(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "broker/a.py": "from broker.b import B\n",
            "broker/b.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from broker.a import A\n"
            ),
            "broker/c.py": "def f():\n    from . import a\n",
        },
    )
    edges = all_edges(tmp_path)
    assert circles(graph_of(edges, discover(tmp_path))) == [["broker.a", "broker.b"]]
    assert Edge("broker.c", "broker.a", 2) in edges  # relative, inside a function


def test_checker_finds_a_circle_through_a_package_init(tmp_path: Path) -> None:
    """``from broker.p import helpers`` in ``broker/p/q.py`` runs ``broker/p/__init__.py``,
    which imports ``q``: a circle even though ``helpers`` is a module of its own."""
    _write(
        tmp_path,
        {
            "broker/p/__init__.py": "from broker.p.q import Q\n",
            "broker/p/q.py": "from broker.p import helpers\n",
            "broker/p/helpers.py": "",
        },
    )
    circle = circles(graph_of(all_edges(tmp_path), discover(tmp_path)))
    assert circle == [["broker.p", "broker.p.q"]]


def test_checker_finds_each_layering_violation(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "protocol/x.py": "import asyncio\nfrom client.y import Y\n",
            "broker/storage/s.py": "from aiohttp import web\n",
            "client/y.py": "from broker import z\n",
            "broker/z.py": "import client.y\n",
        },
    )
    found = violations(all_edges(tmp_path))
    assert len(found) == 5
    assert any(v.startswith("protocol imports a higher package: protocol.x:2") for v in found)
    assert any(v.startswith("sans-I/O module imports an event loop: protocol.x:1") for v in found)
    assert any(
        v.startswith("sans-I/O module imports an event loop: broker.storage.s") for v in found
    )
    assert any(v.startswith("client imports broker") for v in found)
    assert any(v.startswith("broker imports client") for v in found)
