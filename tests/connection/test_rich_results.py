"""Results of any MCP server: embedded resources and links in ``text``, task-only tools hidden, progress."""

from __future__ import annotations

import pytest

from console_bridge import AsyncMcpConnection, McpConnection, NotAllowed, Owner, ServerError
from console_bridge._governance._policy import Policy, exposure
from console_bridge._results import block_text
from tests.support.places import server_entry

pytestmark = pytest.mark.anyio

CONFIG = {"mcpServers": {"rich": server_entry("rich.py")}}


def test_block_text_covers_resources_and_links() -> None:
    assert block_text({"type": "text", "text": "a"}) == "a"
    assert block_text({"type": "resource", "resource": {"uri": "note://a", "text": "body"}}) == "body"
    blob = block_text({"type": "resource", "resource": {"uri": "file:///x.bin", "blob": "AAAA", "mimeType": "a/b"}})
    assert blob == "[embedded resource file:///x.bin (a/b, about 3 bytes)]"
    link = block_text({"type": "resource_link", "name": "report", "uri": "file:///r.csv", "mimeType": "text/csv"})
    assert link == "[resource link report: file:///r.csv (text/csv)]"
    assert block_text({"type": "image", "data": "", "mimeType": "image/png"}) is None


def test_task_required_is_never_exposed() -> None:
    decided = exposure(Policy(mode="read_write"), {"readOnlyHint": True}, (), {"taskSupport": "required"})
    assert not decided.exposed
    assert exposure(Policy(), {"readOnlyHint": True}, (), {"taskSupport": "optional"}).exposed


async def test_text_includes_embedded_resources_and_names_links() -> None:
    async with AsyncMcpConnection(CONFIG, "rich", owner=Owner("a"), tools=["embedded"]) as conn:
        result = await conn.call_tool("embedded", {})
    lines = result.text.splitlines()
    assert lines[0] == "see the attachments"
    assert "embedded text" in lines
    assert any(line.startswith("[embedded resource file:///data.bin") for line in lines)
    assert "[resource link report: file:///report.csv (text/csv)]" in lines


async def test_a_task_only_tool_is_not_exposed_and_status_says_so() -> None:
    """The 2025 handshake lists ``execution.taskSupport``; 2026-07-28 moved tasks to an extension."""
    legacy = {"mcpServers": {"rich": server_entry("rich.py", "--legacy")}}
    async with AsyncMcpConnection(legacy, "rich", owner=Owner("a"), tools=["task_only", "plain"]) as conn:
        assert conn.status().protocol_version == "2025-11-25"
        assert [handle.name for handle in conn.tools()] == ["plain"]
        with pytest.raises(NotAllowed, match="taskSupport"):
            await conn.call_tool("task_only", {})
        [notice] = conn.status().notices
        assert "task_only" in notice and "taskSupport" in notice


async def test_on_2026_a_task_only_tool_is_the_servers_to_refuse() -> None:
    """On 2026-07-28 a server lists no ``execution`` unless the client takes the tasks extension (the
    bridge does not): the tool is allowlisted like any other and the server's refusal is a tool error."""
    async with AsyncMcpConnection(CONFIG, "rich", owner=Owner("a"), tools=["task_only", "plain"]) as conn:
        assert conn.status().server_info is not None and conn.status().protocol_version == "2026-07-28"
        assert [handle.name for handle in conn.tools()] == ["task_only", "plain"]
        with pytest.raises(ServerError, match="must be called as a task"):
            await conn.call_tool("task_only", {})
        assert (await conn.call_tool("plain", {})).text == "plain"


async def test_on_progress_sends_a_token_and_receives_notifications() -> None:
    seen: list[tuple[float, float | None, str | None]] = []
    async with AsyncMcpConnection(CONFIG, "rich", owner=Owner("a"), tools=["progress"]) as conn:
        plain = await conn.call_tool("progress", {})
        assert plain.text == "token None"
        result = await conn.call_tool("progress", {}, on_progress=lambda p, t, m: seen.append((p, t, m)))
    assert result.text != "token None"
    assert seen == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]


def test_blocking_on_progress() -> None:
    seen: list[float] = []
    with McpConnection(CONFIG, "rich", owner=Owner("a"), tools=["progress"]) as conn:
        conn.call_tool("progress", {}, on_progress=lambda p, t, m: seen.append(p))
    assert seen == [1, 2, 3]
