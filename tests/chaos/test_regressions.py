"""Minimal reproductions of bugs the chaos soak (scripts/chaos.py) found.

Both are fixed; the reproductions stay as regression tests.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from console_bridge import AsyncConsole, ConnectionClosed
from console_bridge._vetting._launch import find_r
from tests.support.processes import alive

pytestmark = [pytest.mark.anyio, pytest.mark.console, pytest.mark.usefixtures("no_leaks")]


@pytest.mark.timeout(60)
@pytest.mark.skipif(find_r() is None, reason="the worker startup that the interrupt breaks runs R's resolution")
async def test_interrupt_during_worker_startup_leaves_the_session_usable(
    mcp_console: tuple[str, Path], workspace: Path, recordings: Path
) -> None:
    _, binary = mcp_console
    async with AsyncConsole(workspace, command=binary, recordings_dir=recordings) as console:
        # The first cell of a session starts the worker (~2-3 s): the interrupt lands in that startup.
        first = await console.send(python="import time\ntime.sleep(30)", timeout_ms=200)
        assert first.running
        await console.interrupt()
        assert (await console.run(python="1 + 1")).text == "2\n"


@pytest.mark.timeout(60)
async def test_close_during_start_is_final(mcp_console: tuple[str, Path], workspace: Path, recordings: Path) -> None:
    _, binary = mcp_console
    console = AsyncConsole(workspace, command=binary, recordings_dir=recordings)
    raised: list[BaseException] = []

    async def start() -> None:
        try:
            await console.start()
        except ConnectionClosed as exc:
            raised.append(exc)

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(start)
            await anyio.sleep(0)  # start() is now in its first thread hop (the binary check)
            await console.close()
        assert console.status().state == "closed", "close() returned, yet start() left the console open"
        pid = console.pid
        assert pid is None or not alive({pid}), f"the server (pid {pid}) runs after close()"
        with pytest.raises(ConnectionClosed):
            await console.run(python="1")
    finally:
        await console.cancel()  # the bug leaves a live server and a TMPDIR: stop them for the next test
