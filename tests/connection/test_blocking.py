"""The blocking twin ``McpConnection``: plain code, inside a running loop, from threads; its thread stops."""

from __future__ import annotations

import copy
import pickle
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio
import pytest

from console_bridge import (
    BridgeError,
    Busy,
    CallTimeout,
    ConnectionClosed,
    McpConnection,
    NotAllowed,
    OwnerMismatch,
    ToolResult,
    VerificationFailed,
    run_context,
)
from tests.support.places import server_entry

from .helpers import OTHER, OWNER, ProcessWatch, config, pid_alive, threads_left, wait_for_line

PROBE = server_entry("probe.py")


def test_plain_blocking_use(blocking_conns: Any, watch: ProcessWatch) -> None:
    before = set(threading.enumerate())
    conn = blocking_conns(PROBE, tools=["env"], resources=["r://x"])
    [portal_thread] = set(threading.enumerate()) - before  # one portal thread per object
    with conn:
        assert conn.status().state == "idle"
        result = conn.call_tool("env", {})
        assert isinstance(result, ToolResult) and "cwd" in result.text
        [handle] = conn.tools()
        assert "cwd" in handle.call({}).text
        [read] = conn.capability_tools()
        assert read.name == "mcp_read_resource"
        page = conn.discover("tools")
        assert [t["name"] for t in page.items] == ["env", "stderr", "sleep", "stdin"]
        with pytest.raises(NotAllowed):
            conn.call_tool("stderr", {"bytes": 1})
        pid = conn.pid
        assert pid is not None and pid_alive(pid)
        watch.snapshot()
    assert not pid_alive(pid)
    assert conn.status().state == "closed"
    assert not portal_thread.is_alive()  # close joined the portal thread
    assert threads_left(before) == []
    with pytest.raises(ConnectionClosed):
        conn.call_tool("env", {})
    with pytest.raises(ConnectionClosed):
        handle.call({})
    with pytest.raises(ConnectionClosed):
        conn.connect()
    conn.close()  # idempotent
    conn.cancel()


@pytest.mark.anyio
async def test_blocking_twin_inside_a_running_event_loop(blocking_conns: Any) -> None:
    """Called straight from an async test body (as in Jupyter): no deadlock, no 'loop already running'."""
    before = set(threading.enumerate())
    conn = blocking_conns(PROBE, tools=["env"])
    portal_threads = set(threading.enumerate()) - before
    assert len(portal_threads) == 1
    conn.connect()
    assert "cwd" in conn.call_tool("env", {}).text
    [handle] = conn.tools()
    assert "cwd" in handle.call({}).text
    # A blocking handle can be awaited too (it waits in a worker thread of this loop).
    assert "cwd" in (await handle({})).text
    conn.close()
    assert not any(t.is_alive() for t in portal_threads)


@pytest.mark.anyio
async def test_blocking_twin_inside_anyio_test(blocking_conns: Any) -> None:
    with blocking_conns(PROBE, tools=["env"]) as conn:
        assert "cwd" in conn.call_tool("env", {}).text
        await anyio.sleep(0)
        assert "cwd" in conn.call_tool("env", {}).text


def test_four_threads_each_with_its_own_connection(blocking_conns: Any, watch: ProcessWatch) -> None:
    before = set(threading.enumerate())
    conns = [blocking_conns(PROBE, tools=["env"]) for _ in range(4)]

    def work(conn: McpConnection) -> tuple[int | None, int]:
        with conn:
            calls = sum("cwd" in conn.call_tool("env", {}).text for _ in range(5))
            watch.snapshot()
            return conn.pid, calls

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(work, conns))
    assert [calls for _, calls in results] == [5, 5, 5, 5]
    assert len({pid for pid, _ in results}) == 4  # four servers, one per connection
    assert threads_left(before) == []


def test_blocking_errors_are_the_same_bridge_errors(blocking_conns: Any, watch: ProcessWatch, tmp_path: Path) -> None:
    log = tmp_path / "hang.log"
    conn = blocking_conns(server_entry("hang.py", "--log", str(log)), tools=["t"], timeout=0.5)
    conn.connect()
    watch.snapshot()
    with pytest.raises(CallTimeout):
        conn.call_tool("t", {})
    watch.assert_gone()
    with pytest.raises(ConnectionClosed):
        conn.call_tool("t", {})
    missing = blocking_conns(PROBE, tools=["nope"])
    with pytest.raises(VerificationFailed):
        missing.connect()
    watch.assert_gone()


def test_blocking_busy_from_another_thread(blocking_conns: Any, tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    conn = blocking_conns(server_entry("probe.py", "--log", str(log)), tools=["sleep", "env"], timeout=30)
    conn.connect()
    outcome: list[BaseException | ToolResult] = []

    def slow() -> None:
        try:
            outcome.append(conn.call_tool("sleep", {"seconds": 30}))
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=slow)
    worker.start()
    anyio.run(_wait_line, log, "tools/call sleep")
    with pytest.raises(Busy):
        conn.call_tool("env", {})
    conn.cancel()
    worker.join(10)
    assert not worker.is_alive()
    [failure] = outcome
    assert isinstance(failure, ConnectionClosed)


async def _wait_line(log: Path, line: str) -> None:
    await wait_for_line(log, line, timeout=10)


def test_blocking_owner_checks(blocking_conns: Any) -> None:
    conn = blocking_conns(PROBE, tools=["env"])
    conn.connect()
    [handle] = conn.tools()
    with run_context(OTHER):
        for attempt in (
            lambda: conn.call_tool("env", {}),
            lambda: conn.discover(),
            conn.tools,
            lambda: handle.call({}),
        ):
            with pytest.raises(OwnerMismatch):
                attempt()
    with run_context(OWNER):
        assert "cwd" in handle.call({}).text


def test_blocking_refuses_pickle_and_copy(blocking_conns: Any) -> None:
    conn = blocking_conns(PROBE, tools=["env"])
    conn.connect()
    [handle] = conn.tools()
    for obj in (conn, handle):
        with pytest.raises(TypeError):
            pickle.dumps(obj)
        with pytest.raises(TypeError):
            copy.deepcopy(obj)


def test_dropped_blocking_connection_stops_its_thread_and_server(watch: ProcessWatch) -> None:
    """Garbage collection (or interpreter exit) runs the same close."""
    import gc

    before = set(threading.enumerate())
    conn = McpConnection(config(PROBE), "s", owner=OWNER, tools=["env"], timeout=5, startup_timeout=15)
    conn.connect()
    pid = conn.pid
    assert pid is not None
    watch.add_pid(pid)
    del conn
    gc.collect()
    assert threads_left(before) == []
    assert not pid_alive(pid)


def test_bridge_errors_only(blocking_conns: Any) -> None:
    conn = blocking_conns(PROBE, tools=["env"])
    with pytest.raises(BridgeError):
        conn.call_tool("env", {})  # not connected yet
