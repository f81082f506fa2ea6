"""The read-only floor (an allowlist of positively read-only tools) and the approval gate, on real servers.

Every refusal is checked twice: the exception, and the audit record, and the server's own
log proves whether it was contacted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from console_bridge import ApprovalDenied, ApprovalRequest, NotAllowed, OwnerMismatch, Policy, run_context

from .support import OTHER, OWNER, calls, connected, only, records

pytestmark = pytest.mark.anyio

WELL_TOOLS = ["echo", "add", "write_note", "lookup", "search_web"]


async def test_read_only_floor_exposes_only_positively_read_only_tools(tmp_path: Path) -> None:
    audit, log = tmp_path / "audit.jsonl", tmp_path / "server.log"
    async with connected("wellbehaved.py", tools=WELL_TOOLS, policy=Policy(audit=audit), log=log) as conn:
        assert sorted(handle.name for handle in conn.tools()) == ["add", "echo"]
        for name, reason in (("lookup", "unannotated"), ("write_note", "write-like"), ("search_web", "write-like")):
            with pytest.raises(NotAllowed, match="not positively read-only") as caught:
                await conn.call_tool(name, {"q": "x", "text": "x"})
            assert caught.value.server == "srv"
            refusal = only(records(audit, "refusal", tool=name))
            assert refusal["reason"] == "read-only floor" and refusal["reasons"] == [reason]
            assert (refusal["owner"], refusal["agent_id"], refusal["server"]) == ("agent-x/sess-1", "agent-x", "srv")
        assert (await conn.call_tool("echo", {"text": "hi"})).text == "hi"
    assert calls(log) == ["echo"], "refused tools must never reach the server"
    schema = {r["tool"]: r for r in records(audit, "schema")}
    assert {name: r["exposed"] for name, r in schema.items()} == {
        "echo": True,
        "add": True,
        "write_note": False,
        "lookup": False,
        "search_web": False,
    }


async def test_write_tool_named_like_a_read_with_no_annotations_is_refused(tmp_path: Path) -> None:
    audit, log = tmp_path / "audit.jsonl", tmp_path / "server.log"
    async with connected("bigoutput.py", tools=["get_file"], policy=Policy(audit=audit), log=log) as conn:
        assert conn.tools() == []
        with pytest.raises(NotAllowed, match="unannotated"):
            await conn.call_tool("get_file", {"path": "README.md"})
    assert calls(log) == []
    assert only(records(audit, "refusal", tool="get_file"))["reasons"] == ["unannotated"]


async def test_read_write_without_a_gate_denies_writes(tmp_path: Path) -> None:
    audit, log = tmp_path / "audit.jsonl", tmp_path / "server.log"
    policy = Policy(mode="read_write", audit=audit)
    async with connected("bigoutput.py", tools=["get_file"], policy=policy, log=log) as conn:
        [handle] = conn.tools()
        assert handle.requires_approval
        with pytest.raises(ApprovalDenied, match="no approval gate is configured"):
            await handle({"path": "README.md"})
    assert calls(log) == []
    record = only(records(audit, "approval", tool="get_file"))
    assert record["approved"] is False and record["gate"] is False and record["reason"] == "unannotated"
    assert records(audit, "call_start") == []


async def test_sync_gate_sees_the_full_request_and_is_asked_for_every_write(tmp_path: Path) -> None:
    audit, log = tmp_path / "audit.jsonl", tmp_path / "server.log"
    seen: list[ApprovalRequest] = []

    def approve(request: ApprovalRequest) -> bool:
        seen.append(request)
        if request.tool == "lookup":
            request.arguments["q"] = "tampered"  # type: ignore[index]  # a copy: what is sent stays as asked
        return request.arguments.get("text") != "forbidden"

    policy = Policy(mode="read_write", approve=approve, audit=audit)
    async with connected("wellbehaved.py", tools=WELL_TOOLS, policy=policy, log=log) as conn:
        assert {h.name: h.requires_approval for h in conn.tools()} == {
            "echo": False,
            "add": False,
            "write_note": True,
            "lookup": True,
            "search_web": True,
        }
        for _ in range(3):
            assert (await conn.call_tool("write_note", {"text": "ok"})).text == "saved"
        with pytest.raises(ApprovalDenied, match="the approval gate said no"):
            await conn.call_tool("write_note", {"text": "forbidden"})
        assert (await conn.call_tool("lookup", {"q": "weather"})).text == "result for weather"
        await conn.call_tool("echo", {"text": "read-only: no gate"})
        with run_context(OWNER):
            await conn.call_tool("search_web", {"q": "news"})
    assert [r.tool for r in seen] == ["write_note"] * 4 + ["lookup", "search_web"]
    first = seen[0]
    assert (first.tool, dict(first.arguments), first.server, first.owner) == (
        "write_note",
        {"text": "ok"},
        "srv",
        OWNER,
    )
    assert dict(first.annotations) == {"readOnlyHint": False, "destructiveHint": True}
    assert first.reason == "write-like" and first.flags == ()
    assert seen[4].reason == "unannotated" and dict(seen[4].annotations) == {}
    assert seen[5].reason == "write-like" and seen[5].annotations["openWorldHint"] is True
    assert calls(log) == ["write_note"] * 3 + ["lookup", "echo", "search_web"]
    approvals = records(audit, "approval")
    assert [r["approved"] for r in approvals] == [True, True, True, False, True, True]
    denied = approvals[3]
    assert denied["tool"] == "write_note" and denied["gate"] is True and "error" not in denied
    # an approved call's approval, start and end records share its call id
    call_id = approvals[0]["call"]
    assert [r["event"] for r in records(audit, call=call_id)] == ["approval", "call_start", "call_end"]
    assert records(audit, call=denied["call"]) == [denied]


async def test_async_gate_and_the_run_context_owner(tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"
    seen: list[ApprovalRequest] = []

    async def approve(request: ApprovalRequest) -> bool:
        await anyio.sleep(0)
        seen.append(request)
        return True

    policy = Policy(mode="read_write", approve=approve, audit=audit)
    async with connected("bigoutput.py", tools=["get_file"], policy=policy) as conn:
        with run_context(OTHER), pytest.raises(OwnerMismatch):
            await conn.call_tool("get_file", {"path": "a"})  # another agent's turn cannot use this connection
        with run_context(OWNER):
            assert (await conn.call_tool("get_file", {"path": "a"})).text == "deleted"
        assert (await conn.call_tool("get_file", {"path": "b"})).text == "deleted"
    assert [r.owner for r in seen] == [OWNER, OWNER]  # the mismatched call never reached the gate
    assert [r["approved"] for r in records(audit, "approval")] == [True, True]


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_an_exception_in_the_gate_is_a_denial_and_is_audited(tmp_path: Path, kind: str) -> None:
    audit, log = tmp_path / "audit.jsonl", tmp_path / "server.log"

    def broken(request: ApprovalRequest) -> bool:
        raise RuntimeError("approval service unreachable")

    async def broken_async(request: ApprovalRequest) -> bool:
        raise RuntimeError("approval service unreachable")

    gate: Any = broken if kind == "sync" else broken_async
    policy = Policy(mode="read_write", approve=gate, audit=audit)
    async with connected("bigoutput.py", tools=["get_file"], policy=policy, log=log) as conn:
        with pytest.raises(ApprovalDenied, match="approval service unreachable"):
            await conn.call_tool("get_file", {"path": "x"})
        assert conn.status().state == "idle"
    assert calls(log) == []
    record = only(records(audit, "approval"))
    assert record["approved"] is False and record["error"] == "RuntimeError: approval service unreachable"


async def test_a_gate_that_never_answers_is_a_denial_after_approval_timeout(tmp_path: Path) -> None:
    audit, log = tmp_path / "audit.jsonl", tmp_path / "server.log"
    never = anyio.Event()

    async def stuck(request: ApprovalRequest) -> bool:
        await never.wait()
        return True

    policy = Policy(mode="read_write", approve=stuck, approval_timeout=0.2, audit=audit)
    async with connected("bigoutput.py", tools=["get_file"], policy=policy, log=log) as conn:
        with anyio.fail_after(10), pytest.raises(ApprovalDenied, match="approval_timeout"):
            await conn.call_tool("get_file", {"path": "x"})
    assert calls(log) == []
    assert "approval_timeout=0.2s" in only(records(audit, "approval"))["error"]


async def test_approve_writes_false_lets_writes_through_but_not_flagged_tools(tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"
    asked: list[str] = []
    policy = Policy(mode="read_write", approve_writes=False, approve=lambda r: asked.append(r.tool) or False)
    async with connected("bigoutput.py", tools=["get_file"], policy=policy) as conn:
        assert (await conn.call_tool("get_file", {"path": "x"})).text == "deleted"
    policy = Policy(
        mode="read_write", approve_writes=False, approve=lambda r: asked.append(r.tool) or False, audit=audit
    )
    async with connected("poisoned.py", tools=["poisoned_desc"], policy=policy) as conn:
        with pytest.raises(ApprovalDenied):
            await conn.call_tool("poisoned_desc", {"notes": "x"})
    assert asked == ["poisoned_desc"]
    assert only(records(audit, "approval"))["reason"] == "flagged description"
