"""No import cycles among the project's modules, read from their source with `ast`.

A cycle makes the import order matter and hides which module is the lower layer; import-linter's
layer contracts (pyproject.toml) keep the layers we named, this test catches the ones we did not.
Every import counts: module level, inside a function, and under `if TYPE_CHECKING:`. A cycle we
know of and have not yet removed sits in `KNOWN` as the one import that closes it; the test fails
when that import no longer closes a cycle, so the list only shrinks.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping, Set
from dataclasses import dataclass

from tests.conftest import ROOT

PACKAGES = ("shared", "services", "cli", "benchmarks")


@dataclass(frozen=True)
class Known:
    """One import that closes a known cycle: why it is there and what removes it."""

    importer: str
    imported: str
    why: str
    removed_by: str


KNOWN: tuple[Known, ...] = ()


def _modules() -> dict[str, tuple[ast.Module, bool]]:
    """Every module of the project's packages by dotted name (a package by its own name), with
    whether it is a package (relative imports resolve against it then)."""
    found: dict[str, tuple[ast.Module, bool]] = {}
    for package in PACKAGES:
        base = ROOT / package
        if not (base / "__init__.py").exists():
            continue
        for path in sorted(base.rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            is_package = parts[-1] == "__init__"
            name = ".".join(parts[:-1] if is_package else parts)
            found[name] = (ast.parse(path.read_text(), filename=str(path)), is_package)
    return found


def imports_of(module: str, tree: ast.Module, known: Set[str], *, is_package: bool = False) -> set[str]:
    """The modules of `known` that `module` imports anywhere in its source: at module level, in
    a function, under `if TYPE_CHECKING:`. `from a import b` names `a.b` when that is a module,
    else `a`; `import a.b.c` names the longest of `a.b.c`, `a.b`, `a` that is known."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                name = alias.name
                while name and name not in known:
                    name = name.rpartition(".")[0]
                if name:
                    found.add(name)
        elif isinstance(node, ast.ImportFrom):
            source = node.module or ""
            if node.level:
                base = module if is_package else module.rpartition(".")[0]
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                source = f"{base}.{source}" if source else base
            for alias in node.names:
                if f"{source}.{alias.name}" in known:
                    found.add(f"{source}.{alias.name}")
                elif source in known:
                    found.add(source)
    found.discard(module)
    return found


def import_graph() -> dict[str, set[str]]:
    """Each project module and the project modules it imports."""
    modules = _modules()
    known = set(modules)
    return {name: imports_of(name, tree, known, is_package=package) for name, (tree, package) in modules.items()}


def packages(graph: Mapping[str, Set[str]]) -> dict[str, set[str]]:
    """The graph between packages (`shared.bus`, `shared.config`, `services.sim`: the first two
    parts of a name): two packages importing each other are a cycle even when no two of their
    modules are, and the layers of `shared` are kept between packages."""

    def package(name: str) -> str:
        return ".".join(name.split(".")[:2])

    out: dict[str, set[str]] = {}
    for name, targets in graph.items():
        out.setdefault(package(name), set()).update(package(t) for t in targets)
    for name, targets in out.items():
        targets.discard(name)
    return out


def _components(graph: Mapping[str, Set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
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
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _path(graph: Mapping[str, Set[str]], start: str, goal: str) -> list[str] | None:
    """A shortest import chain from `start` to `goal`, or None."""
    previous: dict[str, str] = {start: start}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for node in frontier:
            for child in sorted(graph[node]):
                if child in previous:
                    continue
                previous[child] = node
                if child == goal:
                    chain = [goal]
                    while chain[-1] != start:
                        chain.append(previous[chain[-1]])
                    return chain[::-1]
                following.append(child)
        frontier = following
    return None


def _cycle(graph: Mapping[str, Set[str]], component: list[str]) -> str:
    """One cycle through the component's first module, written as an import chain."""
    inside = {n: graph[n] & set(component) for n in component}
    head = component[0]
    for child in sorted(inside[head]):
        chain = _path(inside, child, head)
        if chain is not None:
            return " -> ".join([head, *chain])
    return " <-> ".join(component)


_SOURCE = """
from __future__ import annotations
import app.low.values
from typing import TYPE_CHECKING
from . import sibling
from .. import top
from ..other import thing
if TYPE_CHECKING:
    from app.high import service
def later():
    from app.low import rules
"""


def test_the_graph_sees_every_kind_of_import():
    """The graph is only as good as its reading: lazy and TYPE_CHECKING imports count, relative
    ones resolve, and a name imported from a module is an import of that module."""
    known = {"app", "app.low", "app.low.values", "app.low.rules", "app.low.sibling", "app.top", "app.other", "app.high"}
    tree = ast.parse(_SOURCE)
    assert imports_of("app.low.mod", tree, known) == {
        "app.low.values",
        "app.low.sibling",
        "app.top",
        "app.other",
        "app.high",
        "app.low.rules",
    }
    assert imports_of("app.low", tree, known, is_package=True) == {
        "app.low.values",
        "app.low.sibling",
        "app.top",
        "app.other",
        "app.high",
        "app.low.rules",
    }


def test_a_cycle_is_found_and_named():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e2"}, "e2": {"e"}}
    assert _components(graph) == [["a", "b", "c"], ["e", "e2"]]
    assert _cycle(graph, ["a", "b", "c"]) == "a -> b -> c -> a"


def _without_known(graph: Mapping[str, Set[str]]) -> dict[str, set[str]]:
    out = {name: set(targets) for name, targets in graph.items()}
    for known in KNOWN:
        out.get(known.importer, set()).discard(known.imported)
    return out


def test_no_import_cycles_beyond_the_known_ones():
    graph = _without_known(import_graph())
    cycles = [_cycle(graph, c) for c in _components(graph)]
    assert not cycles, "import cycles between modules:\n" + "\n".join(cycles)


def test_no_import_cycles_between_packages():
    graph = packages(_without_known(import_graph()))
    cycles = [_cycle(graph, c) for c in _components(graph)]
    assert not cycles, "import cycles between packages:\n" + "\n".join(cycles)


def test_every_known_cycle_still_exists():
    """A known cycle that is gone leaves the list, so the list only shrinks."""
    graph = import_graph()
    gone = [
        f"{k.importer} -> {k.imported}"
        for k in KNOWN
        if k.imported not in graph.get(k.importer, set()) or _path(graph, k.imported, k.importer) is None
    ]
    assert not gone, "no longer a cycle, remove from KNOWN:\n" + "\n".join(gone)
