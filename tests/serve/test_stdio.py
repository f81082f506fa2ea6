"""``console-bridge serve`` over stdio: the official SDK client and console-bridge's own
McpConnection against the real server process (nothing mocked between them)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from console_bridge import McpConnection, NotAllowed, Owner, Policy
from tests.serve.conftest import finalized, leftovers, recordings_of, serve_args, serve_env
from tests.support.waiting import until

pytestmark = [pytest.mark.anyio, pytest.mark.console, pytest.mark.slow]


def text(result: Any) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


def params(tmp_path: Path, *extra: str) -> StdioServerParameters:
    command, *args = serve_args(tmp_path, *extra)
    return StdioServerParameters(command=command, args=args, env=serve_env(tmp_path), cwd=str(tmp_path))


async def wait_gone(tmp_path: Path, bound: float = 30.0) -> None:
    await until(lambda: leftovers(tmp_path), lambda left: not left, bound=bound, every=0.05)


async def test_sdk_client_cells_resources_cancel_close(tmp_path: Path) -> None:
    async with stdio_client(params(tmp_path)) as (read, write), ClientSession(read, write) as session:
        init = await session.initialize()
        assert init.server_info.name == "console-bridge"
        assert "console-bridge:" in (init.instructions or "")
        assert "Persistent Python" in (init.instructions or "")  # mcp-console's own instructions come first
        tool, *others = (await session.list_tools()).tools
        assert tool.name == "send"
        assert [t.name for t in others] == ["console_open", "console_close", "console_list"]
        props = tool.input_schema["properties"]
        assert set(props) == {"python", "sql", "timeout_ms", "control", "stdin", "console_id"}
        assert props["control"]["anyOf"] == [{"type": "string", "enum": ["interrupt"]}, {"type": "null"}]
        assert props["timeout_ms"]["default"] <= props["timeout_ms"]["anyOf"][0]["maximum"] == 30000
        assert "reserved for the host" in (tool.description or "")
        assert "300000" not in (tool.description or "")
        # strict clients send every field, the unused ones null: that is a plain cell, not an interrupt
        nulls = {"sql": None, "timeout_ms": None, "control": None, "stdin": None, "console_id": None}
        assert text(await session.call_tool("send", {"python": "'no interrupt'", **nulls})).strip() == "'no interrupt'"

        await session.call_tool("send", {"python": "x = 21"})
        assert text(await session.call_tool("send", {"python": "x * 2"})).strip() == "42"
        await session.call_tool("send", {"sql": "create table t as select 7 as v"})
        assert "42" in text(await session.call_tool("send", {"sql": "select v * 6 from t"}))

        resources = {str(r.uri) for r in (await session.list_resources()).resources}
        assert resources == {"console://session/sandbox", "console://session/transcript"}
        sandbox = json.loads((await session.read_resource("console://session/sandbox")).contents[0].text)  # type: ignore[union-attr]
        assert sandbox["sandbox"]["network"] == "restricted" and sandbox["sandbox"]["sandboxed"] is True
        assert "memory" in sandbox["limits"] and "deny_read" not in sandbox  # which host files exist stays hidden
        transcript = (await session.read_resource("console://session/transcript")).contents[0].text  # type: ignore[union-attr]
        assert "x * 2" in transcript
        assert "console-bridge-probe" not in transcript and "canary" not in transcript

        # a client cancel (notifications/cancelled) interrupts the cell; the next call works
        progress: list[float] = []

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            progress.append(value)

        started = time.monotonic()
        with anyio.move_on_after(3):
            await session.call_tool(
                "send",
                {"python": "import time\nfor i in range(600):\n    time.sleep(0.1)\nstill = 'ran to the end'"},
                progress_callback=on_progress,
            )
        assert time.monotonic() - started < 10
        assert progress and progress == sorted(progress)
        after = await session.call_tool("send", {"python": "'still' in globals()"})
        assert not after.is_error, text(after)
        assert text(after).strip() == "False"
        assert text(await session.call_tool("send", {"python": "x"})).strip() == "21"  # state kept
    await wait_gone(tmp_path)
    assert leftovers(tmp_path) == []
    [run] = recordings_of(tmp_path)
    assert finalized(run)


async def test_bad_input_keeps_the_session(tmp_path: Path) -> None:
    from mcp.shared.exceptions import MCPError

    async with stdio_client(params(tmp_path)) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        with pytest.raises(MCPError, match="unknown tool"):
            await session.call_tool("restart_everything", {})
        wrong = await session.call_tool("send", {"python": 5})
        assert wrong.is_error and "python" in text(wrong)
        extra = await session.call_tool("send", {"python": "1", "shell": "rm -rf /"})
        assert extra.is_error and "shell" in text(extra)
        restart = await session.call_tool("send", {"control": "restart"})
        assert restart.is_error
        huge_wait = await session.call_tool("send", {"python": "'clamped'", "timeout_ms": 10**15})
        assert not huge_wait.is_error and "clamped" in text(huge_wait)  # clamped to the poll window
        negative = await session.call_tool("send", {"timeout_ms": -1})
        assert negative.is_error
        big = await session.call_tool("send", {"python": "# " + "x" * 10_000_000 + "\n'big'"})
        assert "big" in text(big) or big.is_error
        assert text(await session.call_tool("send", {"python": "6 * 7"})).strip() == "42"
    await wait_gone(tmp_path)
    assert leftovers(tmp_path) == []


def test_mcp_connection_governs_serve(tmp_path: Path) -> None:
    """console-bridge's own client governing its own server: pinned schema, read-only floor."""
    command, *args = serve_args(tmp_path)
    env = {k: v for k, v in serve_env(tmp_path).items() if k in ("CONSOLE_BRIDGE_STATE_DIR", "XDG_DATA_HOME")}
    config = {"mcpServers": {"cb": {"command": command, "args": args, "cwd": str(tmp_path), "env": env}}}
    # the default read-only floor hides send (not annotated read-only) and refuses it locally
    with McpConnection(config, "cb", owner=Owner("agent-1"), tools=["send"], timeout=60) as conn:
        assert conn.tools() == []
        with pytest.raises(NotAllowed):
            conn.call_tool("send", {"python": "1"})
    policy = Policy(mode="read_write", approve=lambda request: True, pin_schemas="strict")
    with McpConnection(config, "cb", owner=Owner("agent-1"), tools=["send"], policy=policy, timeout=60) as conn:
        [handle] = conn.tools()
        assert handle.name == "send"
        handle.call({"python": "y = 5"})
        assert handle.call({"python": "y + 1"}).text.strip() == "6"  # strict pinning re-lists before each call
        assert conn.status().server_info["name"] == "console-bridge"  # type: ignore[index]
        assert not conn.status().revoked
    deadline = time.monotonic() + 30
    while leftovers(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert leftovers(tmp_path) == []
    assert all(finalized(run) for run in recordings_of(tmp_path))
    assert os.listdir(tmp_path / "recordings" / "sessions")


def test_closing_stdin_finalizes_and_exits_zero(tmp_path: Path) -> None:
    """The bare wire: JSON-RPC lines in, stdin closed, exit status 0, recording finalized."""
    import subprocess

    lines = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "send", "arguments": {"python": "6*7"}}},
    ]
    audit = tmp_path / "audit.jsonl"
    proc = subprocess.Popen(
        serve_args(tmp_path, "--audit", str(audit)),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=serve_env(tmp_path),
        cwd=tmp_path,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("".join(json.dumps(line) + "\n" for line in lines).encode())
    proc.stdin.flush()
    replies: dict[int, Any] = {}
    while 2 not in replies:  # bounded by the test's timeout; a closed stdout ends it too
        line = proc.stdout.readline()
        assert line, "serve closed stdout before answering"
        reply = json.loads(line)
        replies[reply.get("id")] = reply
    assert replies[2]["result"]["content"][0]["text"].strip() == "42"
    proc.stdin.close()  # the client goes away: the session closes cleanly and serve exits 0
    try:
        status = proc.wait(timeout=60)
        assert proc.stderr is not None
        err = proc.stderr.read()
    finally:
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
    assert status == 0, err.decode(errors="replace")[-2000:]
    events = [json.loads(line) for line in audit.read_text().splitlines()]
    assert any(e.get("tool") == "send" and e.get("owner") == "mcp-stdio" for e in events), events[-5:]
    assert leftovers(tmp_path) == []
    [run] = recordings_of(tmp_path)
    assert finalized(run)


async def test_handles_in_both_eras(tmp_path: Path) -> None:
    """console_open gives a console of its own; its id works across clients of the same server,
    a closed or made-up id is a tool error that says to call console_open; 2026-07-28 works over stdio."""
    from mcp import Client

    async with stdio_client(params(tmp_path)) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        assert (await session.list_prompts()).prompts == []
        [template] = (await session.list_resource_templates()).resource_templates
        assert template.uri_template == "console://console/{console_id}/transcript"
        opened = await session.call_tool("console_open", {})
        assert not opened.is_error, text(opened)
        assert opened.structured_content is not None
        console_id = opened.structured_content["console_id"]
        assert len(console_id) >= 22 and opened.structured_content["idle_timeout_s"] == 600
        await session.call_tool("send", {"python": "where = 'handle'", "console_id": console_id})
        await session.call_tool("send", {"python": "where = 'session'"})
        # each console's transcript by its handle; the session's own is another console
        by_handle = (await session.read_resource(f"console://console/{console_id}/transcript")).contents[0]
        assert "where = 'handle'" in by_handle.text and "where = 'session'" not in by_handle.text  # type: ignore[union-attr]
        own = (await session.read_resource("console://session/transcript")).contents[0]
        assert "where = 'session'" in own.text and "where = 'handle'" not in own.text  # type: ignore[union-attr]
        mine = await session.call_tool("send", {"python": "where", "console_id": console_id})
        assert text(mine).strip() == "'handle'"
        assert text(await session.call_tool("send", {"python": "where"})).strip() == "'session'"
        listed = await session.call_tool("console_list", {})
        assert listed.structured_content is not None
        consoles = {c["console_id"]: c for c in listed.structured_content["consoles"]}
        assert console_id in consoles and len(consoles) == 2
        assert not consoles[console_id]["session_console"]
        closed = await session.call_tool("console_close", {"console_id": console_id})
        assert not closed.is_error, text(closed)
        gone = await session.call_tool("send", {"python": "1", "console_id": console_id})
        assert gone.is_error and "console_open" in text(gone) and "console_close" in text(gone)
        made_up = await session.call_tool("send", {"python": "1", "console_id": "A" * 32})
        assert made_up.is_error and "not from this server process" in text(made_up) and "console_open" in text(made_up)
        ours_unknown = await session.call_tool("send", {"python": "1", "console_id": console_id[:7] + "B" * 32})
        assert ours_unknown.is_error and "unknown console_id" in text(ours_unknown)
    await wait_gone(tmp_path)
    # a client that starts a server per call (langchain's get_tools(), the Inspector CLI): the handle of the
    # last process is told apart, and the text does not invite a loop on console_open
    async with stdio_client(params(tmp_path)) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        stale = await session.call_tool("send", {"python": "1", "console_id": console_id})
        assert stale.is_error and "not from this server process" in text(stale), text(stale)
        assert "does not bring the old one back" in text(stale) and "--transport http" in text(stale)
    await wait_gone(tmp_path)
    assert leftovers(tmp_path) == []
    assert len(recordings_of(tmp_path)) == 3 and all(finalized(run) for run in recordings_of(tmp_path))

    async with Client(params(tmp_path), mode="2026-07-28") as client:
        assert client.protocol_version == "2026-07-28"
        names = [t.name for t in (await client.list_tools()).tools]
        assert names == ["send", "console_open", "console_close", "console_list"]
        opened = await client.call_tool("console_open", {})
        assert opened.structured_content is not None
        console_id = opened.structured_content["console_id"]
        await client.call_tool("send", {"python": "kept = 6", "console_id": console_id})
        again = await client.call_tool("send", {"python": "kept * 7", "console_id": console_id})
        assert text(again).strip() == "42"
        # over stdio the process is the client's session in either era: no handle, its own console
        assert text(await client.call_tool("send", {"python": "'own'"})).strip() == "'own'"
    await wait_gone(tmp_path)
    assert leftovers(tmp_path) == []
