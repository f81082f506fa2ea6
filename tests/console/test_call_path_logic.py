"""The call path on its own (a connection that replies from a list, the real observer): what a
refusal as Busy, a restart and a console closed from outside mean for a call."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from console_bridge import Busy, ConnectionClosed
from console_bridge._cells._notices import BUSY
from console_bridge._cells._observe import CellObserver
from console_bridge._console._call_path import CallPath
from console_bridge._console._session_files import SessionFiles
from console_bridge._console._worker_boot import WorkerBoot
from console_bridge._errors import ServerError
from console_bridge._results import ToolResult

pytestmark = pytest.mark.anyio


class Replies:
    """A connection whose ``send`` replies are given in advance (an exception is raised)."""

    def __init__(self, *replies: object) -> None:
        self.replies = list(replies)
        self.sent: list[dict[str, Any]] = []
        self.pid = None

    async def call_tool(self, name: str, args: dict[str, Any]) -> ToolResult:
        assert name == "send"
        self.sent.append(dict(args))
        reply = self.replies.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        assert isinstance(reply, ToolResult)
        return reply


class Meter:
    """What the call path asks of a cell meter."""

    def __init__(self) -> None:
        self.active = False
        self.restored: list[object] = []

    def state(self) -> object:
        return ("running cell's", self.active)

    def start(self) -> None:
        self.active = True

    def restore(self, state: object) -> None:
        self.restored.append(state)

    def stop(self) -> None:
        self.active = False


def _text(text: str) -> ToolResult:
    return ToolResult(text=text, server="mcp-console", tool="send")


def _busy() -> ServerError:
    return ServerError("refused", result=ToolResult(text=f"{BUSY}]", is_error=True, server="mcp-console", tool="send"))


def _path(conn: Replies, *, close_reason: str | None = None) -> tuple[CallPath, WorkerBoot, list[str]]:
    observer = CellObserver(lambda: None, lambda recording: None, events_wait=0.1)
    fresh: list[str] = []
    boot = WorkerBoot(lambda: Path("/nonexistent"), wanted=False, on_fresh=lambda: fresh.append("fresh"))
    files = SessionFiles(lambda: None, lambda: Path("/nonexistent"), private=".console-bridge-x", notices=[])
    calls = CallPath(
        lambda what: conn,  # type: ignore[arg-type,return-value]
        observer,
        boot=boot,
        files=files,
        mark=lambda: None,
        recording=lambda: None,
        close_reason=lambda: close_reason,
        poll_window=lambda: 1.0,
    )
    return calls, boot, fresh


async def test_a_cell_refused_as_busy_queues_nothing_and_leaves_the_running_cells_meter() -> None:
    conn = Replies(_busy())
    calls, _, _ = _path(conn)
    meter = Meter()
    calls.meter = meter  # type: ignore[assignment]
    with pytest.raises(Busy, match="nothing was queued"):
        await calls.call({"python": "2", "timeout_ms": 1000})
    assert meter.restored == [("running cell's", False)] and len(conn.sent) == 1


async def test_after_a_restart_a_cell_refused_as_busy_is_submitted_again() -> None:
    conn = Replies(_text("[idle]"), _busy(), _text("2\n"))
    calls, boot, fresh = _path(conn)
    await calls.restart_worker()
    assert boot.pending and fresh == ["fresh"]  # a fresh worker boots at the next call
    began = time.monotonic()
    cell = await calls.call({"python": "print(2)", "timeout_ms": 1000})
    assert cell.text == "2\n" and time.monotonic() - began >= 0.1
    assert [sent.get("python") for sent in conn.sent] == [None, "print(2)", "print(2)"]


async def test_a_poll_refused_as_busy_is_not_retried() -> None:
    conn = Replies(_text("[idle]"), _busy())
    calls, _, _ = _path(conn)
    await calls.restart_worker()
    with pytest.raises(Busy):
        await calls.call({"timeout_ms": 1000})  # no code: nothing to submit again


async def test_a_console_closed_from_outside_says_why() -> None:
    conn = Replies(ConnectionClosed("send: closed", server="mcp-console"))
    calls, _, _ = _path(conn, close_reason="closed by the session manager after 600 s idle")
    with pytest.raises(ConnectionClosed, match="this console was closed by the session manager after 600 s idle"):
        await calls.call({"python": "1", "timeout_ms": 1000})


async def test_a_restart_through_send_makes_a_fresh_worker_ahead() -> None:
    conn = Replies(_text("[idle]"))
    calls, boot, fresh = _path(conn)
    await calls.call({"control": "restart", "timeout_ms": 1000})
    assert boot.pending and fresh == ["fresh"]


def _refused_unrun() -> ServerError:
    text = "[worker stopped: in-memory state lost; explicit restart required]"
    return ServerError("refused", result=ToolResult(text=text, is_error=True, server="mcp-console", tool="send"))


async def test_a_cell_refused_unrun_after_a_reported_kill_goes_to_the_fresh_worker() -> None:
    """Issue 30: a limit killed the worker at the end of a cell, whose result said so; the server then refused
    the next cell with nothing but its restart notice, and that cell came back with no error and no output,
    its code never run (seen in the burst test). It is submitted again to the fresh worker, once."""
    text = "[worker sideband read failed: worker sideband closed]\n[worker terminated by signal 9]"
    killed = ServerError("died", result=ToolResult(text=text, is_error=True, server="mcp-console", tool="send"))
    conn = Replies(killed, _refused_unrun(), _text("[idle]"), _text("2\n"))
    calls, _, _ = _path(conn)
    first = await calls.call({"python": "burst()", "timeout_ms": 1000})
    assert first.worker_exited
    cell = await calls.call({"python": "print(2)", "timeout_ms": 1000})
    assert cell.text == "2\n" and cell.error is None, cell
    assert [(sent.get("python"), sent.get("control")) for sent in conn.sent] == [
        ("burst()", None),
        ("print(2)", None),
        (None, "restart"),
        ("print(2)", None),
    ]


async def test_a_refusal_nobody_was_told_of_is_not_submitted_again() -> None:
    """Without a kill the caller was told of, the same refusal is that cell's news: reworded, not run."""
    conn = Replies(_refused_unrun(), _text("[idle]"))
    calls, _, _ = _path(conn)
    cell = await calls.call({"python": "print(2)", "timeout_ms": 1000})
    assert "fresh worker was started" in cell.text and len(conn.sent) == 2


async def test_a_server_that_ended_cleanly_under_a_cell_was_closed_from_outside() -> None:
    """`console-bridge kill` during a cell: mcp-console answers the cell "[worker stopped ...]" as it shuts down,
    or, under load, ends (status 0, its input closed) before it answers. Both say the session was closed from
    outside (the second said "server crashed" in a full suite's run)."""
    gone = ConnectionClosed(
        "tool 'send': server 'mcp-console' crashed: the server process exited with status 0; the connection is closed",
        server="mcp-console",
    )
    calls, _, _ = _path(Replies(gone))
    with pytest.raises(ConnectionClosed, match="closed from outside while the cell ran"):
        await calls.call({"python": "import time; time.sleep(60)", "timeout_ms": 1000})
    crashed = ConnectionClosed("server 'mcp-console' crashed: the server process exited with status -9")
    calls, _, _ = _path(Replies(crashed))
    with pytest.raises(ConnectionClosed, match="status -9"):
        await calls.call({"python": "1", "timeout_ms": 1000})
