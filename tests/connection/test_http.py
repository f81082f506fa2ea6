"""Streamable HTTP: the same flows against wellbehaved.py under uvicorn on 127.0.0.1."""

from __future__ import annotations

import socket
from typing import Any

import anyio
import pytest

from console_bridge import (
    BridgeError,
    Busy,
    CallTimeout,
    ConnectionClosed,
    NotAllowed,
    VerificationFailed,
)
from tests.support.waiting import eventually

from .conftest import HttpServer

pytestmark = pytest.mark.anyio


def entry(url: str, **headers: str) -> dict[str, Any]:
    return {"url": url, "headers": headers} if headers else {"url": url}


async def wait_for(server: HttpServer, mark: int, line: str, timeout: float = 5.0) -> None:
    await eventually(lambda: line in server.lines_since(mark), timeout, f"{line!r} in the server's log", every=0.01)


async def test_basic_flows(conns: Any, http_server: HttpServer) -> None:
    mark = http_server.mark()
    conn = conns(entry(http_server.url), tools=["echo", "add"], resources=["note://alpha"], prompts=["greet"])
    await conn.connect()
    status = conn.status()
    assert status.state == "idle" and status.transport == "http" and status.pid is None
    assert status.server_info is not None and status.server_info["name"] == "wellbehaved"
    assert (await conn.call_tool("echo", {"text": "over http"})).text == "over http"
    added = await conn.call_tool("add", {"a": 2, "b": 3})
    assert added.structured == {"sum": 5}
    page = await conn.discover("tools")
    assert len(page.items) == 3 and page.next_cursor == "3"
    assert (await conn.read_resource("note://alpha")).text == "alpha text"
    assert "Hello, Cy!" in (await conn.get_prompt("greet", {"name": "Cy"})).text
    [echo, _add] = conn.tools()
    assert (await echo({"text": "handle"})).text == "handle"
    with pytest.raises(NotAllowed):
        await conn.call_tool("write_note", {"text": "x"})
    with pytest.raises(NotAllowed):
        await conn.read_resource("note://secret")
    await conn.call_tool("echo", {"text": "barrier"})
    lines = http_server.lines_since(mark)
    assert "tools/call echo" in lines and "tools/call add" in lines
    assert "tools/call write_note" not in lines and "resources/read note://secret" not in lines
    await conn.close()
    assert conn.status().state == "closed"
    with pytest.raises(ConnectionClosed):
        await echo({"text": "after close"})


async def test_configured_headers_are_sent(conns: Any, http_server: HttpServer) -> None:
    mark = http_server.mark()
    conn = conns(entry(http_server.url, **{"X-Api-Key": "k-123", "Authorization": "Bearer t0k"}), tools=["echo"])
    await conn.connect()
    await conn.call_tool("echo", {"text": "x"})
    lines = http_server.lines_since(mark)
    assert "header x-api-key k-123" in lines
    assert "header authorization Bearer t0k" in lines
    # on every request, not just the first
    assert lines.count("header x-api-key k-123") >= lines.count("tools/call echo") + lines.count("initialize")


async def test_redirect_to_the_same_origin_is_followed(conns: Any, http_server: HttpServer) -> None:
    mark = http_server.mark()
    conn = conns(entry(f"{http_server.base}/redirect-same", **{"X-Api-Key": "k-same"}), tools=["echo"])
    await conn.connect()
    assert (await conn.call_tool("echo", {"text": "redirected"})).text == "redirected"
    lines = http_server.lines_since(mark)
    assert "tools/call echo" in lines
    assert "header x-api-key k-same" in lines  # the headers survive a same-origin redirect


async def test_redirect_to_another_origin_is_not_followed(conns: Any, http_server: HttpServer) -> None:
    mark = http_server.mark()
    conn = conns(entry(f"{http_server.base}/redirect-other", **{"X-Api-Key": "k-leak"}), tools=["echo"])
    with pytest.raises(BridgeError) as info:
        await conn.connect()
    assert "redirect" in str(info.value).lower()
    assert "localhost" in str(info.value)
    assert conn.status().state == "closed"
    # nothing reached the other origin's /mcp (same process here, so its log would show it)
    assert "initialize" not in http_server.lines_since(mark)
    assert "header x-api-key k-leak" not in http_server.lines_since(mark)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def test_nothing_listening_is_a_bridge_error(conns: Any) -> None:
    conn = conns(entry(f"http://127.0.0.1:{free_port()}/mcp"), startup_timeout=5)
    with pytest.raises(BridgeError):
        await conn.connect()
    assert conn.status().state == "closed"


async def test_wrong_path_is_a_bridge_error(conns: Any, http_server: HttpServer) -> None:
    conn = conns(entry(f"{http_server.base}/not-mcp"), startup_timeout=5)
    with pytest.raises(BridgeError):
        await conn.connect()
    assert conn.status().state == "closed"


async def test_missing_tool_over_http(conns: Any, http_server: HttpServer) -> None:
    conn = conns(entry(http_server.url), tools=["nope"])
    with pytest.raises(VerificationFailed, match="nope"):
        await conn.connect()


async def test_busy_and_timeout_over_http(conns: Any, http_server: HttpServer) -> None:
    mark = http_server.mark()
    conn = conns(entry(http_server.url), tools=["slow", "echo"], timeout=1.0)
    await conn.connect()
    failures: list[BaseException] = []

    async def slow() -> None:
        try:
            await conn.call_tool("slow", {"seconds": 30})
        except BaseException as exc:
            failures.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(slow)
        await wait_for(http_server, mark, "tools/call slow")
        with pytest.raises(Busy):
            await conn.call_tool("echo", {"text": "second"})
    [failure] = failures
    assert isinstance(failure, CallTimeout)
    assert conn.status().state == "closed"
    with pytest.raises(ConnectionClosed):
        await conn.call_tool("echo", {"text": "after"})
    assert "tools/call echo" not in http_server.lines_since(mark)
