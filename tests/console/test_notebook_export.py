"""A session exported as a Jupyter notebook: cells in order, with language, outputs, images and failures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from console_bridge import AsyncConsole, Busy, NotAllowed, Recordings

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leaks")]

PLOT = """
import matplotlib.pyplot as plt
from IPython.display import HTML, display
print("drawing")
display(HTML("<b>bold</b>"))
plt.plot([1, 2, 3])
41 + 1
"""


async def test_a_session_exports_as_a_notebook_that_validates(workspace, recordings, tmp_path):
    async with AsyncConsole(workspace, recordings_dir=recordings) as console:
        await console.run(python="import warnings\nx = 21\nprint('x is', x)\nwarnings.warn('careful')")
        await console.run(sql="select 42 as answer")
        await console.run(python=PLOT)
        await console.run(python="raise ValueError('bad value')")
        recording = console.recording
        assert recording is not None
    path = Recordings(recordings).export(recording.run_id, tmp_path / "out", format="ipynb")
    assert (path.stat().st_mode & 0o777) == 0o600  # private, as the recording store is
    assert path == tmp_path / "out" / f"{recording.run_id}.ipynb"
    document = nbformat.read(path, as_version=4)
    nbformat.validate(document)  # raises when invalid
    cells = [cell for cell in document.cells if cell.cell_type == "code"][1:]  # after %load_ext
    assert [cell.metadata["console_bridge"]["language"] for cell in cells] == ["python", "sql", "python", "python"]
    assert [cell.source.splitlines()[0] for cell in cells] == ["%%console", "%%console sql", "%%console", "%%console"]
    assert [cell.execution_count for cell in cells] == [1, 2, 3, 4]  # the probe cell is not the user's
    first, sql, plot, failed = (cell.outputs for cell in cells)
    assert [(o.output_type, o.get("name")) for o in first] == [("stream", "stdout"), ("stream", "stderr")]
    assert first[0].text == "x is 21\n" and "careful" in first[1].text
    assert sql[0].output_type == "execute_result" and "<th>answer</th>" in sql[0].data["text/html"]
    kinds = [o.output_type for o in plot]
    assert kinds == ["stream", "display_data", "execute_result", "display_data"], kinds
    assert plot[1].data["text/html"] == "<b>bold</b>" and plot[2].data["text/plain"] == "42"
    assert plot[3].data["image/png"]  # base64, as Jupyter keeps it
    error = failed[-1]
    assert error.output_type == "error" and (error.ename, error.evalue) == ("ValueError", "bad value")
    assert cells[3].metadata["console_bridge"]["error"]["name"] == "ValueError"
    # the CLI writes the same notebook
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "console-bridge"), "recordings", "--root", str(recordings), "export",
         "--format", "ipynb", recording.run_id, str(tmp_path / "cli.ipynb")],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "cli.ipynb").read_text())["cells"] == json.loads(path.read_text())["cells"]
    # without the cell log (a recording made without console-bridge): rebuilt from the server's events
    (recordings / "sessions" / f"{recording.run_id}.console-bridge-cells.jsonl").unlink()
    bare = nbformat.read(Recordings(recordings).export(recording.run_id, tmp_path / "bare.ipynb", format="ipynb"), 4)
    nbformat.validate(bare)
    rebuilt = [cell for cell in bare.cells if cell.cell_type == "code"][1:]
    assert [cell.source for cell in rebuilt] == [cell.source for cell in cells]  # no probe cell
    assert rebuilt[0].outputs[0].text == "x is 21\n" and "careful" in rebuilt[0].outputs[1].text
    # (the figure went through IPython's display formatter: the bridge's cell log keeps it; the server's own
    # events have the cell's text only, neither the figure's image nor a line for it)
    texts = "".join(str(out.get("text", "")) for out in rebuilt[2].outputs)
    assert texts.startswith("drawing\n") and "42" in texts and "Figure" not in texts, rebuilt[2].outputs
    assert "Rebuilt from the server's recording" in bare.cells[0].source


def test_a_recording_without_a_cell_log_or_events_is_refused(tmp_path: Path) -> None:
    run_id = "20261201T000000.000000000Z-0000000001"
    (tmp_path / "sessions" / run_id).mkdir(parents=True)
    with pytest.raises(NotAllowed, match="neither a cell log nor the server's events"):
        Recordings(tmp_path).export(run_id, tmp_path / "x.ipynb", format="ipynb")


async def test_a_submission_refused_as_busy_keeps_the_running_cells_record(workspace, recordings, tmp_path):
    async with AsyncConsole(workspace, recordings_dir=recordings) as console:
        first = await console.send(python="import time\ntime.sleep(0.5)\nprint('slept')", timeout_ms=0)
        assert first.running
        with pytest.raises(Busy):
            await console.send(python="print('refused')", timeout_ms=0)
        result = await console.poll()
        while result.running:
            result = await console.poll()
        assert result.usage is not None and result.usage.wall_seconds >= 0.5  # measured from the cell's start
        recording = console.recording
        assert recording is not None
    document = nbformat.read(Recordings(recordings).export(recording.run_id, tmp_path, format="ipynb"), 4)
    [cell] = [cell for cell in document.cells if cell.cell_type == "code"][1:]
    assert "time.sleep(0.5)" in cell.source and cell.outputs[0].text == "slept\n"


async def test_an_exported_notebook_keeps_every_output_whole(workspace, recordings, tmp_path):
    """Issue 47: a cell of 5,000 lines became 954 in the exported notebook (the polls' 8 KB windows were
    logged, not the whole output the raw log has)."""
    async with AsyncConsole(workspace, recordings_dir=recordings) as console:
        result = await console.run(python="for i in range(5000): print(f'line {i:05d} ' + 'x' * 40)")
        assert len(result.text.splitlines()) == 5000
        recording = console.recording
    assert recording is not None
    path = Recordings(recordings).export(recording.run_id, tmp_path / "whole.ipynb", format="ipynb")
    cells = [cell for cell in nbformat.read(path, 4).cells if cell.cell_type == "code"]
    text = "".join(output.text for output in cells[-1].outputs if output.output_type == "stream")
    assert text.splitlines() == [f"line {i:05d} " + "x" * 40 for i in range(5000)]
