"""What every adapter shares: calling a handle under its owner, the error mapping, result rendering.

No framework is imported here; each adapter module turns an :class:`Outcome` into its
framework's own result or error convention.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from console_bridge import (
    BridgeError,
    ConnectionClosed,
    Image,
    InvalidArgument,
    OwnerMismatch,
    ToolHandle,
    ToolResult,
    current_owner,
    run_context,
)

__all__ = [
    "FATAL",
    "Outcome",
    "as_handles",
    "b64",
    "call",
    "call_blocking",
    "data_url",
    "error_text",
    "invoke",
    "invoke_blocking",
    "outcome",
    "running_loop",
]

#: Errors that stop the run instead of becoming a tool error the model sees: the
#: connection is gone (every later call would fail the same way), or the handle was
#: used under the wrong owner (a host bug, never the model's to work around).
FATAL: tuple[type[BridgeError], ...] = (ConnectionClosed, OwnerMismatch)


@dataclass(frozen=True, slots=True)
class Outcome:
    """One handle call as the model should see it.

    ``result`` is the :class:`ToolResult` when the call returned (``is_error`` then
    mirrors ``result.is_error``); ``error`` the :class:`BridgeError` when it raised a
    non-fatal one (``text`` then says what happened, for the model).
    """

    text: str
    images: tuple[Image, ...] = ()
    is_error: bool = False
    result: ToolResult | None = None
    error: BridgeError | None = None


def as_handles(handles: Iterable[ToolHandle]) -> list[ToolHandle]:
    """The handles as a list; refuses non-handles and duplicate names (the model could not tell them apart)."""
    if isinstance(handles, ToolHandle | str | bytes | Mapping):
        raise InvalidArgument("pass a sequence of ToolHandles, e.g. console.tools() or conn.tools()")
    found = list(handles)
    seen: set[str] = set()
    for handle in found:
        if not isinstance(handle, ToolHandle):
            raise InvalidArgument(
                f"expected ToolHandles (from tools() or capability_tools()), got {type(handle).__name__}"
            )
        if handle.name in seen:
            raise InvalidArgument(
                f"two handles are named {handle.name!r}; give each connection its own prefix "
                "(conn.tools(prefix=...)) so every tool name is unique"
            )
        seen.add(handle.name)
    return found


def error_text(exc: BridgeError) -> str:
    """What the model sees for a non-fatal error: its class and message (no server stderr)."""
    return f"{type(exc).__name__}: {exc.message}"


def outcome(result: ToolResult) -> Outcome:
    return Outcome(text=result.text, images=tuple(result.images), is_error=result.is_error, result=result)


def _not_an_object(arguments: object) -> Outcome:
    return Outcome(
        text=f"NotAllowed: the tool arguments must be a JSON object, not {type(arguments).__name__}",
        is_error=True,
    )


async def call(handle: ToolHandle, arguments: Mapping[str, Any]) -> ToolResult:
    """``await handle(arguments)`` under the handle owner's run context.

    An active run context is never replaced: under another owner's context the handle
    itself raises :class:`OwnerMismatch`.
    """
    if current_owner() is None:
        with run_context(handle.owner):
            return await handle(arguments)
    return await handle(arguments)


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running in this thread, if any."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def call_blocking(
    handle: ToolHandle, arguments: Mapping[str, Any], loop: asyncio.AbstractEventLoop | None
) -> ToolResult:
    """A blocking call: ``handle.call`` for handles of blocking classes; otherwise the coroutine runs
    on ``loop`` (the loop the async handle lives on) while this thread waits.

    Raises :class:`RuntimeError` when that is impossible: no live loop is known, or
    this thread *is* that loop (waiting would deadlock it; use the async path).
    """
    if handle.blocking:  # from McpConnection / Console: its own portal thread runs it
        if current_owner() is None:
            with run_context(handle.owner):
                return handle.call(arguments)
        return handle.call(arguments)
    if loop is None or loop.is_closed() or not loop.is_running():
        raise RuntimeError(
            f"tool {handle.name!r} comes from an async class and no running event loop is known for it; "
            "call the tool through the framework's async path, pass loop=..., or use the blocking "
            "Console / McpConnection"
        )
    if running_loop() is loop:
        raise RuntimeError(
            f"tool {handle.name!r} was called synchronously on the event loop its connection runs on, "
            "which would deadlock; use the framework's async path (e.g. ainvoke)"
        )
    return asyncio.run_coroutine_threadsafe(call(handle, arguments), loop).result()


async def invoke(handle: ToolHandle, arguments: object) -> Outcome:
    """Call ``handle``; a non-fatal :class:`BridgeError` becomes an error :class:`Outcome`.

    :data:`FATAL` errors propagate.
    """
    if not isinstance(arguments, Mapping):
        return _not_an_object(arguments)
    try:
        result = await call(handle, arguments)
    except FATAL:
        raise
    except BridgeError as exc:
        return Outcome(text=error_text(exc), is_error=True, error=exc)
    return outcome(result)


def invoke_blocking(handle: ToolHandle, arguments: object, loop: asyncio.AbstractEventLoop | None) -> Outcome:
    """The blocking twin of :func:`invoke` (see :func:`call_blocking`)."""
    if not isinstance(arguments, Mapping):
        return _not_an_object(arguments)
    try:
        result = call_blocking(handle, arguments, loop)
    except FATAL:
        raise
    except BridgeError as exc:
        return Outcome(text=error_text(exc), is_error=True, error=exc)
    return outcome(result)


def b64(image: Image) -> str:
    return base64.b64encode(image.data).decode("ascii")


def data_url(image: Image) -> str:
    return f"data:{image.mime_type};base64,{b64(image)}"
