"""OpenAI Agents SDK adapter, driven through ``Runner.run`` with a scripted, offline ``Model``."""

from __future__ import annotations

import json
from collections.abc import Callable
from itertools import count
from typing import Any

import pytest
from agents import Agent, FunctionTool, Model, ModelResponse, RunConfig, Runner, Usage
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

from console_bridge import (
    AsyncConsole,
    AsyncMcpConnection,
    CallTimeout,
    ConnectionClosed,
    Owner,
    OwnerMismatch,
    ToolHandle,
    ToolResult,
    run_context,
)
from console_bridge.adapters.openai_agents import function_tools
from tests.adapters.conftest import INTRUDER, RESTART, SIX_TIMES_SEVEN, Gate

pytestmark = pytest.mark.anyio

Step = Callable[[list[dict[str, Any]]], list[Any]]
_ids = count(1)


def call(name: str, arguments: dict[str, Any]) -> Step:
    """A model turn that calls one tool."""

    def step(items: list[dict[str, Any]]) -> list[Any]:
        n = next(_ids)
        return [
            ResponseFunctionToolCall(
                type="function_call", id=f"fc_{n}", call_id=f"call_{n}", name=name, arguments=json.dumps(arguments)
            )
        ]

    return step


def answer(items: list[dict[str, Any]]) -> list[Any]:
    """The final turn: repeat the last tool output as the assistant's message."""
    text = f"The tool said: {tool_outputs(items)[-1]}"
    content = [ResponseOutputText(type="output_text", text=text, annotations=[])]
    return [
        ResponseOutputMessage(type="message", id="msg_final", role="assistant", status="completed", content=content)
    ]


class ScriptedModel(Model):
    """An offline ``agents.Model``: each turn is a step function of the conversation so far."""

    def __init__(self, *steps: Step) -> None:
        self.steps = list(steps)
        self.seen: list[list[dict[str, Any]]] = []
        self.tools: list[Any] = []

    async def get_response(
        self, system_instructions, input, model_settings, tools, output_schema, handoffs, tracing, **kwargs: Any
    ) -> ModelResponse:
        items = [{"role": "user", "content": input}] if isinstance(input, str) else [dict(i) for i in input]
        self.seen.append(items)
        self.tools = list(tools)
        return ModelResponse(output=self.steps.pop(0)(items), usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the tests run without streaming")


def tool_outputs(items: list[dict[str, Any]]) -> list[Any]:
    return [item["output"] for item in items if item.get("type") == "function_call_output"]


async def run(model: ScriptedModel, handles: list[ToolHandle], state: Any = None) -> Any:
    agent = Agent(name="analyst", instructions="Use the tools.", model=model, tools=function_tools(handles))
    return await Runner.run(
        agent, state if state is not None else "What is 6 * 7?", run_config=RunConfig(tracing_disabled=True)
    )


async def test_agent_runs_real_console_code_and_sees_the_output(console: AsyncConsole) -> None:
    handles = console.tools()
    [tool] = function_tools(handles)
    assert isinstance(tool, FunctionTool)
    assert (tool.name, tool.description) == ("send", handles[0].description)
    assert tool.params_json_schema == handles[0].input_schema and tool.strict_json_schema is False
    assert tool.needs_approval is False

    model = ScriptedModel(call("send", SIX_TIMES_SEVEN), answer)
    result = await run(model, handles)

    assert [t.params_json_schema for t in model.tools] == [handles[0].input_schema]
    assert tool_outputs(model.seen[-1]) == ["42\n"]
    assert result.final_output == "The tool said: 42\n"


async def test_images_come_back_as_image_outputs(notes: AsyncMcpConnection) -> None:
    handles = [h for h in notes.tools() if h.name == "image"]
    model = ScriptedModel(call("image", {}), lambda items: answer([{"type": "function_call_output", "output": "ok"}]))
    await run(model, handles)
    [output] = tool_outputs(model.seen[-1])
    [image] = output
    assert image["type"] == "input_image" and image["image_url"].startswith("data:image/png;base64,iVBOR")


async def test_restart_is_refused_and_the_model_sees_why(console: AsyncConsole) -> None:
    model = ScriptedModel(call("send", RESTART), call("send", {"python": "print('still here')"}), answer)
    result = await run(model, console.tools())
    refusal, after = tool_outputs(model.seen[-1])
    assert refusal.startswith('NotAllowed: control: "restart" is reserved for the host')
    assert after == "still here\n" and result.final_output == "The tool said: still here\n"


async def test_approval_pauses_the_run_then_the_bridge_gate_decides(
    notes: AsyncMcpConnection, gate: Gate, notes_calls: Callable[[], list[str]]
) -> None:
    handles = [h for h in notes.tools() if h.name == "write_note"]
    [tool] = function_tools(handles)
    assert tool.needs_approval is True
    assert function_tools(handles, framework_approval=False)[0].needs_approval is False

    note = {"text": "hello"}
    model = ScriptedModel(call("write_note", note), call("write_note", note), call("write_note", note), answer)

    # 1. the SDK pauses; the host rejects: nothing reaches the bridge
    result = await run(model, handles)
    [pending] = result.interruptions
    state = result.to_state()
    state.reject(pending, rejection_message="the host said no")
    # 2. the model tries again; the host approves in the SDK, but the bridge's gate says no
    result = await run(model, handles, state)
    [pending] = result.interruptions
    assert gate.requests == []
    state = result.to_state()
    state.approve(pending)
    # 3. the model tries once more; both approve and the note is saved
    result = await run(model, handles, state)
    [pending] = result.interruptions
    state = result.to_state()
    state.approve(pending)
    result = await run(model, handles, state)

    first, second, third = tool_outputs(model.seen[-1])
    assert first == "the host said no"
    assert second.startswith("ApprovalDenied: tool 'write_note' of 'notes' needs approval")
    assert third == "saved" and result.final_output == "The tool said: saved"
    assert [r.tool for r in gate.requests] == ["write_note", "write_note"]
    assert notes_calls() == ["write_note"]


async def test_owner_mismatch_stops_the_run(console: AsyncConsole) -> None:
    handles = console.tools()
    model = ScriptedModel(call("send", SIX_TIMES_SEVEN), answer)
    with run_context(INTRUDER), pytest.raises(OwnerMismatch, match="tool 'send' belongs to owner analyst") as caught:
        await run(model, handles)
    assert isinstance(caught.value.__cause__, OwnerMismatch), "the handle's own error, unwrapped by the SDK"
    assert len(model.seen) == 1, "the run must stop at the refused call"


async def test_closed_connection_stops_the_run(closed_handles: list[ToolHandle]) -> None:
    model = ScriptedModel(call("echo", {"text": "hi"}), answer)
    with pytest.raises(ConnectionClosed):
        await run(model, closed_handles)
    assert len(model.seen) == 1


async def test_stopping_errors_keep_their_class_and_attributes() -> None:
    original = CallTimeout("no reply within 5s", server="notes", pid=4242, details={"tool": "echo"})

    async def time_out(arguments: dict[str, Any]) -> ToolResult:
        raise original

    handle = ToolHandle(
        name="echo",
        tool="echo",
        server="notes",
        description="Echo.",
        input_schema={"type": "object"},
        annotations={},
        requires_approval=False,
        owner=Owner("host"),
        invoke=time_out,
    )
    with pytest.raises(CallTimeout) as caught:
        await run(ScriptedModel(call("echo", {}), answer), [handle])
    stopped = caught.value
    assert isinstance(stopped, ConnectionClosed) and type(stopped).__name__ == "CallTimeout"
    assert (stopped.message, stopped.server, stopped.pid, stopped.details) == (
        "no reply within 5s",
        "notes",
        4242,
        {"tool": "echo"},
    )
    assert stopped.__cause__ is original and str(stopped) == str(original)
