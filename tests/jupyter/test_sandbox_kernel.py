"""The sandboxed kernel (issue 47): installed by `console-bridge kernel install`, found by name by
jupyter_client and nbclient; cells of Python, %%sql and %%R share one sandboxed session."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from tests.support.cli import cli_path

pytestmark = pytest.mark.console


@pytest.fixture(scope="module")
def kernel_prefix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    prefix = tmp_path_factory.mktemp("jupyter-prefix")
    done = subprocess.run(
        [cli_path(), "kernel", "install", "--prefix", str(prefix), "--name", "cb-test"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return prefix


def _env(prefix: Path) -> dict[str, str]:
    return {**os.environ, "JUPYTER_PATH": str(prefix / "share" / "jupyter")}


def test_install_list_and_remove(tmp_path: Path) -> None:
    env = {**os.environ, "JUPYTER_PATH": str(tmp_path / "share" / "jupyter")}

    def cb(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [cli_path(), "kernel", *args], capture_output=True, text=True, timeout=60, env=env, check=False
        )

    installed = cb("install", "--prefix", str(tmp_path), "--name", "cb-one", "--profile", "workspace")
    assert installed.returncode == 0, installed.stderr
    spec = json.loads((tmp_path / "share/jupyter/kernels/cb-one/kernel.json").read_text())
    assert spec["argv"][1:3] == ["-m", "console_bridge._kernel"] and spec["argv"][-2:] == ["--profile", "workspace"]
    listed = subprocess.run(
        [sys.executable, "-m", "jupyter_client.kernelspecapp", "list"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert "cb-one" in listed.stdout + cb("list").stdout
    bad = cb("install", "--prefix", str(tmp_path), "--name", "cb-two", "--processes", "lots")
    assert bad.returncode != 0 and "lots" in bad.stderr and not (tmp_path / "share/jupyter/kernels/cb-two").exists()
    assert cb("remove", "cb-one").returncode == 0 and "cb-one" not in cb("list").stdout
    refused = cb("remove", "python3")
    assert refused.returncode != 0 and "no console-bridge kernel is named 'python3'" in refused.stderr


def test_a_notebook_runs_in_the_sandboxed_kernel_by_name(
    kernel_prefix: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    monkeypatch.setenv("JUPYTER_PATH", str(kernel_prefix / "share" / "jupyter"))
    secret = tmp_path / "written-by-a-cell"
    canary = Path.home() / f".console-bridge-kernel-canary-{os.getpid()}"
    canary.write_text("CANARY-IN-HOME\n")
    request.addfinalizer(lambda: canary.unlink(missing_ok=True))
    notebook = nbformat.v4.new_notebook()
    sources = [
        "x = 21\nx * 2",
        "x * 2;",
        "%%sql\nselect 42 as answer",
        "import matplotlib.pyplot as plt\nplt.plot([1, 2]);",
        f"!echo planted > {secret} || echo refused",
        f"import os\nos.getpid() != {os.getpid()}",
        "1 / 0",
        # the attack: a cell that asks for a wider session or runs a host magic gets the sandbox's IPython only
        f"%%console --profile workspace\nopen({str(secret)!r}, 'w')",
        f"%console_put {secret}",
        "!touch written-by-a-shell-line",
        "%%R\n1 + 1",
        f"print(open({str(canary)!r}).read())",  # the user's home is not in the sandbox's view
    ]
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in sources]
    client = NotebookClient(
        notebook, kernel_name="cb-test", timeout=90, allow_errors=True, resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()
    outputs = [cell.outputs for cell in notebook.cells]
    assert [cell.execution_count for cell in notebook.cells] == list(range(1, 13))
    assert outputs[0][0]["output_type"] == "execute_result" and outputs[0][0]["data"]["text/plain"] == "42"
    assert outputs[1] == []  # ';' hides the value
    assert outputs[2][0]["data"]["text/plain"] == "answer\n------\n42" and "text/html" in outputs[2][0]["data"]
    assert outputs[3][0]["output_type"] == "display_data" and "image/png" in outputs[3][0]["data"]
    assert not secret.exists() and "refused" in outputs[4][0]["text"]  # a `!` line ran in the sandbox
    assert outputs[5][0]["data"]["text/plain"] == "True"
    error = outputs[6][-1]
    assert error["output_type"] == "error" and error["ename"] == "ZeroDivisionError", outputs[6]
    assert any("Cell In[" in line for line in error["traceback"])
    assert outputs[7][-1]["ename"] == "UsageError" and outputs[8][-1]["ename"] == "UsageError", outputs[7:9]
    assert not secret.exists() and not (tmp_path / "written-by-a-shell-line").exists()
    no_r = outputs[10][-1]  # this kernel's session has python and sql: the fix is another kernel
    assert no_r["ename"] == "InvalidArgument" and "kernel install --user --name cb-r --languages" in no_r["evalue"]
    assert outputs[11][-1]["ename"] in ("FileNotFoundError", "PermissionError") and "CANARY" not in str(outputs[11])


@pytest.mark.skipif(shutil.which("R") is None, reason="R is not installed here (CI installs Debian's r-base-core)")
def test_a_kernel_with_r_runs_r_cells_in_its_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    prefix = tmp_path / "prefix"
    done = subprocess.run(
        [cli_path(), "kernel", "install", "--prefix", str(prefix), "--name", "cb-r", "--languages", "python,sql,r"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    monkeypatch.setenv("JUPYTER_PATH", str(prefix / "share" / "jupyter"))
    notebook = nbformat.v4.new_notebook()
    sources = ["%%R\nx <- 40\nx + 2", "%%sql\nselect 42 as answer", "21 * 2", "%%R\nx"]
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in sources]
    folder = tmp_path / "nb"
    folder.mkdir()
    NotebookClient(notebook, kernel_name="cb-r", timeout=120, resources={"metadata": {"path": str(folder)}}).execute()
    texts = [
        "".join(o.get("text", "") or o.get("data", {}).get("text/plain", "") for o in c.outputs) for c in notebook.cells
    ]
    assert "[1] 42" in texts[0] and "42" in texts[1] and texts[2] == "42" and "[1] 40" in texts[3], texts


def test_completion_and_inspection_ask_the_sandbox_and_show_plain_text(
    kernel_prefix: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jupyter_client.manager import start_new_kernel

    monkeypatch.setenv("JUPYTER_PATH", str(kernel_prefix / "share" / "jupyter"))
    manager, client = start_new_kernel(kernel_name="cb-test", cwd=str(tmp_path))
    try:
        client.execute_interactive("sandbox_only_name = 42", timeout=90)
        reply = client.complete("sandbox_only_na", reply=True, timeout=60)["content"]
        assert "sandbox_only_name" in reply["matches"], reply
        inspected = client.inspect("sandbox_only_name", reply=True, timeout=60)["content"]
        assert inspected["found"] and "int" in inspected["data"]["text/plain"], inspected
        client.execute_interactive(
            "get_ipython().object_inspect_mime = "
            "lambda *a, **k: {'text/html': '<script>x</script>', 'text/plain': 'p'}",
            timeout=60,
        )
        hostile = client.inspect("sandbox_only_name", reply=True, timeout=60)["content"]
        assert hostile["data"] == {"text/plain": "p"}, hostile  # no HTML reaches the frontend
        assert client.execute_interactive("sandbox_only_name + 1", timeout=60)["content"]["status"] == "ok"
    finally:
        client.stop_channels()
        manager.shutdown_kernel()


def test_interrupting_the_kernel_stops_the_cell_and_keeps_the_state(
    kernel_prefix: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    from jupyter_client.manager import start_new_kernel

    monkeypatch.setenv("JUPYTER_PATH", str(kernel_prefix / "share" / "jupyter"))
    manager, client = start_new_kernel(kernel_name="cb-test", cwd=str(tmp_path))
    try:
        client.execute_interactive("kept = 41", timeout=90)
        msg_id = client.execute("import time\nprint('sleeping', flush=True)\ntime.sleep(60)\nprint('woke')")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # the cell has started once its first line is shown
            message = client.get_iopub_msg(timeout=30)
            if message["msg_type"] == "stream" and "sleeping" in message["content"]["text"]:
                break
        started = time.monotonic()
        manager.interrupt_kernel()
        reply = client.get_shell_msg(timeout=30)
        assert reply["parent_header"]["msg_id"] == msg_id and reply["content"]["status"] == "error"
        assert "KeyboardInterrupt" in reply["content"]["ename"] + reply["content"]["evalue"], reply["content"]
        assert time.monotonic() - started < 20
        after = client.execute_interactive("kept + 1", timeout=60)
        assert after["content"]["status"] == "ok"
        shown: list[str] = []
        client.execute_interactive(
            "kept + 1", timeout=60,
            output_hook=lambda m: shown.append(m["content"].get("data", {}).get("text/plain", "")),
        )  # fmt: skip
        assert "42" in shown, shown
    finally:
        client.stop_channels()
        manager.shutdown_kernel()
