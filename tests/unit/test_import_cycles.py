"""No import cycle in ``novakit/`` is longer than a few modules (ARCHITECTURE.md, issue 30).

The graph is read from the source with ``ast``, so nothing is imported to build it:
an ``import`` or ``from ... import`` anywhere in a module (at the top or inside a
function, where the lazy imports that used to hide cycles live) is an edge from that
module to the module it names. ``from pkg import name`` points at ``pkg.name`` when that
is a module, else at ``pkg``. Importing ``a.b.c`` runs ``a/__init__`` and ``a/b/__init__``
first, so every module also has an edge to each package above it: a package whose ``__init__``
imports its own modules is a cycle with all of them (why every ``__init__`` here holds a docstring
and no imports of its own modules). Imports under ``if TYPE_CHECKING:`` never run and are not
edges. A cycle is a strongly connected component of that graph; each one longer than
``MAX_CYCLE`` fails the test, printed with the imports among its modules.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import novakit

MAX_CYCLE = 5
ROOT = Path(novakit.__file__).parent


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node of the tree except the bodies of ``if TYPE_CHECKING:``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def import_graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in ROOT.rglob("*.py")}
    modules = set(files)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in files.items():
        is_package = path.name == "__init__.py"
        package = name if is_package else name.rpartition(".")[0]
        for node in _runtime_nodes(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base_parts = package.split(".")
                    base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                    base = ".".join(base_parts + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    targets.append(full if full in modules else base)
            for target in targets:
                # ``import a.b.c`` of a name that is not a module of ours: its nearest module.
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
        parts = name.split(".")
        graph[name].update(
            ".".join(parts[:i]) for i in range(1, len(parts)) if ".".join(parts[:i]) in modules
        )
    return graph


def strongly_connected_components(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative (the graph is deep enough to hit the recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    components.append(sorted(component))
    return components


def _edges_inside(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """Each module of the cycle and which others of it it imports: the edges to cut among."""
    members = set(component)
    return [f"  {m} -> {', '.join(sorted(graph[m] & members))}" for m in component]


def test_no_import_cycle_is_longer_than_five_modules() -> None:
    graph = import_graph()
    too_long = [c for c in strongly_connected_components(graph) if len(c) > MAX_CYCLE]
    report = [f"{len(c)} modules:\n" + "\n".join(_edges_inside(graph, c)) for c in too_long]
    assert not too_long, f"import cycles longer than {MAX_CYCLE} modules:\n" + "\n".join(report)


def test_the_graph_sees_lazy_imports_and_not_type_checking_ones(tmp_path: Path) -> None:
    # The reader itself: a function-level import is an edge; a TYPE_CHECKING one is not.
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import novakit.db\n"
        "def f():\n    import novakit.policy\n"
    )
    names = {
        alias.name for node in _runtime_nodes(tree) if isinstance(node, ast.Import) for alias in node.names
    }
    assert names == {"novakit.policy"}
    graph = import_graph()
    assert "novakit.config" in graph["novakit.scheduler.filters.registry"]
    # and the packages above a module, whose __init__ runs before it
    assert {"novakit", "novakit.scheduler", "novakit.scheduler.filters"} <= graph[
        "novakit.scheduler.filters.base"
    ]
