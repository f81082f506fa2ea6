"""The bounded event store behind serve's resumable SSE streams (pure)."""

from __future__ import annotations

import pytest
from mcp.server.streamable_http import EventMessage
from mcp_types import JSONRPCNotification, JSONRPCResponse

from console_bridge._serve._events import BoundedEventStore

pytestmark = pytest.mark.anyio


def response(i: int, text: str = "x") -> JSONRPCResponse:
    return JSONRPCResponse(jsonrpc="2.0", id=i, result={"content": [{"type": "text", "text": text}]})


async def replayed(store: BoundedEventStore, session: str, last: str) -> tuple[str | None, list[EventMessage]]:
    got: list[EventMessage] = []

    async def send(event: EventMessage) -> None:
        got.append(event)

    return await store.session(session).replay_events_after(last, send), got


async def test_a_stream_resumes_after_its_last_event_within_its_session_only() -> None:
    store = BoundedEventStore()
    alice, bob = store.session("alice-session"), store.session("bob-session")
    priming = await alice.store_event("1", None)
    progress = await alice.store_event("1", JSONRPCNotification(jsonrpc="2.0", method="notifications/progress"))
    await bob.store_event("1", response(1, "bob's"))  # same stream id (a request id) in another session
    result = await alice.store_event("1", response(1, "alice's"))
    stream, events = await replayed(store, "alice-session", priming)
    assert stream == "1" and [e.event_id for e in events] == [progress, result]  # the priming event has no message
    assert "alice's" in events[-1].message.model_dump_json() and len({priming, progress, result}) == 3
    assert await replayed(store, "bob-session", priming) == (None, [])  # alice's event id means nothing to bob
    assert await replayed(store, "alice-session", "made-up") == (None, [])
    assert len(priming) >= 22  # 128 random bits: not guessable


async def test_memory_is_bounded_oldest_first() -> None:
    store = BoundedEventStore(max_bytes=2_000, max_events=1_000)
    view = store.session("s")
    first = await view.store_event("1", response(1, "a" * 500))
    for i in range(20):
        await view.store_event(str(i), response(i, "b" * 500))
    events, size = store.size
    assert size <= 2_000 and events < 21
    assert await replayed(store, "s", first) == (None, [])  # evicted: resumption replays nothing
    counted = BoundedEventStore(max_events=3)
    for _ in range(10):
        await counted.session("s").store_event("1", None)
    assert counted.size[0] == 3
