"""A JSON-RPC guard between a transport and the MCP session.

It records the id of every request the client sends and checks every reply the
server sends: a reply to an id that is not outstanding, or a line that is not a
JSON-RPC message, is a desynchronisation. The guard reports it (the connection is
then closed) and forwards nothing more, so one request's reply can never be handed
to another. It also notices ``notifications/tools/list_changed``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio
import mcp_types
from anyio.abc import ObjectReceiveStream, ObjectSendStream, TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage

__all__ = ["Guard"]

TOOLS_CHANGED = "notifications/tools/list_changed"


@dataclass
class Guard:
    """Pumps messages both ways, checking each reply against the outstanding requests."""

    on_violation: Callable[[str], None]
    on_tools_changed: Callable[[], None]
    outstanding: set[str | int] = field(default_factory=set)
    violated: bool = False

    def start(
        self,
        tg: TaskGroup,
        transport_read: ObjectReceiveStream[SessionMessage | Exception],
        transport_write: ObjectSendStream[SessionMessage],
    ) -> tuple[MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]]:
        to_session, session_read = anyio.create_memory_object_stream[SessionMessage | Exception](16)
        session_write, from_session = anyio.create_memory_object_stream[SessionMessage](16)
        self._session_ends = (session_read, session_write)
        tg.start_soon(self._inbound, transport_read, to_session)
        tg.start_soon(self._outbound, from_session, transport_write)
        return session_read, session_write

    async def aclose(self) -> None:
        """Close the session's ends of the streams (the pumps then finish)."""
        for stream in getattr(self, "_session_ends", ()):
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

    async def _inbound(
        self,
        source: ObjectReceiveStream[SessionMessage | Exception],
        sink: MemoryObjectSendStream[SessionMessage | Exception],
    ) -> None:
        async with sink, source:
            with contextlib.suppress(anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                async for item in source:
                    if self.violated:
                        return
                    reason = self.check(item)
                    if reason is not None:
                        self._violate(reason)
                        return
                    assert isinstance(item, SessionMessage)
                    message = item.message
                    if isinstance(message, mcp_types.JSONRPCNotification) and message.method == TOOLS_CHANGED:
                        self.on_tools_changed()
                    await sink.send(item)

    async def _outbound(
        self,
        source: MemoryObjectReceiveStream[SessionMessage],
        sink: ObjectSendStream[SessionMessage],
    ) -> None:
        with contextlib.suppress(anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            async with source:
                async for item in source:
                    if isinstance(item.message, mcp_types.JSONRPCRequest):
                        self.outstanding.add(item.message.id)
                    await sink.send(item)
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            await sink.aclose()
