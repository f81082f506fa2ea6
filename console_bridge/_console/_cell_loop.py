"""A part of :class:`AsyncConsole`: a cell from submission to its outcome. ``run`` polls until
the cell is done (in ``stream_window`` slices while output is streamed), bounds the cell and the
worker's startup, stops a cell past its bound (interrupt, then a fresh worker), and returns the
whole output; ``settle`` and ``interrupt`` are the controls around it. Every request goes through
the call path.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from console_bridge._cells._observe import CellObserver, merge
from console_bridge._cells._recordings import Recording
from console_bridge._console._call_path import CallPath
from console_bridge._console._live_output import LiveOutput
from console_bridge._console._status import SERVER
from console_bridge._console._whole_output import complete
from console_bridge._errors import Busy, CellTimeout
from console_bridge._results import CellResult

__all__ = ["CellLoop", "Timing"]


@dataclasses.dataclass(frozen=True, slots=True)
class Timing:
    """The bounds a cell's loop keeps (the console's checked options)."""

    poll_window: float
    stream_window: float
    startup_timeout: float
    max_output: int | None


class CellLoop:
    """Cells of one session, polled to their end.

    ``timing`` gives the console's bounds (read at each cell: they are its attributes);
    ``version`` gives the server's version once verified (0.0.5 records no cell start);
    ``recording`` the session's recording, where a cell's whole output is read past the per-poll
    window; ``cpu_busy`` the confinement's check for work a stopped cell left running, if the host
    can tell.
    """

    def __init__(
        self,
        calls: CallPath,
        observer: CellObserver,
        timing: Callable[[], Timing],
        *,
        python: bool,
        version: Callable[[], str | None],
        recording: Callable[[], Recording | None],
        cpu_busy: Callable[[], Callable[[], Awaitable[bool]] | None],
    ) -> None:
        self._calls = calls
        self._observer = observer
        self._timing = timing
        self._python = python
        self._version = version
        self._recording = recording
        self._cpu_busy = cpu_busy

    async def run(
        self,
        code: dict[str, Any],
        *,
        timeout: float | None,
        on_output: Callable[[CellResult], Any] | None,
        check: bool,
    ) -> CellResult:
        """Submit ``code`` (one language's, checked) and poll until it is done (see ``AsyncConsole.run``)."""
        timing = self._timing()
        started = time.monotonic()
        startup_deadline = started + timing.startup_timeout
        deadline: float | None = None
        cell_started = saw_phase = False
        chunks: list[CellResult] = []
        args: dict[str, Any] = dict(code)
        reason = ""
        live = LiveOutput(self._observer, timing.max_output) if on_output is not None else None
        while True:
            now = time.monotonic()
            window = timing.poll_window
            if on_output is not None or (timeout is not None and not cell_started):
                window = min(window, timing.stream_window)
            limit = deadline if deadline is not None else (startup_deadline if not cell_started else None)
            if limit is not None:
                window = max(0.0, min(window, limit - now))
            args["timeout_ms"] = int(window * 1000)
            chunk = await self._calls.call(args)
            chunks.append(chunk)
            # The cell started: the recording says so (0.0.6), output came, it ended, or (0.0.5, which
            # records no start) the server no longer reports a worker-preparation phase.
            starting = self._observer.last_notice.starting
            saw_phase = saw_phase or starting
            # A worker that was prepared runs the bridge's Python startup code before the cell: its
            # "ready" note (last_started_at) marks the start then, not the end of the phase.
            no_phase = self._version() == "0.0.5" and not starting and not (saw_phase and self._python)
            if not cell_started and (
                self._observer.last_started_at is not None
                or chunk.text
                or chunk.stderr
                or not chunk.running
                or no_phase
            ):
                cell_started = True
                begun = time.monotonic()
                if self._observer.last_started_at is not None:
                    begun -= max(0.0, time.time() - self._observer.last_started_at)
                if timeout is not None:
                    deadline = begun + timeout
            if on_output is not None and live is not None:  # the whole output, past a poll's window
                recording = self._recording()
                for piece in live.pieces(chunk, recording.path if recording is not None else None):
                    outcome = on_output(piece)
                    if isinstance(outcome, Awaitable):
                        await outcome
            if not chunk.running:
                result = self._whole(merge(chunks, time.monotonic() - started), live)
                return result.raise_for_error() if check else result
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                reason = f"the cell ran past timeout={timeout:g}s; it was interrupted and the session lives on"
                break
            if not cell_started and now >= startup_deadline:
                reason = (
                    f"the worker did not start the cell within startup_timeout={timing.startup_timeout:g}s (the "
                    "cell never ran); it was stopped and the session lives on. Raise startup_timeout on a slow "
                    "machine."
                )
                break
            args = {}
        chunks.extend(await self._stop_cell())
        chunks.extend(await self._stop_leftover_work())
        partial = self._whole(merge(chunks, time.monotonic() - started), live)
        raise CellTimeout(
            f"{reason} (the output so far is on .result)",
            result=partial,
            server=SERVER,
            details={"cell_started": cell_started},
        )

    def _whole(self, result: CellResult, live: LiveOutput | None = None) -> CellResult:
        """The cell's whole output, up to ``max_output``, when a poll's window omitted part of it (what
        ``live`` streamed, when it streamed from the raw log)."""
        recording = self._recording()
        shown = live.shown if live is not None else None
        path = recording.path if recording is not None else None
        return complete(result, path, self._timing().max_output, shown=shown)

    async def _stop_cell(self, grace_ms: int = 5000) -> list[CellResult]:
        """Interrupt the running cell; restart the worker if the interrupt does not take."""
        call = self._calls.call
        # An interrupt that lands in worker startup comes back as an error result
        # ("worker startup interrupted"): that is still a stopped cell, not a failure.
        chunks = [await call({"control": "interrupt", "timeout_ms": grace_ms}, errors_as_results=True)]
        if chunks[-1].running:
            chunks.append(await call({"timeout_ms": grace_ms}, errors_as_results=True))
        if chunks[-1].running or (chunks[0].is_error and chunks[0].error is None):
            # Still running, or the interrupt broke worker startup: a fresh worker makes the
            # session usable again (a worker that never started held no state).
            chunks.append(await call({"control": "restart", "timeout_ms": grace_ms}, errors_as_results=True))
        return chunks

    async def _stop_leftover_work(self) -> list[CellResult]:
        """After a timed-out cell was interrupted: if threads or processes it started still burn
        CPU, restart the worker (the only way to stop a thread); its state is lost, and the
        result says so."""
        busy = self._cpu_busy()
        if busy is None or not await busy():
            return []
        restart = await self._calls.call({"control": "restart", "timeout_ms": 5000}, errors_as_results=True)
        note = (
            "[console-bridge: the timed-out cell left threads or processes running; the worker was restarted "
            "to stop them (its state is lost)]\n"
        )
        return [dataclasses.replace(restart, text="", stderr=note, segments=(("stderr", note),), content=[])]

    async def settle(self, bound: float, on_output: Callable[[CellResult], Any] | None) -> CellResult | None:
        """Interrupt the cell and poll until it stopped, retrying refusals every 50 ms within
        ``bound`` seconds (see ``AsyncConsole.settle``); None when the bound passed first."""
        interrupted = False
        with anyio.move_on_after(bound):
            while True:
                try:
                    if not interrupted:
                        result = await self.interrupt(1000)
                        interrupted = True
                    else:
                        result = await self._calls.call({"timeout_ms": 1000})
                except Busy:
                    await anyio.sleep(0.05)
                    continue
                if on_output is not None:
                    outcome = on_output(result)
                    if isinstance(outcome, Awaitable):
                        await outcome
                if not result.running:
                    return result
        return None

    async def interrupt(self, timeout_ms: int = 5000) -> CellResult:
        """Interrupt; when that breaks a worker still starting (an error result), start a fresh one.

        A worker that never finished starting held no state, and without the restart every
        later call would fail (the model cannot restart by itself).
        """
        result = await self._calls.call({"control": "interrupt", "timeout_ms": timeout_ms}, errors_as_results=True)
        if result.is_error and result.error is None:
            # A server error result (not the cell's KeyboardInterrupt, not a worker exit).
            await self._calls.restart_worker()
        return result
