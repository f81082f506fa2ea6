"""A JSON-RPC guard between a transport and the MCP session.

It records the id of every request the client sends and checks every reply the
server sends, inline as the session writes and reads the transport's streams: a
reply to an id that is not outstanding, or a line that is not a JSON-RPC message,
is a desynchronisation. The guard reports it (the connection is then closed) and
passes nothing more on, so one request's reply can never be handed to another. It
also notices ``notifications/tools/list_changed``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio
import mcp_types
from anyio.abc import ObjectReceiveStream, ObjectSendStream, TaskGroup
from mcp.shared.message import SessionMessage

__all__ = ["Guard"]

TOOLS_CHANGED = "notifications/tools/list_changed"


@dataclass
class Guard:
    """Checks each message where it passes, inline: no pump tasks and no extra streams between the
    transport and the session (each hop cost an event-loop iteration per message)."""

    on_violation: Callable[[str], None]
    on_tools_changed: Callable[[], None]
    outstanding: set[str | int] = field(default_factory=set)
    violated: bool = False

    def start(
        self,
        tg: TaskGroup,
        transport_read: ObjectReceiveStream[SessionMessage | Exception],
        transport_write: ObjectSendStream[SessionMessage],
    ) -> tuple[ObjectReceiveStream[SessionMessage | Exception], ObjectSendStream[SessionMessage]]:
        """The session's ends: the transport's streams, checked as the session uses them (``tg`` unused:
        kept so callers need not change)."""
        del tg
        self._session_ends = (_CheckedRead(self, transport_read), _CheckedWrite(self, transport_write))
        return self._session_ends

    async def aclose(self) -> None:
        """Close the session's ends of the streams."""
        for stream in getattr(self, "_session_ends", ()):
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                await stream.aclose()

    def _violate(self, reason: str) -> None:
        if not self.violated:
            self.violated = True
            self.on_violation(reason)

    def check(self, item: SessionMessage | Exception) -> str | None:
        """The reason ``item`` desynchronises the stream, or None when it is fine."""
        if isinstance(item, Exception):
            return str(item) or type(item).__name__
        message = item.message
        if isinstance(message, mcp_types.JSONRPCResponse | mcp_types.JSONRPCError):
            request_id = message.id
            if request_id is None or request_id not in self.outstanding:
                return f"the server replied to request id {request_id!r}, which is not outstanding"
            self.outstanding.discard(request_id)
        return None


class _CheckedRead(ObjectReceiveStream[SessionMessage | Exception]):
    """The transport's read stream as the session sees it: a message that desynchronises the
    stream is reported and ends it (the session sees end of stream; nothing more is passed on)."""

    def __init__(self, guard: Guard, source: ObjectReceiveStream[SessionMessage | Exception]) -> None:
        self._guard = guard
        self._source = source

    async def receive(self) -> SessionMessage | Exception:
        guard = self._guard
        if guard.violated:
            raise anyio.EndOfStream
        try:
            item = await self._source.receive()
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            raise anyio.EndOfStream from None
        reason = guard.check(item)
        if reason is not None:
            guard._violate(reason)
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                await self._source.aclose()
            raise anyio.EndOfStream
        assert isinstance(item, SessionMessage)
        message = item.message
        if isinstance(message, mcp_types.JSONRPCNotification) and message.method == TOOLS_CHANGED:
            guard.on_tools_changed()
        return item

    async def aclose(self) -> None:
        await self._source.aclose()


class _CheckedWrite(ObjectSendStream[SessionMessage]):
    """The transport's write stream as the session sees it: every request id is recorded as sent."""

    def __init__(self, guard: Guard, sink: ObjectSendStream[SessionMessage]) -> None:
        self._guard = guard
        self._sink = sink

    async def send(self, item: SessionMessage) -> None:
        if isinstance(item.message, mcp_types.JSONRPCRequest):
            self._guard.outstanding.add(item.message.id)
        await self._sink.send(item)

    async def aclose(self) -> None:
        await self._sink.aclose()
