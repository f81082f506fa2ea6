"""The root task of an object whose life spans its callers' tasks: the one place the package starts
a task outside a task group, and why.

A connection (its transport and MCP session) and a session manager (its warm-ups and culling) are
started by one call and closed by another, and the two often run in different tasks: every call of
a blocking twin is a task of its portal (``_portal``), every call of a Ray actor a task of the
actor's loop, and ``await conn.connect()`` ... ``await conn.close()`` may come from any two tasks
of a program. An anyio task group must be left in the task that entered it (anyio raises
``RuntimeError`` otherwise), so no task group of a caller can hold the object's background work.
That work runs in one root task per object, started here; everything under the root is an anyio
task group, and the object's close asks the root to unwind and waits until it has (:meth:`wait`):
nothing is left behind.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import anyio

__all__ = ["RootTask"]


class RootTask:
    """One object's root task: :meth:`start` runs ``body`` once, in a task of its own (the caller's
    context variables, e.g. its run context, go with it); :meth:`wait` returns once it has ended."""

    def __init__(self, body: Callable[[], Awaitable[None]]) -> None:
        self._body = body
        self._task: asyncio.Task[None] | None = None  # kept: the loop holds only a weak reference
        self._done = anyio.Event()

    @property
    def started(self) -> bool:
        return self._task is not None

    def start(self) -> None:
        """Start the root task (once); a second call does nothing."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        try:
            await self._body()
        finally:
            self._done.set()

    async def wait(self) -> None:
        """Until the root task has ended (at once when it never started). The body decides when: the
        object tells it to unwind (an event it waits on) before it waits here."""
        if self._task is not None:
            await self._done.wait()
