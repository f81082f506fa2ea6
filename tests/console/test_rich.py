"""Rich results from a real worker: display(), the final value, frames and plots as MIME bundles."""

from __future__ import annotations

import pytest

from console_bridge import AsyncConsole

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leaks")]

CELL = """
import pandas as pd
import matplotlib.pyplot as plt
from IPython.display import HTML, Markdown, display
frame = pd.DataFrame({"a": [1, 2], "b": ["x", "y"]})
print("before")
display(frame)
display(HTML("<b>bold</b>"), Markdown("# title"))
plt.plot([1, 2, 3])
frame
"""


async def test_outputs_are_mime_bundles_in_order(mcp_console, workspace, recordings):
    _, binary = mcp_console
    async with AsyncConsole(workspace, command=binary, recordings_dir=recordings) as console:
        chunks = []
        result = await console.run(python=CELL, on_output=chunks.append)
        assert result.error is None, result.stderr
        kinds = [(o.kind, sorted(o.data)) for o in result.outputs]
        assert kinds == [
            ("display", ["text/html", "text/plain"]),
            ("display", ["text/html", "text/plain"]),
            ("display", ["text/markdown", "text/plain"]),
            ("result", ["text/html", "text/plain"]),
            ("display", ["image/png", "text/plain"]),
        ], kinds
        assert (
            "<table" in str(result.outputs[0].data["text/html"])
            and result.outputs[1].data["text/html"] == "<b>bold</b>"
        )
        png = result.outputs[4].data["image/png"]
        assert isinstance(png, bytes) and png.startswith(b"\x89PNG")
        # text keeps each result's text/plain where it was shown; the frames are gone
        assert result.text.startswith("before\n   a  b\n0  1  x\n") and "\ufdd2" not in result.text
        assert [o.kind for chunk in chunks for o in chunk.outputs] == [o.kind for o in result.outputs]
        # the model reads text, the frame summarised as text
        model = await console.tools()[0]({"python": "frame"})
        assert model.text.strip().startswith("a  b") and "<table" not in model.text
        plain = await console.run(python="40 + 2")
        assert plain.text == "42\n" and [(o.kind, o.data) for o in plain.outputs] == [("result", {"text/plain": "42"})]
        # Bundles of text alone travel in the frame (no record): kind and text exactly as a record has them
        code = "class A:\n    def __repr__(self):\n        return 'two\\nlines\\n'\ndisplay(A())\ndisplay(7)\nA()"
        texts = await console.run(python=code)
        assert [(o.kind, o.data) for o in texts.outputs] == [  # (IPython's formatter, as Jupyter shows them)
            ("display", {"text/plain": "two\nlines"}),
            ("display", {"text/plain": "7"}),
            ("result", {"text/plain": "two\nlines"}),
        ]
        assert texts.text == "two\nlines\n7\ntwo\nlines\n"


async def test_sql_result_is_a_table_and_a_bundle(mcp_console, workspace, recordings):
    _, binary = mcp_console
    async with AsyncConsole(workspace, command=binary, recordings_dir=recordings) as console:
        query = "select 42 as a, '<x>' as b, date '2020-01-02' as d union all select 43, null, null"
        result = await console.run(sql=query)
        assert result.error is None, result.stderr
        table = result.table
        assert table is not None and table.columns == ("a", "b", "d") and not table.truncated
        assert table.rows == [(42, "<x>", "2020-01-02"), (43, None, None)]
        [output] = result.outputs
        assert output.kind == "result" and output.data["text/plain"] == result.text.rstrip("\n")
        html = str(output.data["text/html"])
        assert "<th>a</th>" in html and "<td>&lt;x&gt;</td>" in html and "<td>NULL</td>" in html
        assert result.text.startswith("a  | b") and "\ufdd2" not in result.text  # the worker's grid, unframed
        many = await console.run(sql="select * from range(30)")
        assert many.table is not None and many.table.truncated and len(many.table.rows) == 20
        assert many.text.rstrip().endswith("[additional rows omitted]")
        failed = await console.run(sql="select nope")
        assert failed.error is not None and failed.table is None and failed.outputs == []
        # a Python cell that fetches rows itself makes no table
        mine = await console.run(python="_console.sql_connection().execute('select 1').fetchmany(5)")
        assert mine.table is None and mine.text == "[(1,)]\n"
