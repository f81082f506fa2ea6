"""No untyped error leaks: every known failure mode of a connection raises a BridgeError.

Each case catches *anything* the failing call raises and checks it is the expected
BridgeError subclass with a message that says what happened (httpx's
``map_httpcore_exceptions`` test, for this package).
"""

from __future__ import annotations

import json
import os
import signal
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from console_bridge import (
    AsyncMcpConnection,
    BridgeError,
    Busy,
    CallTimeout,
    ConnectionClosed,
    Desynchronized,
    LaunchRefused,
    NotAllowed,
    OwnerMismatch,
    ServerError,
    VerificationFailed,
    run_context,
)
from tests.support.places import server_entry

from .helpers import OTHER, OWNER, ProcessWatch, config, wait_for_line

pytestmark = pytest.mark.anyio

Scenario = Callable[[Any, Path], Awaitable[object]]


def conn_of(conns: Any, entry: dict[str, Any], **kwargs: Any) -> AsyncMcpConnection:
    conn: AsyncMcpConnection = conns(entry, **kwargs)
    return conn


async def missing_file(conns: Any, tmp: Path) -> object:
    return AsyncMcpConnection(tmp / "missing.json", "s", owner=OWNER)


async def invalid_json(conns: Any, tmp: Path) -> object:
    (tmp / "bad.json").write_text("{", encoding="utf-8")
    return AsyncMcpConnection(tmp / "bad.json", "s", owner=OWNER)


async def unknown_server(conns: Any, tmp: Path) -> object:
    return AsyncMcpConnection(config(server_entry("probe.py")), "other", owner=OWNER)


async def missing_command(conns: Any, tmp: Path) -> object:
    return await conn_of(conns, {"command": str(tmp / "no-such-binary")}).connect()


async def not_executable(conns: Any, tmp: Path) -> object:
    script = tmp / "plain.txt"
    script.write_text("not a program", encoding="utf-8")
    return await conn_of(conns, {"command": str(script)}).connect()


async def startup_timeout(conns: Any, tmp: Path) -> object:
    return await conn_of(conns, server_entry("mute.py"), startup_timeout=0.3, shutdown_grace=0.2).connect()


async def server_exits_at_once(conns: Any, tmp: Path) -> object:
    return await conn_of(conns, {"command": "false"}).connect()


async def verification_failed(conns: Any, tmp: Path) -> object:
    return await conn_of(conns, server_entry("probe.py"), tools=["nope"]).connect()


async def call_on(conns: Any, script: str, **kwargs: Any) -> object:
    conn = conn_of(conns, server_entry(script), tools=["t"], **kwargs)
    await conn.connect()
    return await conn.call_tool("t", {})


async def call_timeout(conns: Any, tmp: Path) -> object:
    return await call_on(conns, "hang.py", timeout=0.3)


async def wrong_id(conns: Any, tmp: Path) -> object:
    return await call_on(conns, "wrong_id.py")


async def garbage(conns: Any, tmp: Path) -> object:
    return await call_on(conns, "garbage.py")


async def wrong_shape(conns: Any, tmp: Path) -> object:
    return await call_on(conns, "wrong_shape.py")


async def exit_midcall(conns: Any, tmp: Path) -> object:
    return await call_on(conns, "exit_midcall.py")


async def killed_server(conns: Any, tmp: Path) -> object:
    conn = conn_of(conns, server_entry("probe.py"), tools=["env"])
    await conn.connect()
    assert conn.pid is not None
    os.kill(conn.pid, signal.SIGKILL)
    return await conn.call_tool("env", {})


async def method_not_found(conns: Any, tmp: Path) -> object:
    conn = conn_of(conns, server_entry("probe.py"), resources=["r://x"])
    await conn.connect()
    return await conn.read_resource("r://x")


async def not_allowlisted(conns: Any, tmp: Path) -> object:
    conn = conn_of(conns, server_entry("probe.py"), tools=["env"])
    await conn.connect()
    return await conn.call_tool("stderr", {"bytes": 1})


async def bad_arguments(conns: Any, tmp: Path) -> object:
    conn = conn_of(conns, server_entry("probe.py"), tools=["env"])
    await conn.connect()
    return await conn.call_tool("env", ["not", "a", "dict"])  # type: ignore[arg-type]


async def owner_mismatch(conns: Any, tmp: Path) -> object:
    conn = conn_of(conns, server_entry("probe.py"), tools=["env"])
    await conn.connect()
    with run_context(OTHER):
        return await conn.call_tool("env", {})


async def busy(conns: Any, tmp: Path) -> object:
    log = tmp / "server.log"
    conn = conn_of(conns, server_entry("hang.py", "--log", str(log)), tools=["t"], timeout=30)
    await conn.connect()
    second: list[BaseException] = []

    async def first() -> None:
        with pytest.raises(ConnectionClosed):
            await conn.call_tool("t", {})

    async with anyio.create_task_group() as tg:
        tg.start_soon(first)
        await wait_for_line(log, "tools/call t")
        try:
            await conn.call_tool("t", {})
        except BaseException as exc:
            second.append(exc)
        await conn.cancel()
    raise second[0]


async def used_after_close(conns: Any, tmp: Path) -> object:
    conn = conn_of(conns, server_entry("probe.py"), tools=["env"])
    await conn.connect()
    await conn.close()
    return await conn.call_tool("env", {})


async def used_before_connect(conns: Any, tmp: Path) -> object:
    return await conn_of(conns, server_entry("probe.py"), tools=["env"]).discover()


async def http_nothing_listening(conns: Any, tmp: Path) -> object:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return await conn_of(conns, {"url": f"http://127.0.0.1:{port}/mcp"}, startup_timeout=5).connect()


async def bad_config_value(conns: Any, tmp: Path) -> object:
    path = tmp / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"s": {"command": ["python"]}}}), encoding="utf-8")
    return AsyncMcpConnection(path, "s", owner=OWNER)


CASES: list[tuple[Scenario, type[BridgeError]]] = [
    (missing_file, LaunchRefused),
    (invalid_json, LaunchRefused),
    (unknown_server, LaunchRefused),
    (bad_config_value, LaunchRefused),
    (missing_command, LaunchRefused),
    (not_executable, LaunchRefused),
    (startup_timeout, CallTimeout),
    (server_exits_at_once, ConnectionClosed),
    (verification_failed, VerificationFailed),
    (call_timeout, CallTimeout),
    (wrong_id, Desynchronized),
    (garbage, Desynchronized),
    (wrong_shape, Desynchronized),
    (exit_midcall, ConnectionClosed),
    (killed_server, ConnectionClosed),
    (method_not_found, ServerError),
    (not_allowlisted, NotAllowed),
    (bad_arguments, NotAllowed),
    (owner_mismatch, OwnerMismatch),
    (busy, Busy),
    (used_after_close, ConnectionClosed),
    (used_before_connect, ConnectionClosed),
    (http_nothing_listening, ConnectionClosed),
]


@pytest.mark.parametrize(("scenario", "expected"), CASES, ids=[case.__name__ for case, _ in CASES])
async def test_failure_is_a_typed_bridge_error(
    conns: Any, watch: ProcessWatch, tmp_path: Path, scenario: Scenario, expected: type[BridgeError]
) -> None:
    try:
        await scenario(conns, tmp_path)
    except BaseException as exc:  # anything at all: the point is that it is one of ours
        error = exc
    else:
        pytest.fail(f"{scenario.__name__} raised nothing")
    assert isinstance(error, BridgeError), f"untyped {type(error).__module__}.{type(error).__qualname__}: {error}"
    assert isinstance(error, expected), f"{type(error).__name__} is not a {expected.__name__}: {error}"
    assert str(error).strip()
    assert error.__cause__ is None or isinstance(error.__cause__, BridgeError)
    if isinstance(error, ConnectionClosed | LaunchRefused | VerificationFailed):
        watch.assert_gone()
