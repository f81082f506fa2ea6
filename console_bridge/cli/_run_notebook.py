"""``console-bridge run x.ipynb``: a notebook's code cells as the run's cells, and the executed notebook.

Each code cell is one cell of the session, in order: Python, or the language its ``%%console``
line names (``%%console sql``, ``%%console r``: how ``Recordings().export(format="ipynb")``
and the magics mark them; the options on that line are the run's to set, not the notebook's, and
are ignored), or ``%%sql`` and ``%%R`` as the sandboxed kernel reads them. ``%load_ext console_bridge``
lines are skipped; other magics and ``!`` lines run inside the sandbox, through its IPython.
``-p NAME VALUE`` sets papermill-style
parameters: a cell tagged ``injected-parameters`` is added after the one tagged ``parameters``
(first, when none is), each value a Python literal when it parses as one, else a string. After
the session the notebook is written to ``--artifacts`` with each executed cell's outputs (nbformat's
data model; the outputs as the session's cell log has them), a cell that did not run left empty.
"""

from __future__ import annotations

import ast
import copy
import keyword
from pathlib import Path
from typing import Any

import click
import nbformat as _nbformat

from console_bridge._cells._notebook import nb_outputs
from console_bridge.cli._run_sources import FileRun, Source, load_sources

__all__ = ["NOTEBOOK_SUFFIX", "executed_notebooks", "load_all", "notebook_sources"]

nbformat: Any = _nbformat  # (untyped)

NOTEBOOK_SUFFIX = ".ipynb"
_LANGUAGES = ("python", "sql", "r")
_SKIPPED_MAGICS = ("%load_ext", "%reload_ext")
#: cells in another language, as the sandboxed kernel marks them
_LANGUAGE_MAGICS = {"%%sql": "sql", "%%r": "r"}


def _cell_code(source: str, default: str, where: str) -> tuple[str, str] | None:
    """(language, code) of a code cell, or None for a cell with nothing to run. Magics and ``!`` lines
    stay in the code: the sandbox's IPython runs them (issue 47), as the sandboxed kernel does."""
    lines = source.splitlines()
    language = default
    first = lines[0].split() if lines else []
    if first and first[0] == "%%console":
        language = first[1] if len(first) > 1 and first[1] in _LANGUAGES else "python"
        lines = ["", *lines[1:]]  # (a blank line for each line left out: tracebacks keep the cell's numbers)
    elif first and first[0].lower() in _LANGUAGE_MAGICS:
        language = _LANGUAGE_MAGICS[first[0].lower()]
        lines = ["", *lines[1:]]
    kept = ["" if line.strip().startswith(_SKIPPED_MAGICS) and "console_bridge" in line else line for line in lines]
    code = "\n".join(kept)
    return (language, code + "\n") if code.strip() else None


def _literal(value: str) -> str:
    try:
        return repr(ast.literal_eval(value))
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return repr(value)


def _parameters_cell(parameters: list[tuple[str, str]]) -> Any:
    for name, _value in parameters:
        if not name.isidentifier() or keyword.iskeyword(name):
            raise click.BadParameter(f"{name!r} is not a Python name", param_hint="-p")
    source = "# Parameters\n" + "".join(f"{name} = {_literal(value)}\n" for name, value in parameters)
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["tags"] = ["injected-parameters"]
    return cell


def notebook_sources(path: Path, name: str, parameters: list[tuple[str, str]]) -> tuple[Any, list[Source]]:
    """The notebook (with the parameters cell injected) and its code cells as sources."""
    try:
        notebook = nbformat.read(path, as_version=4)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise click.BadParameter(f"{name!r} is not a notebook nbformat can read ({exc})", param_hint="FILE") from None
    default = "r" if str(notebook.metadata.get("kernelspec", {}).get("language", "")).lower() == "r" else "python"
    if parameters:
        tagged = [
            i for i, cell in enumerate(notebook.cells) if "parameters" in cell.get("metadata", {}).get("tags", [])
        ]
        notebook.cells.insert(tagged[0] + 1 if tagged else 0, _parameters_cell(parameters))
    sources: list[Source] = []
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "code":
            continue
        found = _cell_code(cell.source, default, f"{name} cell {index + 1}")
        if found is not None:
            language, code = found
            sources.append(Source(f"{name}[{index + 1}]", str(path.absolute()), language, code, notebook_cell=index))
    return notebook, sources


def executed_notebooks(notebooks: dict[str, Any], runs: list[FileRun]) -> list[tuple[str, bytes]]:
    """Each notebook with the outputs of its cells that ran, as (file name, bytes) for --artifacts."""
    written: list[tuple[str, bytes]] = []
    for name, original in notebooks.items():
        notebook = copy.deepcopy(original)
        count = 0
        for cell in notebook.cells:
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = [], None
        for run in runs:
            index = run.source.notebook_cell
            if run.source.path != name or index is None or run.result is None:
                continue
            count += 1
            cell = notebook.cells[index]
            cell.execution_count = count
            cell.outputs = [nbformat.from_dict(output) for output in nb_outputs(run.result, count)]
        nbformat.validate(notebook)
        written.append((Path(name).name, nbformat.writes(notebook).encode("utf-8")))
    return written


def load_all(
    files: tuple[str, ...], language: str | None, parameters: list[tuple[str, str]]
) -> tuple[list[Source], dict[str, Any]]:
    """Every file's sources in order (a notebook's code cells one each), and the notebooks read, by
    absolute path."""
    if files.count("-") > 1:
        raise click.UsageError("'-' (stdin) can be given only once")
    if parameters and not any(name.lower().endswith(NOTEBOOK_SUFFIX) for name in files):
        raise click.UsageError("-p sets a notebook's parameters; no .ipynb file was given")
    sources: list[Source] = []
    notebooks: dict[str, Any] = {}
    for name in files:
        if name != "-" and name.lower().endswith(NOTEBOOK_SUFFIX):
            notebook, cells = notebook_sources(Path(name), name, parameters)
            notebooks[str(Path(name).absolute())] = notebook
            sources.extend(cells)
        else:
            sources.extend(load_sources((name,), language))
    return sources, notebooks
