"""A real notebook executed end to end with nbclient (what ``nbconvert --execute`` and "Run All" do)."""

from __future__ import annotations

import base64
import json
import os
import sys
from pathlib import Path

import nbformat
import psutil
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

pytestmark = pytest.mark.console


def _kernelspec(root: Path) -> KernelSpecManager:
    spec_dir = root / "kernels" / "console-bridge-nb"
    spec_dir.mkdir(parents=True)
    spec = {"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"], "language": "python"}
    (spec_dir / "kernel.json").write_text(json.dumps(spec), encoding="utf-8")
    return KernelSpecManager(kernel_dirs=[str(root / "kernels")], ensure_native_kernel=False)


def _notebook(workspace: Path, recordings: Path) -> nbformat.NotebookNode:
    options = f"--workspace {workspace} --recordings-dir {recordings}"
    cells = [
        "%load_ext console_bridge",
        "import os\nprint('kernel pid', os.getpid())",
        f"%%console {options}\nx = 41\nprint('x is set')",
        "%%console\nimport matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()",
        "%%console\nimport sys\nimport pandas as pd\nfrom IPython.display import HTML, display\n"
        "print('to stderr', file=sys.stderr)\ndisplay(HTML('<b>bold</b>'))\npd.DataFrame({'a': [1, 2]})",
        "%%console sql\nselect 42 as answer",
        "%%console\nimport os\nopen(os.environ['TMPDIR'] + '/out.csv', 'w').write('a,b\\n1,2\\n')",
        "%console_get out.csv",
        "%%console\nraise ValueError('the notebook stops here')",
        "%%console\nprint('never runs', x + 1)",
    ]
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    return nb


def test_a_failing_console_cell_stops_the_notebook_there(tmp_path: Path) -> None:
    workspace, recordings, tmp = tmp_path / "ws", tmp_path / "recs", tmp_path / "tmp"
    for folder in (workspace, recordings, tmp):
        folder.mkdir()
    nb = _notebook(workspace, recordings)
    env = dict(os.environ, TMPDIR=str(tmp), IPYTHONDIR=str(tmp_path / "ipython"), JUPYTER_PLATFORM_DIRS="1")
    km = KernelManager(kernel_name="console-bridge-nb", kernel_spec_manager=_kernelspec(tmp_path))
    client = NotebookClient(nb, km=km, timeout=120, resources={"metadata": {"path": str(workspace)}})
    kernel_pid: int | None = None
    tree: list[psutil.Process] = []
    try:
        with pytest.raises(CellExecutionError) as caught, client.setup_kernel(env=env):
            for index, cell in enumerate(nb.cells):
                client.execute_cell(cell, index)
                if index == 3:
                    kernel_pid = int(nb.cells[1].outputs[0]["text"].split()[-1])
                    tree = psutil.Process(kernel_pid).children(recursive=True)
    finally:
        if client.kc is not None:
            client.kc.stop_channels()
        if km.has_kernel:
            km.shutdown_kernel(now=False)  # what nbconvert does when the run ends
        km.cleanup_resources()
    assert "ValueError" in str(caught.value) and "CellError" in str(caught.value)
    outputs = [cell.get("outputs", []) for cell in nb.cells]
    assert any("x is set" in out.get("text", "") for out in outputs[2])
    pngs = [out["data"]["image/png"] for out in outputs[3] if "image/png" in out.get("data", {})]
    assert pngs and base64.b64decode(pngs[0]).startswith(b"\x89PNG")
    rich = outputs[4]
    assert [(out["output_type"], out.get("name")) for out in rich] == [
        ("stream", "stderr"),
        ("display_data", None),
        ("execute_result", None),
    ], [(out["output_type"], out.get("name"), str(out.get("text", ""))[:400]) for out in rich]
    assert rich[0]["text"] == "to stderr\n" and rich[1]["data"]["text/html"] == "<b>bold</b>"
    assert "<table" in rich[2]["data"]["text/html"] and "a" in rich[2]["data"]["text/plain"]
    [table] = outputs[5]  # a SQL result: an HTML table, as the cell's value
    assert table["output_type"] == "execute_result" and "<th>answer</th>" in table["data"]["text/html"]
    assert (workspace / "out.csv").read_text() == "a,b\n1,2\n"  # %console_get, under the read-only profile
    del outputs[5:8]
    errors = [out for out in outputs[5] if out["output_type"] == "error"]
    assert len(errors) == 1 and errors[0]["ename"] == "CellError"
    shown = [out for out in outputs[5] if out["output_type"] == "stream"]
    assert [out["name"] for out in shown] == ["stderr"]
    assert shown[0]["text"].count("Traceback (most recent call last)") == 1
    assert "----> 1 raise ValueError('the notebook stops here')\n" in shown[0]["text"]  # the cell's own line
    assert "_mcp_console" not in shown[0]["text"]
    assert outputs[6] == []  # the cell after the failure never ran
    # Nothing the kernel's session started survives the kernel's shutdown.
    assert kernel_pid is not None and tree
    _gone, alive = psutil.wait_procs(tree, timeout=10)
    assert alive == [], f"processes outlived the kernel: {alive}"
    assert not [p for p in tmp.iterdir() if p.name.startswith("console-bridge-")]
