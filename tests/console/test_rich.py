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
