"""A bounded in-memory event store for ``serve --transport http``: SSE streams can be resumed.

With an event store the MCP SDK starts every SSE stream with a priming event (an id, empty data,
a ``retry`` hint) and stores each message it sends, so a client whose connection dropped in the
middle of a long ``send`` reconnects with ``Last-Event-ID`` and gets the rest (SEP-1699). Memory is
bounded by a total byte budget and an event count shared by all MCP sessions; the oldest events
go first, and a client asking to resume past them gets nothing replayed (as for an unknown id).
Stream ids are only unique within an MCP session (they are JSON-RPC request ids), so each session
gets its own view (:meth:`BoundedEventStore.session`): a resumption finds only its own session's
events, and event ids are random (128 bits) besides.
"""

from __future__ import annotations

import secrets
from collections import OrderedDict, deque
from dataclasses import dataclass, field

from mcp.server.streamable_http import EventCallback, EventId, EventMessage, EventStore, StreamId
from mcp_types import JSONRPCMessage

__all__ = ["BoundedEventStore", "SessionEvents"]

_Stream = tuple[str, StreamId]  # (MCP session id, stream id)


@dataclass(slots=True)
class _Event:
    stream: _Stream
    message: JSONRPCMessage | None
    size: int


@dataclass(eq=False)
class BoundedEventStore:
    """Keeps the most recent events of all sessions within ``max_bytes`` (their JSON size) and
    ``max_events``; :meth:`session` gives one MCP session's ``EventStore``."""

    max_bytes: int = 32 * 1024 * 1024
    max_events: int = 10_000
    _events: OrderedDict[EventId, _Event] = field(default_factory=OrderedDict)
    _streams: dict[_Stream, deque[EventId]] = field(default_factory=dict)
    _bytes: int = 0

    def session(self, session_id: str) -> SessionEvents:
        return SessionEvents(self, session_id)

    def store(self, stream: _Stream, message: JSONRPCMessage | None) -> EventId:
        event_id = secrets.token_urlsafe(16)
        size = 64 if message is None else 64 + len(message.model_dump_json(by_alias=True, exclude_unset=True))
        self._events[event_id] = _Event(stream, message, size)
        self._streams.setdefault(stream, deque()).append(event_id)
        self._bytes += size
        while self._events and (self._bytes > self.max_bytes or len(self._events) > self.max_events):
            self._evict()
        return event_id

    def _evict(self) -> None:
        old_id, old = self._events.popitem(last=False)
        self._bytes -= old.size
        ids = self._streams.get(old.stream)
        if ids is not None:
            if ids and ids[0] == old_id:
                ids.popleft()
            else:
                ids.remove(old_id)
            if not ids:
                del self._streams[old.stream]

    def after(self, session_id: str, last_event_id: EventId) -> tuple[StreamId, list[EventMessage]] | None:
        """The stream of ``last_event_id`` and its later events, if it is this session's and still held."""
        last = self._events.get(last_event_id)
        if last is None or last.stream[0] != session_id:
            return None
        ids = list(self._streams.get(last.stream, ()))
        later = [(event_id, self._events[event_id].message) for event_id in ids[ids.index(last_event_id) + 1 :]]
        return last.stream[1], [EventMessage(message, event_id) for event_id, message in later if message is not None]

    @property
    def size(self) -> tuple[int, int]:
        """(events, bytes) held now."""
        return len(self._events), self._bytes


@dataclass(eq=False)
class SessionEvents(EventStore):
    """One MCP session's view of the shared store (the SDK's ``EventStore`` interface)."""

    store: BoundedEventStore
    session_id: str

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        return self.store.store((self.session_id, stream_id), message)

    async def replay_events_after(self, last_event_id: EventId, send_callback: EventCallback) -> StreamId | None:
        found = self.store.after(self.session_id, last_event_id)
        if found is None:
            return None
        stream_id, events = found
        for event in events:
            await send_callback(event)
        return stream_id
