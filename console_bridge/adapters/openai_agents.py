"""OpenAI Agents SDK adapter: :class:`~console_bridge.ToolHandle` s as ``agents.FunctionTool`` s.

Needs the ``openai-agents`` extra (``pip install -e '.[openai-agents]'`` in the console-bridge checkout). Example::

    from agents import Agent, Runner
    from console_bridge import AsyncConsole
    from console_bridge.adapters.openai_agents import function_tools

    async with AsyncConsole("analysis/") as console:
        agent = Agent(name="analyst", instructions="Use the console.", tools=function_tools(console.tools()))
        result = await Runner.run(agent, "What is 6 * 7?")

Each tool keeps the handle's exact JSON schema (``strict_json_schema=False``: the
SDK's strict mode would rewrite it). A :class:`~console_bridge.BridgeError` becomes a
string the model sees as the tool output (the SDK's convention for a recoverable tool
error); images come back as ``ToolOutputImage``. :class:`~console_bridge.ConnectionClosed`
and :class:`~console_bridge.OwnerMismatch` stop the run: ``Runner.run`` raises them
as themselves (``except OwnerMismatch`` works; the original is the ``__cause__``),
instead of the ``UserError`` the SDK wraps other tool exceptions in.

Approval: a handle with ``requires_approval`` becomes a tool with ``needs_approval=True``,
so the run pauses with ``result.interruptions`` until the host calls
``state.approve(item)`` or ``state.reject(item)`` and runs again. The bridge's own
gate (``Policy.approve``) still decides when the approved call is made.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from typing import Any

from console_bridge._extras import install_hint

try:
    from agents import AgentsException, FunctionTool, ToolOutputImage, ToolOutputText
    from agents.tool_context import ToolContext
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        f"console_bridge.adapters.openai_agents needs the OpenAI Agents SDK: {install_hint('openai-agents')}"
    ) from exc

from console_bridge import BridgeError, ToolHandle
from console_bridge.adapters._common import FATAL, Outcome, as_handles, data_url, invoke

__all__ = ["function_tools"]


def function_tools(handles: Iterable[ToolHandle], *, framework_approval: bool = True) -> list[FunctionTool]:
    """One ``agents.FunctionTool`` per handle (from ``tools()`` or ``capability_tools()``).

    ``framework_approval=False`` leaves approval to the bridge's gate alone (no SDK
    interruption). Raises :class:`TypeError` for non-handles and :class:`ValueError`
    for duplicate tool names.
    """
    return [_function_tool(handle, framework_approval) for handle in as_handles(handles)]


def _function_tool(handle: ToolHandle, framework_approval: bool) -> FunctionTool:
    async def on_invoke_tool(ctx: ToolContext[Any], raw_arguments: str) -> Any:
        try:
            arguments = json.loads(raw_arguments) if raw_arguments.strip() else {}
        except json.JSONDecodeError as exc:
            return f"NotAllowed: the tool arguments are not valid JSON ({exc}); send one JSON object"
        try:
            outcome = await invoke(handle, arguments)
        except FATAL as exc:
            raise _stopping(exc) from exc
        return _output(outcome)

    return FunctionTool(
        name=handle.name,
        description=handle.description,
        params_json_schema=copy.deepcopy(handle.input_schema),
        on_invoke_tool=on_invoke_tool,
        strict_json_schema=False,
        needs_approval=handle.requires_approval and framework_approval,
    )


def _output(outcome: Outcome) -> Any:
    if not outcome.images:
        return outcome.text
    items: list[ToolOutputText | ToolOutputImage] = [ToolOutputText(text=outcome.text)] if outcome.text else []
    items += [ToolOutputImage(image_url=data_url(image)) for image in outcome.images]
    return items


_STOPPING: dict[type[BridgeError], type[BridgeError]] = {}


def _stopping_class(cls: type[BridgeError]) -> type[BridgeError]:
    """``cls`` that is also an ``AgentsException``: the Runner re-raises those unwrapped."""
    stopping = _STOPPING.get(cls)
    if stopping is None:
        namespace = {"__module__": cls.__module__, "__qualname__": cls.__qualname__, "__doc__": cls.__doc__}
        stopping = _STOPPING.setdefault(cls, type(cls.__name__, (cls, AgentsException), namespace))
    return stopping


def _stopping(exc: BridgeError) -> BridgeError:
    """A copy of ``exc`` (same class name, message and attributes) that stops the SDK's run as itself."""
    cls = _stopping_class(type(exc))
    stopped = cls.__new__(cls, *exc.args)
    stopped.__dict__.update(vars(exc))
    stopped.run_data = None  # type: ignore[attr-defined]  # AgentsException's attribute
    return stopped
