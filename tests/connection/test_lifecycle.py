"""Lifecycle: states, deadlines, the busy slot, close and cancel. Nothing survives any of it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from console_bridge import BridgeError, Busy, CallTimeout, ConnectionClosed, ToolResult
from tests.support.places import server_entry

from .helpers import ProcessWatch, pid_alive, read_log, wait_for_line

pytestmark = pytest.mark.anyio

#: Slack on top of a deadline for noticing it and stopping the process tree.
MARGIN = 2.5


async def test_states_and_status(conns: Any, log: Path) -> None:
    conn = conns(server_entry("wellbehaved.py", "--log", str(log)), tools=["echo", "slow"])
    status = conn.status()
    assert status.state == "new" and status.pid is None and status.calls == 0
    assert status.tools == ("echo", "slow") and status.stderr_tail == ""
    async with conn:
        status = conn.status()
        assert status.state == "idle"
        assert status.pid is not None and pid_alive(status.pid)
        assert status.server_info == {"name": "wellbehaved", "version": "1.0.0"}
        assert status.owner == conn.owner and status.server == "s"
        result = await conn.call_tool("echo", {"text": "hi"})
        assert isinstance(result, ToolResult)
        assert (result.text, result.server, result.tool, result.is_error) == ("hi", "s", "echo", False)
        assert conn.status().calls == 1
        lines_before = len(read_log(log))
        conn.status()  # local state only
        assert len(read_log(log)) == lines_before
    assert conn.status().state == "closed"
    assert not pid_alive(status.pid)


async def test_connect_twice_is_a_no_op(conns: Any) -> None:
    conn = conns(server_entry("probe.py"))
    await conn.connect()
    pid = conn.pid
    await conn.connect()
    assert conn.pid == pid


async def test_call_before_connect_is_refused(conns: Any) -> None:
    conn = conns(server_entry("probe.py"), tools=["env"])
    with pytest.raises(ConnectionClosed, match="connect"):
        await conn.call_tool("env", {})
    assert conn.status().state == "new"


async def call_expecting_closed(conn: Any, tool: str, arguments: dict[str, Any]) -> None:
    with pytest.raises(ConnectionClosed):
        await conn.call_tool(tool, arguments)


# ------------------------------------------------------------------ deadlines


async def test_call_timeout_closes_and_revokes(conns: Any, watch: ProcessWatch, log: Path) -> None:
    conn = conns(server_entry("hang.py", "--log", str(log)), tools=["t"], timeout=0.5)
    await conn.connect()
    watch.snapshot()
    [handle] = conn.tools()
    pid = conn.pid
    started = time.monotonic()
    with pytest.raises(CallTimeout) as info:
        await conn.call_tool("t", {})
    elapsed = time.monotonic() - started
    assert 0.5 <= elapsed < 0.5 + MARGIN
    error = info.value
    assert isinstance(error, ConnectionClosed) and isinstance(error, BridgeError)
    assert "0.5s deadline" in str(error) and "timeout=" in str(error)
    assert error.server == "s" and error.pid == pid
    assert "tools/call t" in read_log(log)

    assert conn.status().state == "closed"
    assert conn.status().last_error is not None
    watch.assert_gone()
    with pytest.raises(ConnectionClosed):
        await handle({})
    with pytest.raises(ConnectionClosed):
        await conn.call_tool("t", {})
    with pytest.raises(ConnectionClosed):
        conn.tools()
    assert read_log(log).count("tools/call t") == 1  # nothing reconnected, nothing re-sent


async def test_timeout_applies_to_each_request(conns: Any) -> None:
    conn = conns(server_entry("probe.py"), tools=["sleep"], timeout=0.8, shutdown_grace=0.2)
    await conn.connect()
    assert (await conn.call_tool("sleep", {"seconds": 0.05})).text == "slept"
    assert (await conn.call_tool("sleep", {"seconds": 0.05})).text == "slept"
    with pytest.raises(CallTimeout):
        await conn.call_tool("sleep", {"seconds": 30})


async def test_startup_timeout_when_initialize_is_never_answered(conns: Any, watch: ProcessWatch, log: Path) -> None:
    conn = conns(server_entry("mute.py", "--log", str(log)), tools=["t"], startup_timeout=0.5)
    started = time.monotonic()
    with pytest.raises(CallTimeout) as info:
        await conn.connect()
    assert time.monotonic() - started < 0.5 + MARGIN
    assert "startup_timeout=0.5s" in str(info.value)
    assert info.value.pid is not None
    assert read_log(log)[:1] == ["server/discover"]  # the 2026-07-28 probe, never answered
    assert conn.status().state == "closed"
    watch.assert_gone()
    with pytest.raises(ConnectionClosed):
        await conn.connect()  # no implicit reconnect


async def test_startup_timeout_covers_a_server_that_never_starts_talking(conns: Any, watch: ProcessWatch) -> None:
    # a "server" that never reads stdin and never writes: sleep
    conn = conns({"command": "sleep", "args": ["60"]}, startup_timeout=0.3, shutdown_grace=0.2)
    with pytest.raises(CallTimeout):
        await conn.connect()
    watch.assert_gone()


async def test_caller_cancelling_connect_stops_the_server(conns: Any, watch: ProcessWatch, log: Path) -> None:
    conn = conns(server_entry("mute.py", "--log", str(log)), startup_timeout=30, shutdown_grace=0.3)
    with anyio.move_on_after(5) as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(conn.connect)
            await wait_for_line(log, "server/discover")
            tg.cancel_scope.cancel()
    assert not scope.cancelled_caught  # the cancellation stayed a cancellation, caught by its own scope
    watch.assert_gone()
    assert conn.status().state == "closed"
    with pytest.raises(ConnectionClosed):
        await conn.connect()


# ----------------------------------------------------------------------- busy


async def test_second_concurrent_call_is_busy_and_never_sent(conns: Any, watch: ProcessWatch, log: Path) -> None:
    conn = conns(
        server_entry("wellbehaved.py", "--log", str(log)), tools=["slow", "echo"], timeout=30, shutdown_grace=0.3
    )
    await conn.connect()
    outcome: list[BaseException | ToolResult] = []

    async def first() -> None:
        try:
            outcome.append(await conn.call_tool("slow", {"seconds": 30}))
        except BaseException as exc:
            outcome.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(first)
        await wait_for_line(log, "tools/call slow")
        assert conn.status().state == "busy"
        started = time.monotonic()
        with pytest.raises(Busy) as info:
            await conn.call_tool("echo", {"text": "second"})
        assert time.monotonic() - started < 5  # at once, not after the first call (30 s)
        assert "nothing was sent" in str(info.value)
        with pytest.raises(Busy):
            await conn.discover("tools")
        with pytest.raises(Busy):
            await conn.tools()[1]({"text": "via handle"})
        assert conn.status().state == "busy"
        # A clean close: the server reads (and logs) all it was sent before it sees EOF.
        await conn.close()
    [first_outcome] = outcome
    assert isinstance(first_outcome, ConnectionClosed)
    lines = read_log(log)
    assert lines.count("tools/call slow") == 1
    assert "tools/call echo" not in lines
    watch.assert_gone()


async def test_busy_ends_when_the_call_ends(conns: Any, log: Path) -> None:
    conn = conns(server_entry("probe.py", "--log", str(log)), tools=["sleep", "env"])
    await conn.connect()
    async with anyio.create_task_group() as tg:
        tg.start_soon(conn.call_tool, "sleep", {"seconds": 0.3})
        await wait_for_line(log, "tools/call sleep")
        with pytest.raises(Busy):
            await conn.call_tool("env", {})
    assert conn.status().state == "idle"
    assert "cwd" in (await conn.call_tool("env", {})).text


async def test_other_connection_and_event_loop_stay_responsive(conns: Any, log: Path) -> None:
    slow = conns(server_entry("probe.py", "--log", str(log)), tools=["sleep"], timeout=30)
    other = conns(server_entry("probe.py"), tools=["env"])
    await slow.connect()
    await other.connect()
    async with anyio.create_task_group() as tg:
        tg.start_soon(call_expecting_closed, slow, "sleep", {"seconds": 30})
        await wait_for_line(log, "tools/call sleep")
        # The loop keeps turning: many short sleeps finish promptly.
        started = time.monotonic()
        for _ in range(20):
            await anyio.sleep(0.001)
        assert time.monotonic() - started < 5  # the loop is not held for the slow call's 30 s
        # Another connection works meanwhile, quickly.
        with anyio.fail_after(3):
            for _ in range(3):
                assert "cwd" in (await other.call_tool("env", {})).text
        assert slow.status().state == "busy"
        await slow.cancel()
    assert other.status().state == "idle"


# ----------------------------------------------------------- close and cancel


async def test_cancel_kills_at_once_and_fails_the_active_call(conns: Any, watch: ProcessWatch, log: Path) -> None:
    conn = conns(server_entry("probe.py", "--log", str(log)), tools=["sleep"], timeout=30, shutdown_grace=5)
    await conn.connect()
    watch.snapshot()
    [handle] = conn.tools()
    failures: list[BaseException] = []

    async def call() -> None:
        try:
            await conn.call_tool("sleep", {"seconds": 30})
        except BaseException as exc:
            failures.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        await wait_for_line(log, "tools/call sleep")
        started = time.monotonic()
        await conn.cancel()
        # at once: no clean-shutdown grace (5 s here) is waited for
        assert time.monotonic() - started < 4  # < the 5 s grace
        watch.assert_gone()
    [failure] = failures
    assert type(failure) is ConnectionClosed
    assert "cancel" in str(failure)
    await conn.cancel()  # idempotent
    await conn.close()
    for attempt in (
        conn.call_tool("sleep", {"seconds": 0}),
        handle({"seconds": 0}),
        conn.discover(),
        conn.connect(),
    ):
        with pytest.raises(ConnectionClosed):
            await attempt
    assert conn.status().state == "closed"


async def test_close_during_an_active_call_fails_it(conns: Any, watch: ProcessWatch, log: Path) -> None:
    conn = conns(server_entry("probe.py", "--log", str(log)), tools=["sleep"], timeout=30, shutdown_grace=0.5)
    await conn.connect()
    failures: list[BaseException] = []

    async def call() -> None:
        try:
            await conn.call_tool("sleep", {"seconds": 30})
        except BaseException as exc:
            failures.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        await wait_for_line(log, "tools/call sleep")
        started = time.monotonic()
        await conn.close()
        assert time.monotonic() - started < 0.5 * 2 + MARGIN  # bounded by the shutdown grace
        watch.assert_gone()
    [failure] = failures
    assert isinstance(failure, ConnectionClosed)
    assert "close" in str(failure)
    await conn.close()  # idempotent
    await conn.cancel()
    with pytest.raises(ConnectionClosed):
        await conn.call_tool("sleep", {"seconds": 0})


async def test_close_before_connect_and_reconnect_after_close(conns: Any, watch: ProcessWatch) -> None:
    conn = conns(server_entry("probe.py"), tools=["env"])
    await conn.close()
    await conn.close()
    assert conn.status().state == "closed"
    with pytest.raises(ConnectionClosed, match="closed"):
        await conn.connect()
    assert conn.pid is None  # nothing was ever started
    watch.assert_gone()


async def test_reconnect_after_a_normal_close_is_refused(conns: Any, watch: ProcessWatch) -> None:
    conn = conns(server_entry("probe.py"), tools=["env"])
    async with conn:
        await conn.call_tool("env", {})
    watch.assert_gone()
    with pytest.raises(ConnectionClosed):
        await conn.connect()
    with pytest.raises(ConnectionClosed):
        async with conn:
            pass
    watch.assert_gone()


async def test_outer_cancellation_of_a_call_is_not_swallowed(conns: Any, watch: ProcessWatch, log: Path) -> None:
    """A caller's own cancel scope still cancels the call (MCP cancellation is advisory).

    The server's late reply to the cancelled request is dropped, not handed to the next
    request, and the connection stays usable.
    """
    conn = conns(server_entry("probe.py", "--log", str(log)), tools=["sleep", "env"])
    await conn.connect()
    with anyio.move_on_after(5) as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(conn.call_tool, "sleep", {"seconds": 0.5})
            await wait_for_line(log, "tools/call sleep")
            tg.cancel_scope.cancel()
    assert not scope.cancelled_caught  # cancelled by its own scope, not swallowed
    assert conn.status().state == "idle"
    result = await conn.call_tool("env", {})  # answered after the late "slept" reply
    assert "cwd" in result.text and "slept" not in result.text
    assert "notifications/cancelled" in read_log(log)
    assert conn.status().state == "idle"
    await conn.close()
    watch.assert_gone()
