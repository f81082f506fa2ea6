"""serve's time limits over stdio: a cell past --max-cell-time is interrupted (state kept), a console
past --max-lifetime is closed, and each is a tool error that names the limit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession
from mcp.client.stdio import stdio_client

from tests.serve.conftest import leftovers
from tests.serve.test_stdio import params, text, wait_gone

pytestmark = [pytest.mark.anyio, pytest.mark.console, pytest.mark.slow]


async def test_max_cell_time_interrupts_and_keeps_state(tmp_path: Path) -> None:
    async with (
        stdio_client(params(tmp_path, "--max-cell-time", "2")) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        await session.call_tool("send", {"python": "x = 1"})
        spin = await session.call_tool("send", {"python": "while True:\n    pass", "timeout_ms": 30000})
        assert "[running" in text(spin)  # the wait was cut to the cell's remaining time, not 30 s
        told: Any = await session.call_tool("send", {"timeout_ms": 30000})
        assert told.is_error and "--max-cell-time" in text(told) and "state are kept" in text(told), text(told)
        assert text(await session.call_tool("send", {"python": "x + 41"})).strip() == "42"
    await wait_gone(tmp_path)
    assert leftovers(tmp_path) == []


async def test_max_lifetime_closes_a_busy_console_with_a_tool_error(tmp_path: Path) -> None:
    async with (
        stdio_client(params(tmp_path, "--max-lifetime", "6")) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        await session.call_tool("send", {"python": "x = 1"})
        ended: Any = None
        for _ in range(3):  # a running cell is busy, not idle; the lifetime still ends it (within 3 windows)
            ended = await session.call_tool("send", {"python": "import time\ntime.sleep(120)", "timeout_ms": 30000})
            if ended.is_error:
                break
        assert ended.is_error and "--max-lifetime" in text(ended) and "console_open" in text(ended), text(ended)
        fresh = await session.call_tool("send", {"python": "'x' in globals()"})
        assert fresh.is_error and "--max-lifetime" in text(fresh)  # told once that its state is gone
        assert text(await session.call_tool("send", {"python": "'x' in globals()"})).strip() == "False"
    await wait_gone(tmp_path)
    assert leftovers(tmp_path) == []
