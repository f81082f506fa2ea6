"""Issue 32: the governed client negotiates 2026-07-28 and falls back to the 2025 handshake, and every
gate decision holds in both eras; a server's request for input mid-call gets nothing it can use.

The SDK servers (``wellbehaved.py``, ``rich.py``) serve both eras; ``--legacy`` makes them a 2025
server, as most servers deployed before 2026-07-28 are (``server/discover`` gets -32601).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from console_bridge import (
    ApprovalDenied,
    AsyncMcpConnection,
    AuditLog,
    LaunchRefused,
    NotAllowed,
    Owner,
    Policy,
    ServerError,
)
from tests.connection.helpers import read_log
from tests.support.places import server_entry

pytestmark = pytest.mark.anyio

ERAS = {"2026-07-28": (), "2025-11-25": ("--legacy",)}


@pytest.mark.parametrize("era", list(ERAS))
async def test_the_gate_holds_in_both_eras(conns: Any, tmp_path: Path, era: str) -> None:
    audit = tmp_path / "audit.jsonl"
    entry = server_entry("wellbehaved.py", *ERAS[era])
    floor = conns(entry, tools=["echo", "add", "write_note"], policy=Policy(audit=AuditLog(audit)))
    await floor.connect()
    assert floor.status().protocol_version == era
    # the read-only floor hides the write tool; the allowlist refuses what it does not name
    assert [handle.name for handle in floor.tools()] == ["echo", "add"]
    with pytest.raises(NotAllowed, match="read-only"):
        await floor.call_tool("write_note", {"text": "x"})
    with pytest.raises(NotAllowed, match="allowlist"):
        await floor.call_tool("lookup", {"q": "x"})
    assert (await floor.call_tool("echo", {"text": "hi"})).text == "hi"
    assert (await floor.call_tool("add", {"a": 2, "b": 3})).structured == {"sum": 5}
    await floor.close()
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    [connected] = [r for r in records if r.get("action") == "connect"]
    assert connected["protocol"] == era
    # approval: the approver sees each write and only True lets it through
    policy = Policy(mode="read_write", approve=lambda request: request.arguments.get("text") != "no")
    writes = conns(entry, tools=["write_note"], policy=policy)
    await writes.connect()
    with pytest.raises(ApprovalDenied):
        await writes.call_tool("write_note", {"text": "no"})
    assert (await writes.call_tool("write_note", {"text": "yes"})).text == "saved"


async def test_an_elicitation_mid_call_is_declined_and_the_state_echoed(conns: Any, tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"
    policy = Policy(audit=AuditLog(audit))
    conn = conns(server_entry("rich.py"), tools=["ask", "plain"], policy=policy)
    await conn.connect()
    assert conn.status().protocol_version == "2026-07-28"
    result = await conn.call_tool("ask", {"what": "elicitation", "rounds": 2})
    # two rounds: the state came back byte for byte each time, the answer was a decline
    assert result.text == "state 2 answers {'q': {'action': 'decline'}}"
    asked = [json.loads(line) for line in audit.read_text().splitlines()]
    asked = [r for r in asked if r.get("event") == "input_request"]
    expected = ("tool 'ask'", ["q: elicitation/create"], "declined")
    assert [(r["target"], r["requests"], r["answer"]) for r in asked] == [expected] * 2
    assert (await conn.call_tool("plain", {})).text == "plain"  # the connection goes on


async def test_a_sampling_request_mid_call_is_refused_as_a_server_error(conns: Any) -> None:
    conn = conns(server_entry("rich.py"), tools=["ask", "plain"])
    await conn.connect()
    with pytest.raises(ServerError, match="sampling/createMessage"):
        await conn.call_tool("ask", {"what": "sampling"})
    assert (await conn.call_tool("plain", {})).text == "plain"


async def test_a_server_that_asks_without_end_is_cut_off(conns: Any) -> None:
    conn = conns(server_entry("rich.py"), tools=["ask", "plain"])
    await conn.connect()
    with pytest.raises(ServerError, match="asked for input more than 8 times"):
        await conn.call_tool("ask", {"rounds": 1000})
    assert (await conn.call_tool("plain", {})).text == "plain"


async def test_legacy_skips_the_2026_probe(conns: Any, log: Path) -> None:
    """``protocol="legacy"``: a server known to speak 2025 only (mcp-console) costs no probe per start."""
    conn = conns(server_entry("wellbehaved.py", "--log", str(log)), protocol="legacy")
    await conn.connect()
    assert conn.status().protocol_version == "2025-11-25"
    await conn.close()
    assert read_log(log)[:2] == ["initialize", "notifications/initialized"] and "server/discover" not in read_log(log)


def test_an_unknown_protocol_is_refused() -> None:
    with pytest.raises(LaunchRefused, match="protocol must be 'auto'"):
        AsyncMcpConnection({"mcpServers": {"s": {"command": "true"}}}, "s", owner=Owner("a"), protocol="2024")  # type: ignore[arg-type]


def test_the_blocking_twin_takes_the_protocol_too(tmp_path: Path) -> None:
    from console_bridge import McpConnection

    config = {"mcpServers": {"s": server_entry("wellbehaved.py")}}
    with McpConnection(config, "s", owner=Owner("a"), tools=["echo"], protocol="legacy") as conn:
        assert conn.status().protocol_version == "2025-11-25"
        assert conn.call_tool("echo", {"text": "hi"}).text == "hi"
    with McpConnection(config, "s", owner=Owner("a"), tools=["echo"]) as conn:
        assert conn.status().protocol_version == "2026-07-28"
