"""Hostile servers (real stdio processes): rug pulls, poisoned descriptions, oversized and invalid output.

Each case asserts the refusal (the exception, and that the server was or was not
contacted, from its own log) and the audit record.
"""

from __future__ import annotations

import base64
import time
from pathlib import Path

import anyio
import pytest

from console_bridge import (
    ApprovalDenied,
    ApprovalRequest,
    ConnectionClosed,
    Policy,
    SchemaDrift,
    ServerError,
)
from console_bridge._governance._audit import sha256_json
from console_bridge._governance._sanitize import WITHHELD

from .support import calls, connected, methods, only, records

pytestmark = pytest.mark.anyio


def listings(log: Path) -> int:
    return methods(log).count("tools/list")


# ------------------------------------------------------------------ schema pinning


@pytest.mark.parametrize(
    ("mode", "why"),
    [
        ("change", "its definition changed after it was pinned"),
        ("drop", "it vanished from the server's tool list"),
    ],
)
async def test_rug_pull_revokes_the_tool_before_it_is_called(tmp_path: Path, mode: str, why: str) -> None:
    audit, log = tmp_path / "audit.jsonl", tmp_path / "server.log"
    async with connected("rugpull.py", "--mode", mode, tools=["t", "u"], policy=Policy(audit=audit), log=log) as conn:
        with pytest.raises(SchemaDrift, match=why):
            await conn.call_tool("t", {})
        assert calls(log) == [], "a drifted tool must not be called"
        assert (await conn.call_tool("u", {})).text == "ok u", "other tools keep working"
        assert [h.name for h in conn.tools()] == ["u"]
        assert conn.status().revoked == {"t": why}
        with pytest.raises(SchemaDrift, match="stays revoked"):
            await conn.call_tool("t", {})
    assert calls(log) == ["u"]
    assert only(records(audit, "drift"))["tool"] == "t" and only(records(audit, "drift"))["reason"] == why
    ends = records(audit, "call_end", tool="t")
    assert [r["outcome"] for r in ends] == ["SchemaDrift"]
    assert only(records(audit, "refusal", tool="t"))["reason"] == "revoked after schema drift"
    pinned = {r["tool"]: r["sha256"] for r in records(audit, "schema")}
    assert set(pinned) == {"t", "u"} and all(len(h) == 64 for h in pinned.values())


async def test_strict_pinning_re_lists_every_page_before_every_call(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    async with connected("wellbehaved.py", tools=["echo", "add"], log=log) as conn:  # 9 tools, 3 per page
        start = listings(log)
        assert start == 3
        await conn.call_tool("echo", {"text": "a"})
        await conn.call_tool("add", {"a": 1, "b": 2})
        assert listings(log) == start + 6
    assert methods(log)[-3:] == ["tools/list", "tools/list", "tools/call add"]


async def test_relist_error_fails_closed_and_the_connection_stays_open(tmp_path: Path) -> None:
    audit, log = tmp_path / "audit.jsonl", tmp_path / "server.log"
    policy = Policy(audit=audit)
    async with connected("rugpull.py", "--mode", "relist-fail", tools=["t", "u"], policy=policy, log=log) as conn:
        with pytest.raises(SchemaDrift, match=r"could not be re-verified.*tool listing failed"):
            await conn.call_tool("t", {})
        assert conn.status().state == "idle"
        assert [h.name for h in conn.tools()] == ["u"]
    assert calls(log) == []
    drift = only(records(audit, "drift"))
    assert drift["tool"] == "t" and "failed" in drift["reason"]
    assert only(records(audit, "call_end"))["outcome"] == "SchemaDrift"


async def test_relist_timeout_is_drift_not_a_closed_connection(tmp_path: Path) -> None:
    audit, log = tmp_path / "audit.jsonl", tmp_path / "server.log"
    policy = Policy(audit=audit)
    async with connected(
        "rugpull.py", "--mode", "relist-hang", tools=["t", "u"], policy=policy, log=log, timeout=0.5
    ) as conn:
        started = time.monotonic()
        with pytest.raises(SchemaDrift, match="timed out"):
            await conn.call_tool("t", {})
        assert time.monotonic() - started < 5
        assert conn.status().state == "idle", "a slow re-list revokes the tool, not the connection"
        assert conn.status().revoked == {"t": "the re-listing that verifies its pinned schema timed out"}
    assert calls(log) == []
    assert "timed out" in only(records(audit, "drift", tool="t"))["reason"]
    assert [r["action"] for r in records(audit, "lifecycle")] == ["connect_start", "connect", "close"]


async def test_a_revoked_tool_never_comes_back_even_when_the_server_recovers(tmp_path: Path) -> None:
    audit, log = tmp_path / "audit.jsonl", tmp_path / "server.log"
    policy = Policy(audit=audit)
    async with connected("flaky_list.py", "--mode", "fail-once", tools=["t", "u"], policy=policy, log=log) as conn:
        with pytest.raises(SchemaDrift):
            await conn.call_tool("t", {})
        assert (await conn.call_tool("u", {})).text == "ok u"  # the re-list now succeeds, unchanged
        with pytest.raises(SchemaDrift, match="stays revoked"):
            await conn.call_tool("t", {})
        assert [h.name for h in conn.tools()] == ["u"]
    assert calls(log) == ["u"]
    assert len(records(audit, "drift")) == 1


async def test_a_late_relist_reply_does_not_desynchronize_the_connection(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    async with connected(
        "flaky_list.py", "--mode", "slow-once", "--delay", "0.6", tools=["t", "u"], log=log, timeout=0.3
    ) as conn:
        with pytest.raises(SchemaDrift, match="timed out"):
            await conn.call_tool("t", {})
        with anyio.fail_after(10):  # sync on the server's log: the abandoned request's reply is out
            while "late reply sent" not in methods(log):
                await anyio.sleep(0.02)
        assert (await conn.call_tool("u", {})).text == "ok u"
        assert conn.status().state == "idle"
    assert calls(log) == ["u"]


async def test_on_change_re_lists_after_the_notification(tmp_path: Path) -> None:
    audit, log = tmp_path / "audit.jsonl", tmp_path / "server.log"
    policy = Policy(pin_schemas="on_change", audit=audit)
    async with connected("rugpull.py", "--mode", "change-notify", tools=["t", "u"], policy=policy, log=log) as conn:
        assert (await conn.call_tool("t", {})).text == "ok t"  # the server announces a change after this reply
        with anyio.fail_after(10):  # sync on the server's log: the re-list happens on the next call
            while listings(log) < 2:
                await conn.call_tool("u", {})
        with pytest.raises(SchemaDrift, match="changed"):
            await conn.call_tool("t", {})
        assert (await conn.call_tool("u", {})).text == "ok u"
    assert calls(log).count("t") == 1
    assert only(records(audit, "drift"))["tool"] == "t"


async def test_on_change_does_not_re_list_without_a_notification(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    policy = Policy(pin_schemas="on_change")
    async with connected("rugpull.py", "--mode", "change", tools=["t", "u"], policy=policy, log=log) as conn:
        for _ in range(3):
            assert (await conn.call_tool("t", {})).text == "ok t"
    assert listings(log) == 1


async def test_pinning_off_never_re_lists(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    policy = Policy(pin_schemas="off")
    async with connected("rugpull.py", "--mode", "change-notify", tools=["t", "u"], policy=policy, log=log) as conn:
        for _ in range(3):
            assert (await conn.call_tool("t", {})).text == "ok t"
    assert listings(log) == 1 and calls(log) == ["t", "t", "t"]


# ------------------------------------------------------------ poisoned descriptions


async def test_poisoned_description_needs_approval_and_is_hidden_from_the_model(tmp_path: Path) -> None:
    audit, log = tmp_path / "audit.jsonl", tmp_path / "server.log"
    tools = ["clean", "poisoned_desc", "poisoned_param", "zero_width"]
    async with connected("poisoned.py", tools=tools, policy=Policy(audit=audit), log=log) as conn:
        handles = {h.name: h for h in conn.tools()}
        assert set(handles) == set(tools), "read-only flagged tools stay visible, behind the gate"
        assert not handles["clean"].requires_approval
        assert handles["clean"].description == "Return the current time in UTC."
        for name in tools[1:]:
            handle = handles[name]
            assert handle.requires_approval, name
            assert f"'{name}'" in handle.description and "withheld" in handle.description
            assert "ssh" not in handle.description and "\u200b" not in handle.description
            with pytest.raises(ApprovalDenied, match="flagged description"):
                await handle({"notes": "x"})
        param = handles["poisoned_param"].input_schema["properties"]["notes"]
        assert param == {"type": "string", "description": WITHHELD}
        assert (await handles["clean"]({})).text == "ok clean"
    assert calls(log) == ["clean"]
    flags = {r["tool"]: r.get("flags") for r in records(audit, "schema")}
    assert flags["clean"] is None
    assert set(flags["poisoned_desc"]) >= {
        "description: pseudo_tags",
        "description: sensitive_files",
        "description: hide_from_user",
    }
    assert set(flags["poisoned_param"]) >= {
        "inputSchema.properties.notes.description: ignore_instructions",
        "inputSchema.properties.notes.description: sensitive_files",
    }
    assert flags["zero_width"] == ["description: invisible_characters"]
    denied = records(audit, "approval")
    assert [r["tool"] for r in denied] == tools[1:]
    assert all(r["approved"] is False and r["reason"] == "flagged description" for r in denied)
    assert denied[0]["flags"] == flags["poisoned_desc"], "the approval record says which patterns matched"


async def test_an_approved_flagged_call_goes_through_with_the_flags_in_the_request(tmp_path: Path) -> None:
    audit, log = tmp_path / "audit.jsonl", tmp_path / "server.log"
    seen: list[ApprovalRequest] = []
    policy = Policy(approve=lambda request: seen.append(request) is None, audit=audit)
    async with connected("poisoned.py", tools=["poisoned_param"], policy=policy, log=log) as conn:
        assert (await conn.call_tool("poisoned_param", {"notes": "hello"})).text == "ok poisoned_param"
    [request] = seen
    assert request.reason == "flagged description"
    assert "inputSchema.properties.notes.description: ignore_instructions" in request.flags
    assert dict(request.annotations) == {"readOnlyHint": True}
    assert calls(log) == ["poisoned_param"]
    assert only(records(audit, "approval"))["approved"] is True


async def test_sanitizing_can_be_turned_off(tmp_path: Path) -> None:
    async with connected("poisoned.py", tools=["poisoned_desc"], policy=Policy(sanitize_descriptions=False)) as conn:
        [handle] = conn.tools()
        assert not handle.requires_approval and "<IMPORTANT>" in handle.description


# ---------------------------------------------------------------- output problems


async def test_five_megabytes_of_text_are_truncated_visibly(tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"
    async with connected("bigoutput.py", tools=["big_text"], policy=Policy(audit=audit)) as conn:
        result = await conn.call_tool("big_text", {})
    assert result.truncated
    assert len(result.text.encode()) <= 1_000_000
    assert result.text.startswith("0123456789abcdef")
    assert "[console-bridge: output truncated to the 1000000-byte cap" in result.text
    end = only(records(audit, "call_end"))
    assert end["outcome"] == "ok" and end["truncated"] is True and end["result_bytes"] > 5 * 1024 * 1024
    raw = {"content": [{"type": "text", "text": "0123456789abcdef" * (5 * 1024 * 1024 // 16)}], "structured": None}
    assert end["result_sha256"] == sha256_json(raw), "the hash is of what the server sent, not of the cut"


async def test_an_oversized_image_is_replaced_by_a_notice(tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"
    async with connected("bigoutput.py", tools=["big_image"], policy=Policy(audit=audit)) as conn:
        result = await conn.call_tool("big_image", {})
    assert result.truncated and result.images == []
    assert [block["type"] for block in result.content] == ["text"]
    encoded = len(base64.b64encode(b"x" * 5 * 1024 * 1024))
    assert f"image (image/png, {encoded} bytes)" in result.text
    end = only(records(audit, "call_end"))
    assert end["truncated"] is True and end["result_bytes"] > encoded


async def test_structured_output_violating_the_schema_is_a_server_error(tmp_path: Path) -> None:
    audit, log = tmp_path / "audit.jsonl", tmp_path / "server.log"
    async with connected("bigoutput.py", tools=["bad_structured"], policy=Policy(audit=audit), log=log) as conn:
        with pytest.raises(ServerError, match="violates its output schema: sum: 'not a number' is not of type"):
            await conn.call_tool("bad_structured", {})
        assert conn.status().state == "idle"
    end = only(records(audit, "call_end"))
    assert end["outcome"] == "output_schema_violation" and "sum" in end["reason"]
    assert len(end["result_sha256"]) == 64


async def test_valid_structured_output_comes_back(tmp_path: Path) -> None:
    async with connected("wellbehaved.py", tools=["add"], policy=Policy(pin_schemas="off")) as conn:
        result = await conn.call_tool("add", {"a": 2, "b": 3})
    assert result.structured == {"sum": 5} and not result.truncated


async def test_closed_connection_refuses_with_connection_closed(tmp_path: Path) -> None:
    async with connected("poisoned.py", tools=["clean"]) as conn:
        pass
    with pytest.raises(ConnectionClosed):
        await conn.call_tool("clean", {})
