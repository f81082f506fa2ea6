"""Anthropic Messages API adapter: tool definitions and ``tool_result`` blocks for ToolHandles.

Needs the ``anthropic`` extra (``pip install -e '.[anthropic]'`` in the console-bridge checkout). Example::

    import anthropic
    from console_bridge import AsyncConsole
    from console_bridge.adapters.anthropic import run_tool_uses, tool_params

    client = anthropic.AsyncAnthropic()
    async with AsyncConsole("analysis/") as console:
        handles = console.tools()
        messages = [{"role": "user", "content": "What is 6 * 7? Use the console."}]
        while True:
            reply = await client.messages.create(model="claude-sonnet-4-5", max_tokens=1024,
                                                 tools=tool_params(handles), messages=messages)
            messages.append({"role": "assistant", "content": reply.content})
            if reply.stop_reason != "tool_use":
                break
            messages.append({"role": "user", "content": await run_tool_uses(reply, handles)})

``tool_params`` gives each handle's name, description and exact JSON schema.
``run_tool_uses`` answers every ``tool_use`` block of an assistant message, in order,
one call at a time: text results as the block's content, images as base64 image
blocks, and ``is_error: true`` for a :class:`~console_bridge.BridgeError`, a tool
error result, an unknown tool name or arguments that are not an object.
:class:`~console_bridge.ConnectionClosed` and :class:`~console_bridge.OwnerMismatch`
propagate. The Messages API has no approval mechanism of its own: the bridge's gate
(``Policy.approve``) decides.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any, cast

from console_bridge._extras import install_hint

try:
    from anthropic.types import (
        ImageBlockParam,
        TextBlockParam,
        ToolParam,
        ToolResultBlockParam,
    )
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        f"console_bridge.adapters.anthropic needs the Anthropic SDK: {install_hint('anthropic')}"
    ) from exc

from console_bridge import Image, ToolHandle
from console_bridge.adapters._common import Outcome, as_handles, b64, invoke

__all__ = ["run_tool_uses", "tool_params"]

#: Image types the Messages API accepts in a tool result; other images are described in text.
IMAGE_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")


def tool_params(handles: Iterable[ToolHandle]) -> list[ToolParam]:
    """The ``tools=`` list for ``messages.create``: name, description and exact input schema per handle.

    Raises :class:`TypeError` for non-handles and :class:`ValueError` for duplicate tool names.
    """
    return [
        {
            "name": handle.name,
            "description": handle.description,
            "input_schema": copy.deepcopy(handle.input_schema),
        }
        for handle in as_handles(handles)
    ]


async def run_tool_uses(message: Any, handles: Iterable[ToolHandle]) -> list[ToolResultBlockParam]:
    """The ``tool_result`` blocks answering every ``tool_use`` block of ``message``, in order.

    ``message`` is an ``anthropic.types.Message``, a mapping with ``content`` (a
    message param), or the content blocks themselves (objects or dicts). Put the
    returned list as the content of the next ``user`` message. Raises
    :class:`~console_bridge.ConnectionClosed` and :class:`~console_bridge.OwnerMismatch`.
    """
    by_name = {handle.name: handle for handle in as_handles(handles)}
    results: list[ToolResultBlockParam] = []
    for block in _blocks(message):
        if _field(block, "type") != "tool_use":
            continue
        name = str(_field(block, "name"))
        handle = by_name.get(name)
        if handle is None:
            known = ", ".join(sorted(by_name)) or "none"
            outcome = Outcome(text=f"NotAllowed: there is no tool named {name!r}; available: {known}", is_error=True)
        else:
            outcome = await invoke(handle, _field(block, "input"))
        results.append(_tool_result(str(_field(block, "id")), outcome))
    return results


def _field(block: Any, key: str) -> Any:
    return block.get(key) if isinstance(block, Mapping) else getattr(block, key, None)


def _blocks(message: Any) -> list[Any]:
    content = message.get("content") if isinstance(message, Mapping) else getattr(message, "content", message)
    if isinstance(content, str | bytes) or content is None:
        return []
    return list(content)


def _tool_result(tool_use_id: str, outcome: Outcome) -> ToolResultBlockParam:
    block: ToolResultBlockParam = {"type": "tool_result", "tool_use_id": tool_use_id, "is_error": outcome.is_error}
    if not outcome.images:
        if outcome.text:
            block["content"] = outcome.text
        return block
    content: list[TextBlockParam | ImageBlockParam] = []
    notes = [f"[an image of type {image.mime_type} was left out]" for image in outcome.images if not _sendable(image)]
    text = "\n".join([outcome.text, *notes]) if outcome.text else "\n".join(notes)
    if text:
        content.append({"type": "text", "text": text})
    for image in outcome.images:
        if _sendable(image):
            media_type = cast(Any, image.mime_type)  # one of IMAGE_TYPES
            source: Any = {"type": "base64", "media_type": media_type, "data": b64(image)}
            content.append({"type": "image", "source": source})
    block["content"] = content
    return block


def _sendable(image: Image) -> bool:
    return image.mime_type in IMAGE_TYPES
