"""The cell loop on its own (a call path that replies from a script): windows, bounds, stops."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from console_bridge import CellTimeout
from console_bridge._console._cell_loop import CellLoop, Timing
from console_bridge._results import CellResult

pytestmark = pytest.mark.anyio


class Script:
    """A call path: each call returns the next scripted cell (or the last one, over and over)."""

    def __init__(self, *cells: CellResult) -> None:
        self.cells = list(cells)
        self.sent: list[dict[str, Any]] = []
        self.restarts = 0

    async def call(self, args: dict[str, Any], *, errors_as_results: bool = False) -> CellResult:
        self.sent.append(dict(args))
        return self.cells.pop(0) if len(self.cells) > 1 else self.cells[0]

    async def restart_worker(self) -> None:
        self.restarts += 1


def _cell(text: str = "", *, running: bool = False) -> CellResult:
    return CellResult(text=text, running=running, server="mcp-console", tool="send", segments=(("stdout", text),))


def _loop(calls: Script, *, starting: bool = False, started_at: float | None = None) -> CellLoop:
    observer = SimpleNamespace(
        last_notice=SimpleNamespace(starting=starting),
        last_started_at=started_at,
        output_bytes=0,  # (what on_output's LiveOutput reads: no poll here is cut, so the polls' pieces pass on)
        last_framed="",
        display_reader=lambda: None,
    )
    return CellLoop(
        calls,  # type: ignore[arg-type]
        observer,  # type: ignore[arg-type]
        lambda: Timing(poll_window=2.0, stream_window=0.05, startup_timeout=0.3, max_output=None),
        python=True,
        version=lambda: "0.0.6",
        recording=lambda: None,
        cpu_busy=lambda: None,
    )


async def test_run_polls_to_the_end_in_stream_slices_while_output_is_streamed() -> None:
    calls = Script(_cell("a", running=True), _cell("b", running=True), _cell("c"))
    seen: list[str] = []
    result = await _loop(calls).run({"python": "x"}, timeout=None, on_output=lambda c: seen.append(c.text), check=False)
    assert result.text == "abc" and not result.running and seen == ["a", "b", "c"]
    assert calls.sent[0] == {"python": "x", "timeout_ms": 50} and calls.sent[1] == {"timeout_ms": 50}


async def test_run_without_streaming_polls_with_whole_windows_once_the_cell_started() -> None:
    calls = Script(_cell("a", running=True), _cell("b"))
    result = await _loop(calls).run({"python": "x"}, timeout=None, on_output=None, check=False)
    first, second = (sent["timeout_ms"] for sent in calls.sent)
    assert result.text == "ab" and 250 <= first <= 300 and second == 2000  # (before: startup_timeout bounds it)


async def test_a_cell_past_its_timeout_is_interrupted_and_the_output_so_far_kept() -> None:
    calls = Script(_cell("so far", running=True), _cell("", running=True))
    with pytest.raises(CellTimeout, match=r"ran past timeout=0\.1s") as caught:
        await _loop(calls).run({"python": "x"}, timeout=0.1, on_output=None, check=False)
    assert caught.value.details["cell_started"] is True and "so far" in caught.value.result.text
    assert {"control": "interrupt", "timeout_ms": 5000} in calls.sent
    assert {"control": "restart", "timeout_ms": 5000} in calls.sent  # the interrupt did not take


async def test_a_worker_that_never_starts_the_cell_is_bounded_by_startup_timeout() -> None:
    calls = Script(_cell("", running=True))
    with pytest.raises(CellTimeout, match=r"did not start the cell within startup_timeout=0\.3s") as caught:
        await _loop(calls, starting=True).run({"python": "x"}, timeout=60, on_output=None, check=False)
    assert caught.value.details["cell_started"] is False


async def test_interrupt_that_breaks_a_starting_worker_restarts_it() -> None:
    broken = CellResult(text="worker startup interrupted", is_error=True, server="mcp-console", tool="send")
    calls = Script(broken)
    assert (await _loop(calls).interrupt(1000)) is broken and calls.restarts == 1
    calls = Script(_cell("KeyboardInterrupt"))
    await _loop(calls).interrupt(1000)
    assert calls.restarts == 0
