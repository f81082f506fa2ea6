"""The model's tool on its own (no server): refusals, the clamp, and the Gate's approval."""

from __future__ import annotations

from typing import Any

import pytest

from console_bridge import Busy, ConnectionClosed, DependenciesRefused, NotAllowed, Owner, Policy
from console_bridge._console._model_tool import ModelTool
from console_bridge._results import CellResult

pytestmark = pytest.mark.anyio

SCHEMA = {"type": "object", "properties": {k: {} for k in ("python", "sql", "stdin", "control", "timeout_ms")}}


class Cells:
    """The call path and the cell loop as the tool sees them: what was sent, and a reply."""

    def __init__(self, *, busy: bool = False) -> None:
        self.sent: list[dict[str, Any]] = []
        self.interrupts: list[int] = []
        self.busy = busy

    async def call(self, args: dict[str, Any]) -> CellResult:
        if self.busy:
            raise Busy("a cell is still running in this console; poll() for its output")
        self.sent.append(args)
        return CellResult(text="ran\n", server="mcp-console", tool="send")

    async def interrupt(self, timeout_ms: int) -> CellResult:
        self.interrupts.append(timeout_ms)
        return CellResult(text="", server="mcp-console", tool="send")


def _tool(cells: Cells, policy: Policy | None = None, *, installs: bool = False) -> ModelTool:
    tool = ModelTool(
        policy or Policy(),
        owner=lambda: Owner("host"),
        installs=installs,
        poll_window=lambda: 2.0,
        window_ms=lambda ms: 2000 if ms is None else min(ms, 2000),
        call=cells.call,
        interrupt=cells.interrupt,
    )
    tool.schema = SCHEMA
    return tool


async def test_the_tool_refuses_what_the_host_keeps_and_clamps_the_window() -> None:
    cells = Cells()
    tool = _tool(cells)
    [handle] = tool.handles()
    assert handle.name == "send" and "capped at 2000 ms" in handle.description
    with pytest.raises(NotAllowed, match="reserved for the host"):
        await tool.send({"control": "restart"})
    with pytest.raises(DependenciesRefused):
        await tool.send({"requirements": {"python": ["requests"]}})
    with pytest.raises(NotAllowed, match="does not take r"):
        await tool.send({"r": "1"})
    await tool.send({"python": "1", "timeout_ms": 60_000, "stdin": None})  # null: not given
    assert cells.sent == [{"python": "1", "timeout_ms": 2000}]
    await tool.send({"control": "interrupt"})
    assert cells.interrupts == [2000]


async def test_what_the_approver_sees_is_a_copy_what_ran_is_what_was_approved() -> None:
    shown: list[dict[str, Any]] = []

    def approve(request: Any) -> bool:
        shown.append(dict(request.arguments))
        request.arguments["python"] = "print('not what was approved')"
        request.arguments["control"] = "restart"
        return True

    cells = Cells()
    tool = _tool(cells, Policy(approve=approve))
    [handle] = tool.handles()
    assert handle.requires_approval
    await tool.send({"python": "print('approved')"})
    assert shown == [{"python": "print('approved')", "timeout_ms": 2000}]
    assert cells.sent == [{"python": "print('approved')", "timeout_ms": 2000}]


async def test_busy_is_said_in_sends_terms() -> None:
    tool = _tool(Cells(busy=True))
    tool.handles()
    with pytest.raises(Busy, match=r"call send\(\{\}\)"):
        await tool.send({"python": "1"})


async def test_a_send_never_handed_out_is_refused() -> None:
    tool = _tool(Cells())
    with pytest.raises(ConnectionClosed, match="never handed out"):
        await tool.send({"python": "1"})
