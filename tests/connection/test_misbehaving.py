"""Misbehaving servers: a mismatched or malformed reply desynchronises (closes), a crash closes.

Each failure is a typed BridgeError, the connection is closed, nothing reconnects,
and no process survives.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

from console_bridge import BridgeError, ConnectionClosed, Desynchronized, ServerError
from tests.support.places import server_entry

from .helpers import ProcessWatch, read_log

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("script", "reason"),
    [
        ("wrong_id.py", "not outstanding"),
        ("garbage.py", "not a JSON-RPC message"),
        ("wrong_shape.py", "wrong shape"),
    ],
)
async def test_bad_reply_desynchronizes_and_closes(
    conns: Any, watch: ProcessWatch, log: Path, script: str, reason: str
) -> None:
    conn = conns(server_entry(script, "--log", str(log)), tools=["t"])
    await conn.connect()
    watch.snapshot()
    [handle] = conn.tools()
    with pytest.raises(Desynchronized) as info:
        await conn.call_tool("t", {})
    error = info.value
    assert isinstance(error, ConnectionClosed) and isinstance(error, BridgeError)
    assert reason in str(error)
    assert "create a new connection" in str(error).lower()
    assert error.server == "s"
    status = conn.status()
    assert status.state == "closed"
    assert status.last_error is not None and reason in status.last_error
    watch.assert_gone()
    # Every later use raises ConnectionClosed (the same kind), nothing is sent again.
    for attempt in (conn.call_tool("t", {}), handle({}), conn.discover()):
        with pytest.raises(ConnectionClosed):
            await attempt
    with pytest.raises(ConnectionClosed):
        await conn.connect()
    assert read_log(log).count("tools/call t") == 1


async def test_exit_midcall_reports_status_and_stderr(conns: Any, watch: ProcessWatch, log: Path) -> None:
    conn = conns(server_entry("exit_midcall.py", "--log", str(log)), tools=["t"])
    await conn.connect()
    pid = conn.pid
    with pytest.raises(ConnectionClosed) as info:
        await conn.call_tool("t", {})
    error = info.value
    assert type(error) is ConnectionClosed
    text = str(error)
    assert "status 3" in text
    assert "dying now" in text  # the stderr tail travels with the error
    assert error.stderr_tail is not None and "dying now" in error.stderr_tail
    assert error.pid == pid and error.server == "s"
    assert "dying now" in conn.status().stderr_tail
    assert conn.status().state == "closed"
    watch.assert_gone()
    with pytest.raises(ConnectionClosed, match="status 3"):
        await conn.call_tool("t", {})


async def test_server_killed_while_idle_is_a_crash_not_drift(conns: Any, watch: ProcessWatch) -> None:
    """The strict pin check re-lists first; a dead server there is a crash, not schema drift."""
    conn = conns(server_entry("probe.py"), tools=["env"])
    await conn.connect()
    assert conn.pid is not None
    os.kill(conn.pid, signal.SIGKILL)
    with pytest.raises(ConnectionClosed) as info:
        await conn.call_tool("env", {})
    assert type(info.value) is ConnectionClosed
    assert "status -9" in str(info.value)
    assert conn.status().revoked == {}
    watch.assert_gone()


async def test_server_error_response_is_a_server_error_and_keeps_the_connection(conns: Any) -> None:
    conn = conns(server_entry("wellbehaved.py"), tools=["fail", "echo"], resources=["note://missing"])
    await conn.connect()
    with pytest.raises(ServerError, match="deliberate failure") as info:
        await conn.call_tool("fail", {})
    assert info.value.result is not None and info.value.result.is_error
    with pytest.raises(ServerError, match="Resource not found") as info:
        await conn.read_resource("note://missing")
    assert info.value.code is not None
    assert conn.status().state == "idle"
    assert (await conn.call_tool("echo", {"text": "still fine"})).text == "still fine"
