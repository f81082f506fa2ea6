"""What a session's worker does before the first cell: the modules of its own bootstrap come from
the environment's compiled files (linked by the host into a folder cells cannot write), and DuckDB
is imported only when SQL is first used."""

from __future__ import annotations

import json

import pytest

from console_bridge import AsyncConsole

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leaks")]

# json is imported by the worker's bootstrap, while PYTHONPYCACHEPREFIX is still in effect: its
# spec names the compiled file the worker looked for (under the prefix).
_BOOT = """
import json, os, sys
cached = json.__spec__.cached
try:
    with open(os.path.join(os.path.dirname(cached), "planted.cpython-311.pyc"), "wb") as handle:
        handle.write(b"x")
    writable = True
except OSError:
    writable = False
print(json.dumps({
    "cached": cached,
    "link": os.path.islink(cached),
    "target": os.path.realpath(cached),
    "own": os.path.realpath(os.path.join(os.path.dirname(json.__file__), "__pycache__", os.path.basename(cached))),
    "writable": writable,
    "duckdb": "duckdb" in sys.modules,
}))
"""


async def test_the_bootstrap_reads_linked_bytecode_and_duckdb_waits_for_sql(mcp_console, workspace, recordings):
    _, binary = mcp_console
    async with AsyncConsole(workspace, command=binary, recordings_dir=recordings) as console:
        boot = await console.run(python=_BOOT)
        facts = json.loads(boot.text)
        assert facts["link"], facts  # the prefix the worker used is the one the host filled
        assert facts["target"] == facts["own"], facts  # the environment's own compiled file
        assert facts["writable"] is False, facts  # cells cannot plant bytecode there
        assert facts["duckdb"] is False, facts  # not imported at start

        table = await console.run(sql="select 42 as answer")
        assert table.error is None and table.table is not None and list(map(list, table.table.rows)) == [[42]]
        failed = await console.run(sql="select * from no_such_table")
        assert failed.error is not None and failed.error.name == "Catalog Error"
        cursor = await console.run(
            python="c = _console.sql_connection().cursor(); print(c.execute('select 7').fetchall()); c.close()"
        )
        assert cursor.error is None and cursor.text.strip() == "[(7,)]"
        loaded = await console.run(python="import sys; print('duckdb' in sys.modules)")
        assert loaded.text.strip() == "True"
