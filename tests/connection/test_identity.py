"""Ownership: another owner's run context is refused everywhere; live objects refuse to be copied."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from console_bridge import NotAllowed, Owner, OwnerMismatch, ServerError, current_owner, run_context
from tests.support.places import server_entry

from .helpers import OTHER, OWNER, read_log

pytestmark = pytest.mark.anyio


def probe(log: Path) -> dict[str, object]:
    return server_entry("probe.py", "--log", str(log))


async def open_probe(conns: Any, log: Path) -> Any:
    conn = conns(probe(log), tools=["env"], resources=["r://one"], prompts=["p"])
    await conn.connect()
    return conn


def test_owner_is_frozen_and_validated() -> None:
    owner = Owner("a", session_id="s")
    with pytest.raises(AttributeError):
        owner.agent_id = "b"  # type: ignore[misc]
    assert owner == Owner("a", "s") and owner != Owner("a") and hash(owner) == hash(Owner("a", "s"))
    with pytest.raises(TypeError):
        Owner("")
    with pytest.raises(TypeError):
        Owner("a", session_id=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError), run_context("a"):  # type: ignore[arg-type]
        pass


def test_run_context_nests_and_resets() -> None:
    assert current_owner() is None
    with run_context(OWNER):
        assert current_owner() == OWNER
        with run_context(OTHER):
            assert current_owner() == OTHER
        assert current_owner() == OWNER
    assert current_owner() is None


async def test_other_owner_is_refused_by_every_connection_method(conns: Any, log: Path) -> None:
    conn = await open_probe(conns, log)
    [handle] = conn.tools()
    [read, prompt] = conn.capability_tools()
    await conn.discover()  # a barrier for the log below
    before = read_log(log)
    attempts: list[Callable[[], Any]] = [
        lambda: conn.call_tool("env", {}),
        lambda: conn.discover("tools"),
        lambda: conn.read_resource("r://one"),
        lambda: conn.get_prompt("p"),
        lambda: handle({}),
        lambda: read({"uri": "r://one"}),
        lambda: prompt({"name": "p"}),
        conn.connect,
    ]
    with run_context(OTHER):
        for attempt in attempts:
            with pytest.raises(OwnerMismatch) as info:
                await attempt()
            assert isinstance(info.value, NotAllowed)
            assert "agent-1/s-1" in str(info.value) and "agent-2/s-2" in str(info.value)
        with pytest.raises(OwnerMismatch):
            conn.tools()
        with pytest.raises(OwnerMismatch):
            conn.capability_tools()
        # the same agent in another session is another owner
        with run_context(Owner("agent-1", session_id="other-session")), pytest.raises(OwnerMismatch):
            await conn.call_tool("env", {})
    await conn.call_tool("env", {})  # barrier
    assert read_log(log) == [*before, "tools/list", "tools/call env"]  # strict pin re-list + the call


async def test_same_owner_and_no_context_are_allowed(conns: Any, log: Path) -> None:
    conn = await open_probe(conns, log)
    [handle] = conn.tools()
    assert "cwd" in (await conn.call_tool("env", {})).text  # host call: no run context
    with run_context(OWNER):
        assert "cwd" in (await conn.call_tool("env", {})).text
        assert "cwd" in (await handle({})).text
        assert conn.tools()[0].name == "env"
        with pytest.raises(ServerError):  # allowed through, and the probe has no resources
            await conn.read_resource("r://one")


async def test_run_context_works_across_await_and_into_tasks(conns: Any, log: Path) -> None:
    conn = await open_probe(conns, log)
    [handle] = conn.tools()
    with run_context(OTHER):
        await anyio.sleep(0)
        await anyio.lowlevel.checkpoint()
        with pytest.raises(OwnerMismatch):
            await handle({})
        refused: list[BaseException] = []

        async def in_task() -> None:
            await anyio.sleep(0)
            try:
                await handle({})
            except OwnerMismatch as exc:
                refused.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(in_task)  # tasks inherit the context of their creator
        assert len(refused) == 1
    # the context ended: host calls again
    assert "cwd" in (await handle({})).text


async def test_connection_and_handles_refuse_pickle_and_copy(conns: Any, log: Path) -> None:
    conn = await open_probe(conns, log)
    [handle] = conn.tools()
    [capability, _] = conn.capability_tools()
    for obj in (conn, handle, capability):
        with pytest.raises(TypeError, match="cannot be pickled or copied"):
            pickle.dumps(obj)
        with pytest.raises(TypeError, match="cannot be pickled or copied"):
            copy.deepcopy(obj)
        with pytest.raises(TypeError, match="cannot be pickled or copied"):
            copy.copy(obj)
        with pytest.raises(TypeError):
            pickle.dumps(obj, protocol=0)
    # still perfectly usable afterwards
    assert "cwd" in (await handle({})).text


async def test_unconnected_connection_refuses_pickle(conns: Any) -> None:
    conn = conns(server_entry("probe.py"))
    with pytest.raises(TypeError):
        pickle.dumps(conn)
    with pytest.raises(TypeError):
        copy.deepcopy({"nested": [conn]})
