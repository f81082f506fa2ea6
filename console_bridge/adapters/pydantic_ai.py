"""Pydantic AI adapter: :class:`~console_bridge.ToolHandle` s as ``pydantic_ai.Tool`` s.

Needs the ``pydantic-ai`` extra (``pip install -e '.[pydantic-ai]'`` in the console-bridge checkout, which
installs ``pydantic-ai-slim``). Example::

    from pydantic_ai import Agent
    from console_bridge import AsyncConsole
    from console_bridge.adapters.pydantic_ai import pydantic_ai_tools

    async with AsyncConsole("analysis/") as console:
        agent = Agent("anthropic:claude-sonnet-4-5", tools=pydantic_ai_tools(console.tools()))
        result = await agent.run("What is 6 * 7? Use the console.")

Tools are built with ``Tool.from_schema``, so the model sees the handle's exact JSON
schema and the arguments reach the handle unchanged. Results are the text, plus
``BinaryImage`` parts (sent natively in the tool result) when the tool returned
images. A :class:`~console_bridge.BridgeError` is raised as ``ToolFailed``: the model
sees the failure and adapts, without spending its retry budget.
:class:`~console_bridge.ConnectionClosed` and :class:`~console_bridge.OwnerMismatch`
propagate out of ``agent.run``. Tools are ``sequential`` (a connection runs one call
at a time; a second, parallel call would only get ``Busy``).

Approval: a handle with ``requires_approval`` becomes a tool with
``requires_approval=True`` (Pydantic AI's human-in-the-loop deferred tools): give the
agent ``output_type=[str, DeferredToolRequests]``; the run ends with
``DeferredToolRequests`` and the host answers with
``agent.run(message_history=..., deferred_tool_results=DeferredToolResults(approvals={...}))``.
The bridge's own gate (``Policy.approve``) still decides when the approved call is made.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from console_bridge._extras import install_hint

try:
    from pydantic_ai import BinaryContent, BinaryImage, Tool, ToolFailed
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(f"console_bridge.adapters.pydantic_ai needs Pydantic AI: {install_hint('pydantic-ai')}") from exc

from console_bridge import ToolHandle
from console_bridge.adapters._common import Outcome, as_handles, invoke

__all__ = ["pydantic_ai_tools"]


def pydantic_ai_tools(handles: Iterable[ToolHandle], *, framework_approval: bool = True) -> list[Tool[Any]]:
    """One ``pydantic_ai.Tool`` per handle (from ``tools()`` or ``capability_tools()``).

    ``framework_approval=False`` leaves approval to the bridge's gate alone (no
    deferred approval requests). Raises :class:`TypeError` for non-handles and
    :class:`ValueError` for duplicate tool names.
    """
    return [_tool(handle, framework_approval) for handle in as_handles(handles)]


def _tool(handle: ToolHandle, framework_approval: bool) -> Tool[Any]:
    async def call(**arguments: Any) -> Any:
        outcome = await invoke(handle, arguments)
        if outcome.result is None:
            raise ToolFailed(outcome.text)
        return _content(outcome)

    tool: Tool[Any] = Tool.from_schema(
        call,
        name=handle.name,
        description=handle.description,
        json_schema=copy.deepcopy(handle.input_schema),
        sequential=True,
    )
    tool.requires_approval = handle.requires_approval and framework_approval
    tool.metadata = {"server": handle.server, "tool": handle.tool, "owner": str(handle.owner)}
    return tool


def _content(outcome: Outcome) -> Any:
    if not outcome.images:
        return outcome.text
    parts: list[Any] = [outcome.text] if outcome.text else []
    for image in outcome.images:
        if image.mime_type.startswith("image/"):
            parts.append(BinaryImage(data=image.data, media_type=image.mime_type))
        else:
            parts.append(BinaryContent(data=image.data, media_type=image.mime_type))
    return parts
