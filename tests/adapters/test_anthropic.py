"""Anthropic adapter, driven by the Messages API tool loop against a scripted, offline HTTP transport."""

from __future__ import annotations

import json
from collections.abc import Callable
from itertools import count
from typing import Any

import anthropic
import httpx2
import pytest

from console_bridge import (
    AsyncConsole,
    AsyncMcpConnection,
    ConnectionClosed,
    Image,
    Owner,
    OwnerMismatch,
    ToolHandle,
    ToolResult,
    run_context,
)
from console_bridge.adapters.anthropic import run_tool_uses, tool_params
from tests.adapters.conftest import INTRUDER, RESTART, SIX_TIMES_SEVEN, Gate

pytestmark = pytest.mark.anyio

Step = Callable[[list[dict[str, Any]]], dict[str, Any]]
_ids = count(1)


def reply(content: list[dict[str, Any]], stop_reason: str) -> dict[str, Any]:
    return {
        "id": f"msg_{next(_ids)}",
        "type": "message",
        "role": "assistant",
        "model": "claude-offline",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }


def call(name: str, arguments: dict[str, Any]) -> Step:
    def step(messages: list[dict[str, Any]]) -> dict[str, Any]:
        block = {"type": "tool_use", "id": f"toolu_{next(_ids)}", "name": name, "input": arguments}
        return reply([{"type": "text", "text": "Let me check."}, block], "tool_use")

    return step


def answer(messages: list[dict[str, Any]]) -> dict[str, Any]:
    last = tool_results(messages)[-1]
    return reply([{"type": "text", "text": f"The tool said: {last.get('content')}"}], "end_turn")


def tool_results(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        block
        for message in messages
        if message["role"] == "user" and isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]


class ScriptedApi:
    """``httpx2.MockTransport`` handler standing in for the Messages API; records every request body."""

    def __init__(self, *steps: Step) -> None:
        self.steps = list(steps)
        self.requests: list[dict[str, Any]] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        assert request.url.path == "/v1/messages"
        body = json.loads(request.content)
        self.requests.append(body)
        return httpx2.Response(200, json=self.steps.pop(0)(body["messages"]))

    def client(self) -> Any:
        http = httpx2.AsyncClient(transport=httpx2.MockTransport(self))
        return anthropic.AsyncAnthropic(api_key="offline", http_client=http, max_retries=0)


async def agent(api: ScriptedApi, handles: list[ToolHandle], max_turns: int = 6) -> list[dict[str, Any]]:
    """The Messages API tool loop, as in docs/adapters.md."""
    client = api.client()
    messages: list[dict[str, Any]] = [{"role": "user", "content": "What is 6 * 7?"}]
    async with client:
        for _ in range(max_turns):
            response = await client.messages.create(
                model="claude-offline", max_tokens=512, tools=tool_params(handles), messages=messages
            )
            messages.append({"role": "assistant", "content": [block.model_dump() for block in response.content]})
            if response.stop_reason != "tool_use":
                return messages
            messages.append({"role": "user", "content": await run_tool_uses(response, handles)})
    raise AssertionError("the agent did not finish")


async def test_agent_runs_real_console_code_and_sees_the_output(console: AsyncConsole) -> None:
    handles = console.tools()
    assert tool_params(handles) == [
        {"name": "send", "description": handles[0].description, "input_schema": handles[0].input_schema}
    ]
    api = ScriptedApi(call("send", SIX_TIMES_SEVEN), answer)
    messages = await agent(api, handles)

    assert [request["tools"] for request in api.requests] == [tool_params(handles)] * 2
    [result] = tool_results(api.requests[-1]["messages"])
    assert result == {"type": "tool_result", "tool_use_id": result["tool_use_id"], "content": "42\n", "is_error": False}
    assert messages[-1]["content"][0]["text"] == "The tool said: 42\n"


async def test_images_come_back_as_base64_image_blocks(notes: AsyncMcpConnection) -> None:
    handles = [h for h in notes.tools() if h.name == "image"]
    api = ScriptedApi(call("image", {}), lambda messages: reply([{"type": "text", "text": "done"}], "end_turn"))
    [result] = tool_results(await agent(api, handles))
    [image] = result["content"]
    assert image["type"] == "image" and image["source"]["type"] == "base64"
    assert image["source"]["media_type"] == "image/png" and image["source"]["data"].startswith("iVBOR")


async def test_restart_is_refused_and_the_model_sees_why(console: AsyncConsole) -> None:
    api = ScriptedApi(call("send", RESTART), call("send", {"python": "print('still here')"}), answer)
    refusal, after = tool_results(await agent(api, console.tools()))
    assert refusal["is_error"] is True
    assert refusal["content"].startswith('NotAllowed: control: "restart" is reserved for the host')
    assert (after["content"], after["is_error"]) == ("still here\n", False)


async def test_approval_gate_denies_then_approves(
    notes: AsyncMcpConnection, gate: Gate, notes_calls: Callable[[], list[str]]
) -> None:
    handles = [h for h in notes.tools() if h.name == "write_note"]
    note = {"text": "hello"}
    api = ScriptedApi(call("write_note", note), call("write_note", note), answer)
    denied, saved = tool_results(await agent(api, handles))
    assert denied["is_error"] is True
    assert denied["content"].startswith("ApprovalDenied: tool 'write_note' of 'notes' needs approval")
    assert (saved["content"], saved["is_error"]) == ("saved", False)
    assert len(gate.requests) == 2 and notes_calls() == ["write_note"]


async def test_owner_mismatch_stops_the_run(console: AsyncConsole) -> None:
    handles = console.tools()
    api = ScriptedApi(call("send", SIX_TIMES_SEVEN), answer)
    with run_context(INTRUDER), pytest.raises(OwnerMismatch, match="tool 'send' belongs to owner analyst"):
        await agent(api, handles)
    assert len(api.requests) == 1, "the run must stop at the refused call"


async def test_closed_connection_stops_the_run(closed_handles: list[ToolHandle]) -> None:
    api = ScriptedApi(call("echo", {"text": "hi"}), answer)
    with pytest.raises(ConnectionClosed):
        await agent(api, closed_handles)


async def test_every_tool_use_gets_a_result_in_order() -> None:
    """Unknown tools, non-object input, tool error results and odd images: is_error and text, never a crash."""

    async def invoke(arguments: dict[str, Any]) -> ToolResult:
        if arguments.get("mode") == "error":
            return ToolResult(text="worker exited", is_error=True)
        if arguments.get("mode") == "svg":
            return ToolResult(text="", images=[Image("image/svg+xml", b"<svg/>"), Image("image/png", b"\x89PNG")])
        return ToolResult(text="")

    handle = ToolHandle(
        name="t",
        tool="t",
        server="s",
        description="d",
        input_schema={"type": "object"},
        annotations={},
        requires_approval=False,
        owner=Owner("host"),
        invoke=invoke,
    )
    blocks = [
        {"type": "text", "text": "thinking"},
        {"type": "tool_use", "id": "a", "name": "nope", "input": {}},
        {"type": "tool_use", "id": "b", "name": "t", "input": ["not", "an", "object"]},
        {"type": "tool_use", "id": "c", "name": "t", "input": {"mode": "error"}},
        {"type": "tool_use", "id": "d", "name": "t", "input": {"mode": "svg"}},
        {"type": "tool_use", "id": "e", "name": "t", "input": {}},
    ]
    a, b, c, d, e = await run_tool_uses({"role": "assistant", "content": blocks}, [handle])
    assert [r["tool_use_id"] for r in (a, b, c, d, e)] == ["a", "b", "c", "d", "e"]
    assert a["is_error"] and a["content"] == "NotAllowed: there is no tool named 'nope'; available: t"
    assert b["is_error"] and "must be a JSON object, not list" in b["content"]
    assert c == {"type": "tool_result", "tool_use_id": "c", "content": "worker exited", "is_error": True}
    text, png = d["content"]
    assert text == {"type": "text", "text": "[an image of type image/svg+xml was left out]"}
    assert png["source"] == {"type": "base64", "media_type": "image/png", "data": "iVBORw=="}
    assert e == {"type": "tool_result", "tool_use_id": "e", "is_error": False}
    assert await run_tool_uses(blocks[:1], [handle]) == []
