"""What a session's worker does before the first cell: the modules of its own bootstrap come from
the environment's compiled files (linked by the host into a folder cells cannot write), and DuckDB
is imported only when SQL is first used."""

from __future__ import annotations

import json

import pytest

from console_bridge import AsyncConsole
from console_bridge._vetting._bytecode import bytecode_prefix, link_bytecode

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leaks")]

# json is imported by the worker's bootstrap, while PYTHONPYCACHEPREFIX is still in effect: its
# spec names the compiled file the worker looked for (under the prefix).
_BOOT = """
import json, os, sys
cached = json.__spec__.cached
try:
    with open(os.path.join(os.environ["CB_CACHE"], "planted.cpython-311.pyc"), "wb") as handle:
        handle.write(b"x")
    writable = True
except OSError as error:
    writable = error.strerror
print(json.dumps({"cached": cached, "writable": writable, "duckdb": "duckdb" in sys.modules}))
"""


async def test_the_bootstrap_reads_linked_bytecode_and_duckdb_waits_for_sql(
    mcp_console, workspace, recordings, tmp_path
):
    _, binary = mcp_console
    async with AsyncConsole(workspace, command=binary, recordings_dir=recordings) as console:
        facts = console._boot.facts
        assert facts is not None
        # the host linked what it could find compiled (counted again here, into a folder of the test's)
        assert console._boot.linked == link_bytecode(tmp_path / "again", facts.search_path, facts.cache_tag)
        prefix = bytecode_prefix(console._confined.cache_dir / "mcp-console")
        cache = console._confined.cache_dir / "mcp-console"
        boot = await console.run(python=f"import os; os.environ['CB_CACHE'] = {str(cache)!r}\n" + _BOOT)
        facts = json.loads(boot.text)
        # the worker looked for json's compiled file where the host put the link (test_bytecode_logic
        # shows that a link there is what Python reads); the links are removed once the worker booted
        assert facts["cached"].startswith(str(prefix) + "/"), facts
        assert facts["writable"] == "Read-only file system", facts  # cells cannot plant bytecode there
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


async def test_no_links_where_mcp_console_prepares_packages(mcp_console, workspace, recordings):
    """With dependencies='allow' mcp-console's package preparation manages its bytecode cache: the
    bridge plants nothing there (and removes nothing)."""
    _, binary = mcp_console
    async with AsyncConsole(workspace, command=binary, recordings_dir=recordings, dependencies="allow") as console:
        assert console._boot.linked == 0 and console._boot.prefix is None
        result = await console.run(python="print(6 * 7)")
        assert result.error is None and result.text.strip() == "42"


# Where the worker's bootstrap looked for json's compiled file, and whether a file is there now.
_SEEN = "import json, os\nprint(json.dumps([json.__spec__.cached, os.path.exists(json.__spec__.cached)]))"


async def test_a_fresh_worker_reads_linked_bytecode_again(mcp_console, workspace, recordings):
    """After a restart, and after the worker died, the fresh worker's bootstrap finds the links again
    (restart to the first result: 0.31-0.33 s without them, 0.14-0.17 s with them, here); once it
    ran a cell they are removed again."""
    _, binary = mcp_console
    async with AsyncConsole(workspace, command=binary, recordings_dir=recordings) as console:
        prefix = bytecode_prefix(console._confined.cache_dir / "mcp-console")
        assert console._boot.linked > 0
        await console.run(python="1")
        await console._boot.wait()
        assert not prefix.exists()  # removed once the first worker booted
        await console.restart()
        cached, there = json.loads((await console.run(python=_SEEN)).text)
        assert cached.startswith(str(prefix) + "/") and there, (cached, there)
        await console._boot.wait()
        assert not prefix.exists()
        died = await console.run(python="import os; os._exit(3)")
        assert died.worker_exited or (died.error is not None and died.error.kind == "worker_exited"), died
        cached, there = json.loads((await console.run(python=_SEEN)).text)
        assert cached.startswith(str(prefix) + "/") and there, (cached, there)
        await console._boot.wait()
        assert not prefix.exists()
        kept = await console.run(python="print(6 * 7)")  # and the session goes on as usual
        assert kept.error is None and kept.text.strip() == "42"


# The worker's C heap: resident (its [heap] mapping's Rss) and in use (glibc's mallinfo2), in KiB.
_HEAP = """
import ctypes, json
libc = ctypes.CDLL(None)
if not hasattr(libc, "mallinfo2"):
    print("null")  # not glibc 2.33 or later
else:
    class Info(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in
                    ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                     "keepcost")]
    libc.mallinfo2.restype = Info
    in_use = libc.mallinfo2().uordblks // 1024
    resident, heap = 0, False
    with open("/proc/self/smaps") as handle:
        for line in handle:
            first = line.split()[0]
            if not first.endswith(":"):
                heap = line.rstrip().endswith("[heap]")
            elif heap and first == "Rss:":
                resident += int(line.split()[1])
    print(json.dumps([resident, in_use]))
"""


async def test_the_worker_gives_back_what_its_startup_freed(mcp_console, workspace, recordings):
    """An idle worker's C heap holds little free memory resident: its startup code ends with
    malloc_trim (issue 35: without it 1.5 of the heap's 4.1 MiB were free and resident, after it 0.3)."""
    _, binary = mcp_console
    async with AsyncConsole(workspace, command=binary, recordings_dir=recordings) as console:
        figures = json.loads((await console.run(python=_HEAP)).text)
        if figures is None:
            pytest.skip("the worker's C library has no mallinfo2")
        resident, in_use = figures
        assert resident - in_use < 768, figures
