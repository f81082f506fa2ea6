"""Python cells through IPython's own shell in the sandboxed worker (issue 47): magics, a trailing ';',
IPython's display formatter and its registry, figures by value, Jupyter's tracebacks; and, on the way,
that what a magic or a `!` line runs is as confined as any Python."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from console_bridge import AsyncConsole, Console

pytestmark = [pytest.mark.anyio, pytest.mark.console, pytest.mark.usefixtures("no_leaks")]


async def test_cells_show_as_jupyter_shows_them(mcp_console, workspace, recordings):
    _, binary = mcp_console
    async with AsyncConsole(workspace, command=binary, recordings_dir=recordings) as console:
        assert (await console.run(python="x = 21\nx * 2")).text == "42\n"
        hidden = await console.run(python="x * 2;")
        assert hidden.text == "" and not hidden.outputs  # a trailing ';' hides the value
        wide = await console.run(python="list(range(40))")
        assert wide.text.startswith("[0,\n 1,\n 2,")  # pretty-printed at Jupyter's 79 columns
        timed = await console.run(python="%timeit -n1 -r1 sum(range(10))")
        assert timed.error is None and "per loop" in timed.text
        cell_magic = await console.run(python="%%time\ny = x + 1")
        assert cell_magic.error is None and "Wall time" in cell_magic.text
        assert (await console.run(python="y")).text == "22\n"  # the %%time cell ran in the session's namespace
        html = await console.run(
            python="get_ipython().display_formatter.formatters['text/html'].for_type(complex, lambda c: '<i>c</i>')\n1j"
        )
        assert [sorted(o.data) for o in html.outputs] == [["text/html", "text/plain"]]
        assert html.outputs[0].data["text/html"] == "<i>c</i>"  # a formatter registered by a cell is used


async def test_figures_are_shown_by_value_and_by_the_inline_backend(mcp_console, workspace, recordings):
    _, binary = mcp_console
    async with AsyncConsole(workspace, command=binary, recordings_dir=recordings) as console:
        inline = await console.run(python="%matplotlib inline\nimport matplotlib.pyplot as plt\nplt.plot([1, 2]);")
        assert inline.error is None, inline.stderr
        assert [(o.kind, sorted(o.data)) for o in inline.outputs] == [("display", ["image/png", "text/plain"])]
        assert inline.outputs[0].data["text/plain"] == "<Figure size 640x480 with 1 Axes>"
        by_value = await console.run(python="fig, ax = plt.subplots()\nax.plot([3, 1])\nplt.close(fig)\nfig")
        assert [(o.kind, sorted(o.data)) for o in by_value.outputs] == [("result", ["image/png", "text/plain"])]
        png = by_value.outputs[0].data["image/png"]
        assert isinstance(png, bytes) and png.startswith(b"\x89PNG")
        gui = await console.run(python="%gui qt")
        assert "the sandbox has no display" in gui.stderr + gui.text, gui  # (IPython logs it, as an error line)
        assert (await console.run(python="1 + 1")).text == "2\n"


async def test_a_failure_is_recorded_with_jupyters_traceback(mcp_console, workspace, recordings):
    _, binary = mcp_console
    async with AsyncConsole(workspace, command=binary, recordings_dir=recordings) as console:
        failed = await console.run(python="def f():\n    return 1 / 0\n\nf()")
        assert failed.error is not None and failed.error.name == "ZeroDivisionError"
        assert "Cell In[1], line 4" in failed.error.traceback and "----> 2     return 1 / 0" in failed.error.traceback
        syntax = await console.run(python="def (")
        assert syntax.error is not None and syntax.error.name == "SyntaxError"
        magic = await console.run(python="%load_ext no_such_extension_here")
        assert magic.error is not None and magic.error.name == "ModuleNotFoundError"
        assert (await console.run(python="1 + 1")).text == "2\n"  # the session works on


async def test_shell_lines_and_magics_run_inside_the_sandbox(mcp_console, workspace, recordings, tmp_path):
    _, binary = mcp_console
    secret = tmp_path / "host-only.txt"
    async with AsyncConsole(workspace, command=binary, recordings_dir=recordings) as console:
        # The attack: a `!` line and %%bash try what Python cannot (a socket, a write outside TMPDIR).
        shell = await console.run(python=f"!echo planted > {secret}; echo rc=$?")
        assert not secret.exists(), "a ! line wrote on the host"
        assert "Read-only file system" in shell.text or "Permission denied" in shell.text, shell.text
        bash = await console.run(python=f"%%bash\necho planted > {secret} || echo refused")
        assert not secret.exists() and "refused" in bash.text, bash.text
        net = await console.run(python="!python3 -c 'import socket; socket.socket()' 2>&1 | tail -1")
        assert "PermissionError" in net.text or "Operation not permitted" in net.text, net.text
        captured = await console.run(python="files = !ls /\nlen(files) > 3")
        assert captured.text == "True\n"  # `!` output captured into a variable, as IPython does
        assert (await console.run(python="2 * 21")).text == "42\n"


def test_without_ipython_cells_run_as_before_with_a_notice(tmp_path: Path) -> None:
    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with Console(workspace, python=venv, languages=("python",), recordings_dir=tmp_path / "recs") as console:
        assert console.run(python="40 + 2").text == "42\n"
        failed = console.run(python="1 / 0")
        assert failed.error is not None and failed.error.name == "ZeroDivisionError"
        notices = console.status().extra["notices"]
        assert any("without IPython" in notice and "pip install ipython" in notice for notice in notices), notices


async def test_errors_the_sandbox_causes_say_so(mcp_console, workspace, recordings):
    _, binary = mcp_console
    async with AsyncConsole(workspace, command=binary, recordings_dir=recordings) as console:
        written = await console.run(python=f"open({str(workspace / 'out.csv')!r}, 'w')")
        assert written.error is not None and written.error.name == "OSError", written.error
        assert "console-bridge: the sandbox shows this place read-only" in written.error.traceback
        assert "--profile workspace" in written.stderr  # shown where the cell's traceback is
        net = await console.run(python="import socket\nsocket.create_connection(('127.0.0.1', 9))")
        assert net.error is not None and "the sandbox has no network" in net.error.traceback, net.error
        missing = await console.run(python="import no_such_module_anywhere")
        assert missing.error is not None and missing.error.name == "ModuleNotFoundError"
        assert "which has no 'no_such_module_anywhere'" in missing.error.traceback
        plain = await console.run(python="raise ValueError('mine')")
        assert plain.error is not None and "console-bridge:" not in plain.error.traceback  # no hint where none fits


async def test_a_sql_cell_of_several_statements_shows_each_result(mcp_console, workspace, recordings):
    """Issue 47: a `.sql` file of several statements showed only the last one's result."""
    _, binary = mcp_console
    async with AsyncConsole(workspace, command=binary, recordings_dir=recordings) as console:
        several = await console.run(sql="select 1 as a; create table t as select 2 as b; select * from t")
        assert several.error is None, several.error
        shown = [(o.kind, o.table.columns if o.table else None) for o in several.outputs]
        assert shown == [("display", ("a",)), ("display", ("Count",)), ("result", ("b",))], shown
        assert several.text.startswith("a\n-\n1\n") and several.text.endswith("b\n-\n2\n"), several.text
        failing = await console.run(sql="select 1 as x; select * from no_such_table; select 3 as never")
        assert failing.error is not None and failing.error.name == "Catalog Error"
        assert "never" not in failing.text and failing.text.startswith("x\n-\n1\n"), failing.text
        quoted = await console.run(sql="select 'a;b' as s")  # a ';' inside a string is not a statement's end
        assert quoted.text == "s\n-----\n'a;b'\n" and len(quoted.outputs) == 1, quoted.text
