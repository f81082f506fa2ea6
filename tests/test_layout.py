"""The package's layout: every import keeps to the layer table in docs/architecture.md, no import
circle between its modules, and no module grown past ~600 lines (nor a script: one that grows past
it becomes a package with one module per section, as scripts/chaos/).

Read from the source with ``ast`` (nothing is imported), so the test also sees the
imports inside functions, which a circle can hide behind.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

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


# The layer table: docs/architecture.md says which room may import which, and this reads it.

ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"
PUBLIC = "console_bridge"
ROOMS_HEADER = "| floor | room | package entries | what it holds |"
ARROWS_HEADER = "| from | to | what crosses | why |"
FACE_API_HEADER = "| face | module | names | why |"
FIX = "docs/architecture.md"


class Imported(NamedTuple):
    """One name one module imports: ``where`` is the file and line a message names."""

    source: str
    target: str
    name: str
    where: str


@dataclass(frozen=True)
class Layers:
    """The layer table: rooms on floors, the arrows across a floor or upward, the faces' internal API.

    A room may import any room on a lower floor; an arrow across a floor or upward needs a row of its
    own. The top floor holds the faces: they import the public API (``console_bridge``) and, besides
    it, only the internal names their rows list.
    """

    floors: dict[str, int]
    entries: dict[str, str]
    arrows: dict[tuple[str, str], str]
    face_api: dict[tuple[str, str], frozenset[str]]

    @property
    def faces(self) -> set[str]:
        top = max(self.floors.values())
        return {room for room, floor in self.floors.items() if floor == top}

    def room(self, module: str) -> str | None:
        """The room a package module lives in (``console_bridge.cli._run`` -> ``cli``)."""
        parts = module.split(".")
        return self.entries.get(parts[1] if len(parts) > 1 else "__init__")


def _table(text: str, header: str) -> list[list[str]]:
    """The rows of the Markdown table under ``header``, each a list of its cells."""
    lines = text.splitlines()
    assert header in lines, f"{FIX} has no table headed {header!r}"
    rows = []
    for line in lines[lines.index(header) + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def _ticked(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def _internal(module: str) -> str:
    """``_vetting._profiles`` as the table writes it -> ``console_bridge._vetting._profiles``."""
    return f"{PUBLIC}.{module}" if module != PUBLIC else module


def read_layers(text: str) -> Layers:
    floors: dict[str, int] = {}
    entries: dict[str, str] = {}
    arrows: dict[tuple[str, str], str] = {}
    face_api: dict[tuple[str, str], frozenset[str]] = {}
    for floor, room, held, _ in _table(text, ROOMS_HEADER):
        (name,) = _ticked(room)
        floors[name] = int(floor)
        for entry in _ticked(held):
            entries[entry.removesuffix("/").removesuffix(".py")] = name
    for source, target, _, why in _table(text, ARROWS_HEADER):
        ((source_room,), (target_room,)) = _ticked(source), _ticked(target)
        arrows[(source_room, target_room)] = why
    for face, module, names, _ in _table(text, FACE_API_HEADER):
        ((face_room,), (name,)) = _ticked(face), _ticked(module)
        key = (face_room, _internal(name))
        face_api[key] = face_api.get(key, frozenset()) | frozenset(_ticked(names))
    return Layers(floors, entries, arrows, face_api)


def check_layers(imports: Iterable[Imported], layers: Layers) -> list[str]:
    """What breaks the table: an import it does not allow, and a row no import needs any more."""
    problems: list[str] = []
    used_arrows: set[tuple[str, str]] = set()
    used_api: set[tuple[str, str, str]] = set()
    for imported in imports:
        source, target = layers.room(imported.source), layers.room(imported.target)
        for module, room in ((imported.source, source), (imported.target, target)):
            if room is None:
                problems.append(f"{imported.where}: {module} is in no room: add it to the rooms in {FIX}")
        if source is None or target is None or source == target:
            continue
        what = f"{imported.where}: `{source}` imports {imported.name} from {imported.target}"
        if source in layers.faces:
            allowed = layers.face_api.get((source, imported.target), frozenset())
            if target != PUBLIC and imported.name not in allowed:
                problems.append(
                    f"{what}, an internal: import it from {PUBLIC} (the public API), or add it to "
                    f"`{source}`'s internal API in {FIX} with the reason"
                )
            used_api.add((source, imported.target, imported.name))
        elif layers.floors[target] >= layers.floors[source]:
            if (source, target) in layers.arrows:
                used_arrows.add((source, target))
            else:
                way = "across its floor" if layers.floors[target] == layers.floors[source] else "upward"
                problems.append(
                    f"{what} (`{target}`), {way}: a room imports only from lower floors; move what it needs "
                    f"down, or list the arrow in {FIX} with the reason"
                )
    for source, target in sorted(set(layers.arrows) - used_arrows):
        problems.append(f"{FIX}: no import from `{source}` across or up to `{target}` any more: take the row off")
    for face, module in sorted(layers.face_api):
        for name in sorted(layers.face_api[(face, module)]):
            if (face, module, name) not in used_api:
                problems.append(f"{FIX}: `{face}` no longer imports {name} from {module}: take it off the table")
    return problems


def _package_imports() -> Iterator[Imported]:
    """Every name a package module imports from the package, as the layer check reads it."""
    modules = _modules()
    for name, node, base, imported, _ in _imported(modules):
        if base == PUBLIC or base.startswith(PUBLIC + "."):
            where = f"{modules[name].relative_to(PACKAGE.parent)}:{node.lineno}"
            yield Imported(name, base, imported, where)


def test_every_import_keeps_to_the_layer_table() -> None:
    layers = read_layers(ARCHITECTURE.read_text(encoding="utf-8"))
    assert {"cli", "jupyter", "adapters", "ray"} <= layers.faces  # the table reads
    problems = check_layers(_package_imports(), layers)
    assert not problems, "\n".join(problems)


SMALL = Layers(
    floors={"face": 2, PUBLIC: 1, "_room": 1, "_low": 0},
    entries={"face": "face", "__init__": PUBLIC, "_room": "_room", "_low": "_low"},
    arrows={},
    face_api={("face", "console_bridge._room._a"): frozenset({"Known"})},
)


def test_the_layer_check_finds_a_face_reaching_an_internal() -> None:
    known = Imported("console_bridge.face._x", "console_bridge._room._a", "Known", "face/_x.py:3")
    public = Imported("console_bridge.face._x", PUBLIC, "Console", "face/_x.py:4")
    new = Imported("console_bridge.face._y", "console_bridge._room._a", "Other", "face/_y.py:7")
    assert check_layers([known, public], SMALL) == []
    (problem,) = check_layers([known, public, new], SMALL)
    assert problem.startswith("face/_y.py:7: `face` imports Other from console_bridge._room._a, an internal")
    assert "import it from console_bridge (the public API), or add it" in problem


def test_the_layer_check_finds_an_arrow_up_or_across() -> None:
    down = Imported("console_bridge._room._a", "console_bridge._low", "x", "_room/_a.py:1")
    up = Imported("console_bridge._low", "console_bridge._room._a", "y", "_low.py:2")
    across = Imported("console_bridge._room._a", PUBLIC, "__version__", "_room/_a.py:9")
    known = Imported("console_bridge.face._x", "console_bridge._room._a", "Known", "face/_x.py:3")
    problems = check_layers([down, up, across, known], SMALL)
    assert [problem.split(",")[0] for problem in problems] == [
        "_low.py:2: `_low` imports y from console_bridge._room._a (`_room`)",
        "_room/_a.py:9: `_room` imports __version__ from console_bridge (`console_bridge`)",
    ]
    assert ["upward" in problems[0], "across its floor" in problems[1]] == [True, True]
    listed = Layers(SMALL.floors, SMALL.entries, {("_low", "_room"): "why"}, SMALL.face_api)
    assert check_layers([down, up, known], listed) == []


def test_the_layer_check_finds_stale_rows_and_homeless_modules() -> None:
    listed = Layers(SMALL.floors, SMALL.entries, {("_low", "_room"): "why"}, SMALL.face_api)
    homeless = Imported("console_bridge._new", "console_bridge._low", "x", "_new.py:1")
    assert check_layers([homeless], listed) == [
        "_new.py:1: console_bridge._new is in no room: add it to the rooms in docs/architecture.md",
        "docs/architecture.md: no import from `_low` across or up to `_room` any more: take the row off",
        "docs/architecture.md: `face` no longer imports Known from console_bridge._room._a: take it off the table",
    ]


@dataclass(frozen=True)
class House:
    """The house in numbers (issue 33's closing note).

    An arrow is one room importing another, however many modules do it (a face's arrows to other
    faces are in its internal API, not across). ``depth`` is the longest
    chain of rooms along arrows that do not go up: the floors the code has, whatever the table says.
    Lines are the ``.py`` files' lines, as the size check counts them.
    """

    rooms: int
    floors: int
    arrows: set[tuple[str, str]]
    across: set[tuple[str, str]]
    upward: set[tuple[str, str]]
    depth: int
    lines: dict[str, int]
    face_api: dict[str, set[tuple[str, str]]]

    def report(self) -> str:
        largest = max(self.lines, key=lambda room: self.lines[room])
        total = sum(self.lines.values())
        steps = {room: {b for a, b in self.arrows if a == room} for room in self.lines}
        return "\n".join(
            [
                f"rooms: {self.rooms}, floors: {self.floors} (depth along the arrows: {self.depth} rooms)",
                f"arrows: {len(self.arrows)}, across a floor: {len(self.across)}, upward: {len(self.upward)}",
                *(f"  upward: {a} -> {b}" for a, b in sorted(self.upward)),
                *(f"  across: {a} -> {b}" for a, b in sorted(self.across)),
                *(f"  rooms importing each other: {', '.join(rooms)}" for rooms in _cycles(steps)),
                f"largest room: {largest}, {self.lines[largest]} of {total} lines ({self.lines[largest] / total:.0%})",
                *(
                    f"  {face}: {len(names)} internal names from {len({module for module, _ in names})} modules"
                    for face, names in sorted(self.face_api.items())
                ),
            ]
        )


def house() -> House:
    """The house as the layer table and the imports draw it; ``python -m tests.test_layout`` prints it."""
    layers = read_layers(ARCHITECTURE.read_text(encoding="utf-8"))
    floor = layers.floors
    arrows: set[tuple[str, str]] = set()
    face_api: dict[str, set[tuple[str, str]]] = {face: set() for face in layers.faces}
    for imported in _package_imports():
        source, target = layers.room(imported.source), layers.room(imported.target)
        if source is None or target is None or source == target:
            continue
        arrows.add((source, target))
        if source in layers.faces and target != PUBLIC:
            face_api[source].add((imported.target, imported.name))
    lines = dict.fromkeys(floor, 0)
    for name, path in _modules().items():
        room = layers.room(name) or "(in no room)"
        lines[room] = lines.get(room, 0) + len(path.read_text(encoding="utf-8").splitlines())
    depth: dict[str, int] = {}

    def chain(room: str) -> int:
        if room not in depth:
            depth[room] = 1  # (a circle across a floor counts once)
            below = [b for a, b in arrows if a == room and floor[b] <= floor[a]]
            depth[room] = 1 + max((chain(other) for other in below), default=0)
        return depth[room]

    return House(
        rooms=len(floor),
        floors=len(set(floor.values())),
        arrows=arrows,
        across={(a, b) for a, b in arrows if floor[a] == floor[b] and a not in layers.faces},
        upward={(a, b) for a, b in arrows if floor[b] > floor[a]},
        depth=max(chain(room) for room in floor),
        lines=lines,
        face_api=face_api,
    )


def test_the_house_counts_the_rows_of_the_table() -> None:
    numbers = house()
    assert numbers.across | numbers.upward == set(read_layers(ARCHITECTURE.read_text(encoding="utf-8")).arrows)
    assert numbers.rooms == len(numbers.lines) > 0 and numbers.depth <= numbers.rooms


if __name__ == "__main__":
    print(house().report())
