"""LangChain adapter: :class:`~console_bridge.ToolHandle` s as LangChain tools (``StructuredTool``).

Needs the ``langchain`` extra (``pip install -e '.[langchain]'`` in the console-bridge checkout, which
installs ``langchain-core``). Example::

    from console_bridge import AsyncConsole
    from console_bridge.adapters.langchain import langchain_tools

    async with AsyncConsole("analysis/") as console:
        tools = langchain_tools(console.tools())
        model = chat_model.bind_tools(tools)
        ...  # for each tool call of the model's reply:
        message = await tools_by_name[call["name"]].ainvoke(call)   # a ToolMessage

Each tool's ``args_schema`` is the handle's exact JSON schema (a dict; LangChain does
not re-validate it). Results use ``response_format="content_and_artifact"``: the
content is the text (plus standard ``image`` blocks when the tool returned images),
the artifact the :class:`~console_bridge.ToolResult`. A :class:`~console_bridge.BridgeError`
is raised as ``ToolException`` with ``handle_tool_error=True``, so the model gets a
``ToolMessage`` with ``status="error"``; :class:`~console_bridge.ConnectionClosed` and
:class:`~console_bridge.OwnerMismatch` propagate out of ``invoke``/``ainvoke``.

Both paths work: ``ainvoke`` awaits the handle; ``invoke`` uses ``handle.call`` for
handles of the blocking classes (``Console``, ``McpConnection``), and otherwise runs
the call on the event loop the async handle lives on (the loop running when
``langchain_tools()`` was called, or ``loop=``) while the calling thread waits; on
that loop's own thread use ``ainvoke``. ``langchain_core`` has no approval mechanism:
the bridge's gate (``Policy.approve``) decides, and ``tool.metadata["requires_approval"]``
tells a host loop (a LangGraph interrupt, say) which tools will ask.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Iterable
from typing import Any

from console_bridge._extras import install_hint

try:
    from langchain_core.tools import BaseTool, StructuredTool, ToolException
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(f"console_bridge.adapters.langchain needs langchain-core: {install_hint('langchain')}") from exc

from console_bridge import ToolHandle
from console_bridge.adapters._common import Outcome, as_handles, b64, invoke, invoke_blocking, running_loop

__all__ = ["BridgeTool", "langchain_tools"]


class BridgeTool(StructuredTool):
    """A ``StructuredTool`` bound to one :class:`~console_bridge.ToolHandle`.

    The tool function receives exactly the model's arguments: LangChain's own
    ``config``/``run_manager`` are never mixed in, so a tool argument of that name works.
    """

    def _run(self, *args: Any, **kwargs: Any) -> Any:
        if args or self.func is None:
            raise ToolException(f"{self.name} takes one JSON object of named arguments")
        return self.func(**kwargs)

    async def _arun(self, *args: Any, **kwargs: Any) -> Any:
        if args or self.coroutine is None:
            raise ToolException(f"{self.name} takes one JSON object of named arguments")
        return await self.coroutine(**kwargs)


def langchain_tools(handles: Iterable[ToolHandle], *, loop: asyncio.AbstractEventLoop | None = None) -> list[BaseTool]:
    """One LangChain tool per handle (from ``tools()`` or ``capability_tools()``).

    ``loop``: where the synchronous path runs calls of async handles; by default the
    loop running in this thread now, if any. Raises :class:`TypeError` for non-handles
    and :class:`ValueError` for duplicate tool names.
    """
    target = loop if loop is not None else running_loop()
    return [_tool(handle, target) for handle in as_handles(handles)]


def _tool(handle: ToolHandle, loop: asyncio.AbstractEventLoop | None) -> BaseTool:
    def run(**arguments: Any) -> tuple[Any, Any]:
        return _respond(invoke_blocking(handle, arguments, loop))

    async def arun(**arguments: Any) -> tuple[Any, Any]:
        return _respond(await invoke(handle, arguments))

    return BridgeTool(
        name=handle.name,
        description=handle.description,
        args_schema=copy.deepcopy(handle.input_schema),
        func=run,
        coroutine=arun,
        response_format="content_and_artifact",
        handle_tool_error=True,
        metadata={
            "server": handle.server,
            "tool": handle.tool,
            "owner": str(handle.owner),
            "requires_approval": handle.requires_approval,
            "annotations": dict(handle.annotations),
        },
    )


def _respond(outcome: Outcome) -> tuple[Any, Any]:
    if outcome.result is None:
        raise ToolException(outcome.text)
    if not outcome.images:
        return outcome.text, outcome.result
    blocks: list[dict[str, Any]] = [{"type": "text", "text": outcome.text}] if outcome.text else []
    blocks += [{"type": "image", "base64": b64(image), "mime_type": image.mime_type} for image in outcome.images]
    return blocks, outcome.result
