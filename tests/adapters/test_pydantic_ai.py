"""Pydantic AI adapter, driven through ``Agent.run`` with an offline ``FunctionModel``."""

from __future__ import annotations

from collections.abc import Callable
from itertools import count
from typing import Any

import pytest
from pydantic_ai import Agent, BinaryImage, DeferredToolRequests, DeferredToolResults, Tool, ToolDenied
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from console_bridge import (
    AsyncConsole,
    AsyncMcpConnection,
    ConnectionClosed,
    OwnerMismatch,
    ToolHandle,
    run_context,
)
from console_bridge.adapters.pydantic_ai import pydantic_ai_tools
from tests.adapters.conftest import INTRUDER, RESTART, SIX_TIMES_SEVEN, Gate

pytestmark = pytest.mark.anyio

Step = Callable[[list[ModelMessage]], ModelResponse]
_ids = count(1)


def call(name: str, arguments: dict[str, Any]) -> Step:
    def step(messages: list[ModelMessage]) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart(name, arguments, tool_call_id=f"call_{next(_ids)}")])

    return step


def answer(messages: list[ModelMessage]) -> ModelResponse:
    return ModelResponse(parts=[TextPart(f"The tool said: {returns(messages)[-1].content}")])


def returns(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    return [p for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)]


class Script:
    """The offline model: each turn is a step function of the conversation so far."""

    def __init__(self, *steps: Step) -> None:
        self.steps = list(steps)
        self.seen: list[list[ModelMessage]] = []
        self.tools: list[Any] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.seen.append(list(messages))
        self.tools = list(info.function_tools)
        return self.steps.pop(0)(messages)


def make_agent(script: Script, handles: list[ToolHandle], **kwargs: Any) -> Agent[None, Any]:
    return Agent(FunctionModel(script), tools=pydantic_ai_tools(handles), **kwargs)


async def test_agent_runs_real_console_code_and_sees_the_output(console: AsyncConsole) -> None:
    handles = console.tools()
    [tool] = pydantic_ai_tools(handles)
    assert isinstance(tool, Tool) and tool.requires_approval is False

    script = Script(call("send", SIX_TIMES_SEVEN), answer)
    result = await make_agent(script, handles).run("What is 6 * 7?")

    [definition] = script.tools
    assert definition.name == "send" and definition.description == handles[0].description
    assert definition.parameters_json_schema == handles[0].input_schema
    [returned] = returns(script.seen[-1])
    assert returned.content == "42\n" and returned.outcome == "success"
    assert result.output == "The tool said: 42\n"


async def test_images_come_back_as_binary_images(notes: AsyncMcpConnection) -> None:
    handles = [h for h in notes.tools() if h.name == "image"]
    script = Script(call("image", {}), lambda messages: ModelResponse(parts=[TextPart("done")]))
    await make_agent(script, handles).run("Draw.")
    [returned] = returns(script.seen[-1])
    [image] = returned.content
    assert isinstance(image, BinaryImage) and image.media_type == "image/png" and image.data.startswith(b"\x89PNG")


async def test_restart_is_refused_and_the_model_sees_why(console: AsyncConsole) -> None:
    script = Script(call("send", RESTART), call("send", {"python": "print('still here')"}), answer)
    result = await make_agent(script, console.tools()).run("Restart the console.")
    refusal, after = returns(script.seen[-1])
    assert refusal.outcome == "failed"
    assert refusal.content.startswith('NotAllowed: control: "restart" is reserved for the host')
    assert after.content == "still here\n" and result.output == "The tool said: still here\n"


async def test_approval_defers_the_call_then_the_bridge_gate_decides(
    notes: AsyncMcpConnection, gate: Gate, notes_calls: Callable[[], list[str]]
) -> None:
    handles = [h for h in notes.tools() if h.name == "write_note"]
    assert pydantic_ai_tools(handles)[0].requires_approval is True
    assert pydantic_ai_tools(handles, framework_approval=False)[0].requires_approval is False
    note = {"text": "hello"}
    script = Script(call("write_note", note), call("write_note", note), call("write_note", note), answer)
    agent = make_agent(script, handles, output_type=[str, DeferredToolRequests])

    # 1. the run ends with an approval request; the host denies it: nothing reaches the bridge
    result = await agent.run("Save a note.")
    assert isinstance(result.output, DeferredToolRequests)
    [pending] = result.output.approvals
    denied = DeferredToolResults(approvals={pending.tool_call_id: ToolDenied("the host said no")})
    # 2. the model tries again; the host approves, but the bridge's gate says no
    result = await agent.run(message_history=result.all_messages(), deferred_tool_results=denied)
    assert isinstance(result.output, DeferredToolRequests) and gate.requests == []
    [pending] = result.output.approvals
    approved = DeferredToolResults(approvals={pending.tool_call_id: True})
    # 3. the model tries once more; both approve and the note is saved
    result = await agent.run(message_history=result.all_messages(), deferred_tool_results=approved)
    [pending] = result.output.approvals
    approved = DeferredToolResults(approvals={pending.tool_call_id: True})
    result = await agent.run(message_history=result.all_messages(), deferred_tool_results=approved)

    first, second, third = returns(script.seen[-1])
    assert first.content == "the host said no"
    assert second.outcome == "failed"
    assert second.content.startswith("ApprovalDenied: tool 'write_note' of 'notes' needs approval")
    assert third.content == "saved" and result.output == "The tool said: saved"
    assert len(gate.requests) == 2 and notes_calls() == ["write_note"]


async def test_owner_mismatch_stops_the_run(console: AsyncConsole) -> None:
    handles = console.tools()
    script = Script(call("send", SIX_TIMES_SEVEN), answer)
    with run_context(INTRUDER), pytest.raises(OwnerMismatch, match="tool 'send' belongs to owner analyst"):
        await make_agent(script, handles).run("What is 6 * 7?")
    assert len(script.seen) == 1, "the run must stop at the refused call"


async def test_closed_connection_stops_the_run(closed_handles: list[ToolHandle]) -> None:
    script = Script(call("echo", {"text": "hi"}), answer)
    with pytest.raises(ConnectionClosed):
        await make_agent(script, closed_handles).run("Echo.")
    assert len(script.seen) == 1
