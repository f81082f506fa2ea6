"""``_root_task.RootTask``: why a connection's and a manager's background work has a root task of its
own, and that the root leaves nothing behind."""

from __future__ import annotations

import asyncio
import contextvars
from contextlib import AsyncExitStack

import anyio
import pytest

from console_bridge._root_task import RootTask

pytestmark = pytest.mark.anyio

WHO = contextvars.ContextVar("who", default="nobody")


async def test_a_task_group_cannot_span_a_start_and_a_close_in_two_tasks() -> None:
    """The reason for the root task: a portal (or a Ray actor) starts an object in one task and closes
    it in another, and anyio refuses to leave a task group outside the task that entered it."""
    stack = AsyncExitStack()

    async def start() -> None:
        group = await stack.enter_async_context(anyio.create_task_group())
        group.start_soon(anyio.sleep_forever)
        group.cancel_scope.cancel()

    with pytest.raises(BaseException) as refused:
        async with anyio.create_task_group() as tg:
            tg.start_soon(start)
        await stack.aclose()
    assert "cancel scope" in "".join(_messages(refused.value))


def _messages(exc: BaseException) -> list[str]:
    if isinstance(exc, BaseExceptionGroup):
        return [m for inner in exc.exceptions for m in _messages(inner)]
    return [str(exc)]


async def test_the_root_task_starts_in_one_task_ends_in_another_and_leaves_nothing() -> None:
    stop = anyio.Event()
    seen: list[str] = []
    inner_done = anyio.Event()

    async def body() -> None:
        seen.append(WHO.get())  # the starter's context goes with it (a run context, for one)
        async with anyio.create_task_group() as tg:  # everything under the root is structured
            tg.start_soon(anyio.sleep_forever)
            await stop.wait()
            tg.cancel_scope.cancel()
        inner_done.set()

    root = RootTask(body)

    async def starter() -> None:
        WHO.set("starter")
        root.start()
        root.start()  # once only

    async with anyio.create_task_group() as tg:
        tg.start_soon(starter)
    assert root.started
    await anyio.sleep(0.01)
    assert seen == ["starter"]
    stop.set()  # told to unwind from this (another) task, then waited for
    with anyio.fail_after(5):
        await root.wait()
    assert inner_done.is_set()
    await anyio.sleep(0)
    assert not [task for task in asyncio.all_tasks() if "RootTask" in repr(task.get_coro())]


async def test_waiting_for_a_root_that_never_started_returns_at_once() -> None:
    root = RootTask(anyio.sleep_forever)
    assert not root.started
    with anyio.fail_after(1):
        await root.wait()
