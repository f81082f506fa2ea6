"""The package's layout: no import circle between its modules, and no module grown past ~600 lines
(nor a script: one that grows past it becomes a package with one module per section, as scripts/chaos/).

Read from the source with ``ast`` (nothing is imported), so the test also sees the
imports inside functions, which a circle can hide behind.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "console_bridge"
MAX_LINES = 600
#: Modules still over MAX_LINES, and why. Take a module off when it is split; add none.
OVER_MAX: dict[str, str] = {}

SCRIPTS = PACKAGE.parent / "scripts"
#: Scripts still over MAX_LINES, and why. Take one off when it is a package; add none.
SCRIPTS_OVER_MAX: dict[str, str] = {}


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imports(tree: ast.AST, in_function: bool = False) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import that can run, with whether it runs inside a function (``if TYPE_CHECKING:`` never runs)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                yield from _imports(ast.Module(body=[child], type_ignores=[]), in_function)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node, in_function
        yield from _imports(node, in_function or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef))


def _imported(modules: dict[str, Path]) -> Iterator[tuple[str, ast.Import | ast.ImportFrom, str, str, bool]]:
    """Every name a package module imports: (module, node, from where, the name, inside a function).

    ``from where`` is absolute (relative imports resolved); ``import a.b`` is ``("a.b", "*")``.
    """
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node, in_function in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield name, node, alias.name, "*", in_function
                continue
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*up, base] if base else up)
            for alias in node.names:
                yield name, node, base, alias.name, in_function


def _graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports.

    ``from pkg import sub`` is an edge to ``pkg.sub`` when that is a module. A module
    importing, inside a function, from a package it lives in (``from console_bridge
    import __version__``) is no edge: by the time a function runs its package is
    initialised, and a package's ``__init__`` re-exporting its own modules is its face.
    """
    modules = _modules()

    def owner(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, _, base, imported, in_function in _imported(modules):
        target = f"{base}.{imported}" if f"{base}.{imported}" in modules else base
        resolved = owner(target)
        if resolved is None or resolved == name:
            continue
        if in_function and (name.startswith(resolved + ".") or resolved.startswith(name + ".")):
            continue  # a function reaching its own package's face, or a package's face its module
        graph[name].add(resolved)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
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

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_circle_among_package_modules() -> None:
    graph = _graph()
    assert "console_bridge._results" in graph["console_bridge._governance._gate"]  # the graph sees real edges
    assert _cycles(graph) == []


def test_the_circle_finder_finds_a_circle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_errors_need_results_only_for_type_checking() -> None:
    """``CellError`` carries a ``CellResult``: the name is for the type checker, the import never runs."""
    graph = _graph()
    assert "console_bridge._results" not in graph["console_bridge._errors"]
    assert "console_bridge._errors" in graph["console_bridge._results"]


def _sized() -> list[object]:
    """Every package module and every script, with the list of known exceptions and the fix to name."""
    return [
        pytest.param(path, root, over, fix, id=str(path.relative_to(root.parent)))
        for root, over, fix in (
            (PACKAGE, OVER_MAX, "split it by what each part guarantees"),
            (SCRIPTS, SCRIPTS_OVER_MAX, "make it a package, one module per section"),
        )
        for path in sorted(root.rglob("*.py"))
    ]


@pytest.mark.parametrize(("path", "root", "over", "fix"), _sized())
def test_no_module_over_600_lines(path: Path, root: Path, over: dict[str, str], fix: str) -> None:
    relative, shown = str(path.relative_to(root)), path.relative_to(root.parent)
    lines = len(path.read_text(encoding="utf-8").splitlines())
    if relative in over:
        pytest.skip(f"{shown}: {lines} lines, {over[relative]}")
    assert lines <= MAX_LINES, f"{shown} has {lines} lines: {fix}"
