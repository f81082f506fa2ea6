"""MCP replies as wire dicts: listings walked page by page, resource and prompt contents as blocks.

No state and no policy: the connection runs these inside its requests (busy slot,
deadline, error translation) and hands the results to the governance gate.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Literal

import mcp_types
import pydantic
from mcp.client.session import ClientSession
from mcp.shared.dispatcher import ProgressFnT

from console_bridge._errors import ServerError

__all__ = [
    "MAX_PAGES",
    "Kind",
    "check_cursor",
    "list_all",
    "list_page",
    "progress_callback",
    "prompt_content",
    "resource_content",
    "wire",
]

Kind = Literal["tools", "resources", "resource_templates", "prompts"]
#: More pages than this in one listing walk is treated as a server fault.
MAX_PAGES = 1000


def wire(model: pydantic.BaseModel) -> dict[str, Any]:
    """A protocol object as its JSON wire form (aliases, no nulls)."""
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)


async def list_page(session: ClientSession, kind: Kind, cursor: str | None) -> tuple[list[dict[str, Any]], str | None]:
    """One page of a ``*/list`` request: its items and the next cursor."""
    params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor is not None else None
    if kind == "tools":
        tools = await session.list_tools(params=params)
        return [wire(t) for t in tools.tools], tools.next_cursor
    if kind == "resources":
        res = await session.list_resources(params=params)
        return [wire(r) for r in res.resources], res.next_cursor
    if kind == "resource_templates":
        tmpl = await session.list_resource_templates(params=params)
        return [wire(r) for r in tmpl.resource_templates], tmpl.next_cursor
    prompts = await session.list_prompts(params=params)
    return [wire(p) for p in prompts.prompts], prompts.next_cursor


async def list_all(session: ClientSession, kind: Kind, server: str) -> list[dict[str, Any]]:
    """Every page of a listing; :class:`ServerError` for a repeated cursor or more than ``MAX_PAGES``."""
    items: list[dict[str, Any]] = []
    cursor: str | None = None
    seen: set[str] = set()
    for _ in range(MAX_PAGES):
        page_items, cursor = await list_page(session, kind, cursor)
        items.extend(page_items)
        if cursor is None:
            return items
        if cursor in seen:
            raise ServerError(f"server {server!r} repeated the {kind} cursor {cursor!r}", server=server)
        seen.add(cursor)
    raise ServerError(f"server {server!r} returned more than {MAX_PAGES} {kind} pages", server=server)


def check_cursor(seen: set[str], kind: Kind, cursor: str | None, next_cursor: str | None, server: str) -> None:
    """Track one discovery walk's cursors in ``seen`` (a walk starts at ``cursor=None``).

    Raises :class:`ServerError` when the server hands back a cursor it already gave in this walk.
    """
    if cursor is None:
        seen.clear()
    if next_cursor is not None:
        if next_cursor in seen or next_cursor == cursor:
            raise ServerError(
                f"server {server!r} repeated the {kind} cursor {next_cursor!r}: its pagination loops; "
                "stop walking here",
                server=server,
            )
        seen.add(next_cursor)


def progress_callback(
    on_progress: Callable[[float, float | None, str | None], Any] | None, on_error: Callable[[], None]
) -> ProgressFnT | None:
    """The SDK's progress callback for a caller's ``on_progress`` (plain or async), or None without one.

    An exception in ``on_progress`` calls ``on_error`` and is otherwise ignored: the call goes on.
    """
    if on_progress is None:
        return None

    async def report(progress: float, total: float | None, message: str | None) -> None:
        try:
            outcome = on_progress(progress, total, message)
            if inspect.isawaitable(outcome):
                await outcome
        except Exception:  # a broken progress callback must not break the call
            on_error()

    return report


def resource_content(result: mcp_types.ReadResourceResult) -> list[dict[str, Any]]:
    """A ``resources/read`` reply as content blocks (text as text, the rest as resource blocks)."""
    content: list[dict[str, Any]] = []
    for item in result.contents:
        data = wire(item)
        if "text" in data:
            content.append({"type": "text", "text": data["text"]})
        else:
            content.append({"type": "resource", "resource": data})
    return content


def prompt_content(result: mcp_types.GetPromptResult) -> list[dict[str, Any]]:
    """A ``prompts/get`` reply as content blocks (text messages prefixed with their role)."""
    content = []
    for message in result.messages:
        block = wire(message.content) if not isinstance(message.content, list) else {}
        if block.get("type") == "text":
            content.append({"type": "text", "text": f"[{message.role}] {block.get('text', '')}"})
        elif block:
            content.append(block)
    return content
