"""Tracebacks people read: the cells' own source lines, none of the machinery's frames."""

from __future__ import annotations

import pytest

from console_bridge import AsyncConsole

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leaks")]


async def test_a_traceback_shows_the_cells_lines_and_no_machinery(mcp_console, workspace, recordings):
    _, binary = mcp_console
    async with AsyncConsole(workspace, command=binary, recordings_dir=recordings) as console:
        await console.run(python="def halve(x):\n    return 1 / x\n")
        result = await console.run(python="import warnings\nwarnings.warn('careful')\ny = 3\nhalve(y - 3)")
        assert result.error is not None and result.error.name == "ZeroDivisionError"
        for shown in (result.stderr, result.error.traceback):
            assert "----> 4 halve(y - 3)\n" in shown and "Cell In[2], line 4" in shown, shown  # this cell's line
            assert "----> 2     return 1 / x\n" in shown and "Cell In[1], line 2" in shown, shown  # the earlier's
            assert "_mcp_console" not in shown and "<string>" not in shown and "<console startup>" not in shown
        assert "warnings.warn('careful')" in result.stderr  # warnings read the same source
        assert result.text == ""
        sql = await console.run(sql="select * from no_such_table")
        assert sql.error is not None and "<console startup>" not in sql.error.traceback
        assert "no_such_table" in sql.error.traceback
