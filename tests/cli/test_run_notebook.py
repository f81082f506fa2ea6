"""Issue 31, item 3: ``console-bridge run x.ipynb`` runs a notebook's code cells in one session and
writes the executed notebook to --artifacts (stopping at the first failure unless --allow-errors,
``-p NAME VALUE`` parameters papermill-style); a session exported with
``Recordings().export(format="ipynb")`` runs again this way to the same outputs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nbformat
import pytest

from console_bridge import Recordings
from tests.cli.conftest import Runner

pytestmark = [pytest.mark.console]


def _notebook(path: Path, *, fail: bool) -> Path:
    cells = [
        nbformat.v4.new_markdown_cell("# Sales"),
        nbformat.v4.new_code_cell("%load_ext console_bridge"),
        nbformat.v4.new_code_cell("n = 3\nlabel = 'base'", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell(
            "import pandas as pd\ndf = pd.DataFrame({'x': range(n), 'y': [i * i for i in range(n)]})\n"
            "print(label, len(df))\ndf"
        ),
        nbformat.v4.new_code_cell(
            "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
            "plt.plot(df.x, df.y)\nplt.show()"
        ),
        nbformat.v4.new_code_cell("%%console sql\nselect 40 + 2 as answer"),
    ]
    if fail:
        cells.append(nbformat.v4.new_code_cell("%%console\nx = 1\nraise ValueError('boom')"))
    cells.append(nbformat.v4.new_code_cell("print('last cell ran')"))
    notebook = nbformat.v4.new_notebook()
    notebook.cells = cells
    nbformat.write(notebook, path)
    return path


def _code_cells(path: Path) -> list[Any]:
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    return [cell for cell in notebook.cells if cell.cell_type == "code"]


def _texts(cell: Any) -> list[str]:
    out = []
    for output in cell.outputs:
        if output.output_type == "stream":
            out.append(f"{output.name}:{output.text}")
        elif output.output_type in ("execute_result", "display_data"):
            data = output.data
            out.append("image" if "image/png" in data else f"{output.output_type}:{data.get('text/plain')}")
        elif output.output_type == "error":
            out.append(f"error:{output.ename}")
    return out


def test_a_notebook_runs_to_its_first_failure_and_is_written_executed(cb: Runner, tmp_path: Path) -> None:
    _notebook(tmp_path / "sales.ipynb", fail=True)
    proc = cb(
        "run", "--recordings-dir", "recs", "--artifacts", "out", "-p", "n", "5", "-p", "label", "tuned", "sales.ipynb"
    )
    assert proc.returncode == 1, proc.stderr
    assert "sales.ipynb[8]: the code raised: ValueError: boom" in proc.stderr
    cells = _code_cells(tmp_path / "out" / "sales.ipynb")
    sources = [cell.source for cell in cells]
    assert sources[2] == "# Parameters\nn = 5\nlabel = 'tuned'\n"  # injected after the tagged cell
    assert cells[2].metadata["tags"] == ["injected-parameters"]
    texts = [_texts(cell) for cell in cells]
    assert texts[0] == [] and cells[0].execution_count is None  # %load_ext: nothing to run
    assert texts[3][0] == "stdout:tuned 5\n" and texts[3][1].startswith("execute_result:   x   y")
    assert texts[4] == ["image"]
    assert texts[5] == ["execute_result:answer\n------\n42"], texts[5]
    assert texts[6][-1] == "error:ValueError"
    assert texts[7] == [] and cells[7].execution_count is None  # stopped before it
    assert [cell.execution_count for cell in cells[1:7]] == [1, 2, 3, 4, 5, 6]
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["artifacts"]["notebooks"] == ["sales.ipynb"]
    assert [f["status"] for f in report["files"]][-2:] == ["error", "not run"]
    traceback = report["files"][-2]["failure"]["traceback"]
    assert 'File "sales.ipynb[8]", line 3\n' in traceback, traceback  # the cell, its own line numbers
    assert not any("mcp-console:python" in text for text in texts[6]), texts[6]


def test_allow_errors_runs_on_and_exits_0(cb: Runner, tmp_path: Path) -> None:
    _notebook(tmp_path / "sales.ipynb", fail=True)
    proc = cb("run", "--recordings-dir", "recs", "--artifacts", "out", "--allow-errors", "sales.ipynb")
    assert proc.returncode == 0, proc.stderr
    cells = _code_cells(tmp_path / "out" / "sales.ipynb")
    assert _texts(cells[-2])[-1] == "error:ValueError" and _texts(cells[-1]) == ["stdout:last cell ran\n"]


def test_an_exported_session_runs_again_to_the_same_outputs(cb: Runner, tmp_path: Path) -> None:
    _notebook(tmp_path / "sales.ipynb", fail=False)
    first = cb("run", "--recordings-dir", "recs", "--artifacts", "out", "sales.ipynb")
    assert first.returncode == 0, first.stderr
    run_id = json.loads((tmp_path / "out" / "report.json").read_text())["recording"]["run_id"]
    exported = Recordings(tmp_path / "recs").export(run_id, tmp_path / "exported.ipynb", format="ipynb")
    again = cb("run", "--recordings-dir", "recs", "--artifacts", "out2", str(exported))
    assert again.returncode == 0, again.stderr
    before = [_texts(cell) for cell in _code_cells(tmp_path / "out" / "sales.ipynb") if cell.execution_count]
    after = [_texts(cell) for cell in _code_cells(tmp_path / "out2" / "exported.ipynb") if cell.execution_count]
    assert after == before, (before, after)
    sources = [cell.source for cell in _code_cells(exported)]
    assert "%%console\nn = 3\nlabel = 'base'\n" in sources, sources  # no line added by the round trip


def test_a_notebook_runs_as_written_magics_and_shell_lines_inside_the_sandbox(cb: Runner, tmp_path: Path) -> None:
    """Issue 47: `%matplotlib inline`, `%timeit`, `!` lines and `%%bash` cells were refused (exit 2); the
    sandbox's IPython runs them now, and a trailing ';' hides a value as in Jupyter."""
    notebook = nbformat.v4.new_notebook()
    sources = [
        "%matplotlib inline\nimport matplotlib.pyplot as plt",
        "%timeit -n1 -r1 sum(range(5))",
        "!echo from-a-shell-line",
        "%%bash\necho from-bash",
        "plt.plot([1, 2]);",
        "x = 41\nx + 1;",
        "%%sql\nselect 42 as answer",
    ]
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in sources]
    nbformat.write(notebook, tmp_path / "x.ipynb")
    proc = cb("run", "--recordings-dir", "recs", "--artifacts", "out", "x.ipynb")
    assert proc.returncode == 0, proc.stderr
    texts = [_texts(cell) for cell in _code_cells(tmp_path / "out" / "x.ipynb")]
    assert texts[0] == [] and "per loop" in texts[1][0], texts
    assert texts[2][0].startswith("stdout:from-a-shell-line") and texts[3] == ["stdout:from-bash\n"], texts
    assert texts[4] == ["image"] and texts[5] == [], texts  # the figure shown, the ';'-hidden value not
    assert texts[6] == ["execute_result:answer\n------\n42"], texts
    (tmp_path / "x.py").write_text("print(1)\n")
    bad = cb("run", "-p", "n", "1", "x.py")
    assert bad.returncode == 2 and "-p sets a notebook's parameters" in bad.stderr
