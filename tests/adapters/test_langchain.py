"""LangChain adapter, driven by a tool-calling loop over a scripted, offline chat model."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from itertools import count
from pathlib import Path
from typing import Any

import anyio
import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import BaseTool, StructuredTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field

from console_bridge import (
    AsyncConsole,
    AsyncMcpConnection,
    ConnectionClosed,
    McpConnection,
    OwnerMismatch,
    Policy,
    ToolHandle,
    ToolResult,
    run_context,
)
from console_bridge.adapters.langchain import langchain_tools
from tests.adapters.conftest import INTRUDER, OWNER, RESTART, SIX_TIMES_SEVEN, Gate, server_calls
from tests.support.places import server_entry

pytestmark = pytest.mark.anyio

Step = Callable[[list[BaseMessage]], AIMessage]
_ids = count(1)


def call(name: str, arguments: dict[str, Any]) -> Step:
    def step(messages: list[BaseMessage]) -> AIMessage:
        return AIMessage(content="", tool_calls=[{"name": name, "args": arguments, "id": f"call_{next(_ids)}"}])

    return step


def answer(messages: list[BaseMessage]) -> AIMessage:
    return AIMessage(content=f"The tool said: {tool_messages(messages)[-1].content}")


def tool_messages(messages: Sequence[BaseMessage]) -> list[ToolMessage]:
    return [m for m in messages if isinstance(m, ToolMessage)]


class ScriptedChatModel(BaseChatModel):
    """An offline chat model that supports ``bind_tools``; each turn is a step function."""

    steps: list[Any]
    bound: list[dict[str, Any]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self.steps.pop(0)(messages))])

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        self.bound = [convert_to_openai_tool(tool) for tool in tools]
        return self.bind(tools=self.bound, **kwargs)


async def agent(model: ScriptedChatModel, tools: list[BaseTool], max_turns: int = 6) -> list[BaseMessage]:
    """A minimal tool-calling agent loop on langchain_core primitives (async path)."""
    bound, by_name = model.bind_tools(tools), {tool.name: tool for tool in tools}
    messages: list[BaseMessage] = [HumanMessage("What is 6 * 7?")]
    for _ in range(max_turns):
        reply = await bound.ainvoke(messages)
        messages.append(reply)
        if not reply.tool_calls:
            return messages
        for tool_call in reply.tool_calls:
            messages.append(await by_name[tool_call["name"]].ainvoke(tool_call))
    raise AssertionError("the agent did not finish")


def blocking_agent(model: ScriptedChatModel, tools: list[BaseTool], max_turns: int = 6) -> list[BaseMessage]:
    """The same loop on the synchronous path (``invoke``)."""
    bound, by_name = model.bind_tools(tools), {tool.name: tool for tool in tools}
    messages: list[BaseMessage] = [HumanMessage("What is 6 * 7?")]
    for _ in range(max_turns):
        reply = bound.invoke(messages)
        messages.append(reply)
        if not reply.tool_calls:
            return messages
        for tool_call in reply.tool_calls:
            messages.append(by_name[tool_call["name"]].invoke(tool_call))
    raise AssertionError("the agent did not finish")


async def test_agent_runs_real_console_code_and_sees_the_output(console: AsyncConsole) -> None:
    handles = console.tools()
    [tool] = langchain_tools(handles)
    assert isinstance(tool, StructuredTool)
    assert tool.args_schema == handles[0].input_schema and tool.metadata is not None
    assert tool.metadata["requires_approval"] is False and tool.metadata["server"] == "mcp-console"

    model = ScriptedChatModel(steps=[call("send", SIX_TIMES_SEVEN), answer])
    messages = await agent(model, [tool])

    assert [b["function"]["parameters"] for b in model.bound] == [handles[0].input_schema]
    [result] = tool_messages(messages)
    assert (result.content, result.status) == ("42\n", "success")
    assert isinstance(result.artifact, ToolResult) and result.artifact.text == "42\n"
    assert messages[-1].content == "The tool said: 42\n"


async def test_sync_path_of_async_handles_runs_on_their_loop(console: AsyncConsole) -> None:
    tools = langchain_tools(console.tools())  # captures the running loop
    model = ScriptedChatModel(steps=[call("send", {"python": "print(7 * 6)"}), answer])
    messages = await anyio.to_thread.run_sync(blocking_agent, model, tools)
    assert messages[-1].content == "The tool said: 42\n"
    with pytest.raises(RuntimeError, match="would deadlock"):  # on the loop's own thread: refused
        tools[0].invoke({"python": "1"})


async def test_sync_path_needs_a_known_loop(console: AsyncConsole) -> None:
    handles = console.tools()
    tools = await anyio.to_thread.run_sync(langchain_tools, handles)  # no running loop there
    with pytest.raises(RuntimeError, match="no running event loop is known"):
        await anyio.to_thread.run_sync(tools[0].invoke, SIX_TIMES_SEVEN)
    loop = asyncio.get_running_loop()
    tools = await anyio.to_thread.run_sync(lambda: langchain_tools(handles, loop=loop))
    assert (await anyio.to_thread.run_sync(tools[0].invoke, SIX_TIMES_SEVEN)) == "42\n"


async def test_blocking_handles_use_handle_call(tmp_path: Path) -> None:
    """Handles of a blocking McpConnection run through ``handle.call``, in plain sync code."""

    def scenario() -> list[BaseMessage]:
        config = {"mcpServers": {"notes": server_entry("wellbehaved.py", "--log", str(tmp_path / "echo.log"))}}
        with McpConnection(config, "notes", owner=OWNER, tools=["echo"], policy=Policy()) as conn:
            model = ScriptedChatModel(steps=[call("echo", {"text": "config"}), answer])
            return blocking_agent(model, langchain_tools(conn.tools()))

    messages = await anyio.to_thread.run_sync(scenario)
    assert messages[-1].content == "The tool said: config"  # an argument named like LangChain's own `config`
    assert server_calls(tmp_path / "echo.log") == ["echo"]


async def test_images_come_back_as_image_blocks(notes: AsyncMcpConnection) -> None:
    tools = langchain_tools([h for h in notes.tools() if h.name == "image"])
    model = ScriptedChatModel(steps=[call("image", {}), lambda messages: AIMessage(content="done")])
    [result] = tool_messages(await agent(model, tools))
    [image] = result.content
    assert isinstance(image, dict) and image["type"] == "image" and image["mime_type"] == "image/png"
    assert image["base64"].startswith("iVBOR")


async def test_restart_is_refused_and_the_model_sees_why(console: AsyncConsole) -> None:
    model = ScriptedChatModel(steps=[call("send", RESTART), call("send", {"python": "print('still here')"}), answer])
    messages = await agent(model, langchain_tools(console.tools()))
    refusal, after = tool_messages(messages)
    assert refusal.status == "error"
    assert str(refusal.content).startswith('NotAllowed: control: "restart" is reserved for the host')
    assert (after.content, after.status) == ("still here\n", "success")


async def test_approval_gate_denies_then_approves(
    notes: AsyncMcpConnection, gate: Gate, notes_calls: Callable[[], list[str]]
) -> None:
    tools = langchain_tools([h for h in notes.tools() if h.name == "write_note"])
    assert tools[0].metadata is not None and tools[0].metadata["requires_approval"] is True
    note = {"text": "hello"}
    model = ScriptedChatModel(steps=[call("write_note", note), call("write_note", note), answer])
    messages = await agent(model, tools)
    denied, saved = tool_messages(messages)
    assert denied.status == "error"
    assert str(denied.content).startswith("ApprovalDenied: tool 'write_note' of 'notes' needs approval")
    assert (saved.content, saved.status) == ("saved", "success")
    assert len(gate.requests) == 2 and notes_calls() == ["write_note"]


async def test_owner_mismatch_stops_the_run(console: AsyncConsole) -> None:
    tools = langchain_tools(console.tools())
    model = ScriptedChatModel(steps=[call("send", SIX_TIMES_SEVEN), answer])
    with run_context(INTRUDER), pytest.raises(OwnerMismatch, match="tool 'send' belongs to owner analyst"):
        await agent(model, tools)
    assert len(model.steps) == 1, "the run must stop at the refused call"


async def test_owner_mismatch_stops_the_sync_path_too(console: AsyncConsole) -> None:
    tools = langchain_tools(console.tools())

    def intruding() -> None:
        with run_context(INTRUDER):
            tools[0].invoke(SIX_TIMES_SEVEN)

    with pytest.raises(OwnerMismatch):
        await anyio.to_thread.run_sync(intruding)


async def test_closed_connection_stops_the_run(closed_handles: list[ToolHandle]) -> None:
    model = ScriptedChatModel(steps=[call("echo", {"text": "hi"}), answer])
    with pytest.raises(ConnectionClosed):
        await agent(model, langchain_tools(closed_handles))
