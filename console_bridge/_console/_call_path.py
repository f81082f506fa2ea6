"""A part of :class:`AsyncConsole`: the one path every ``send`` takes. One request on the
governed connection (which holds the busy slot and the deadline), what its reply means for the
cell (observed through ``CellObserver``), a refusal as Busy said in the bridge's words, a fresh
worker around a restart or a worker's death, and each user cell measured and logged as it ends.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable
from typing import Any

import anyio
import psutil

from console_bridge._cells._notebook import MAX_RECORD, CellLog
from console_bridge._cells._notices import BEING_POLLED, BUSY
from console_bridge._cells._observe import CellObserver, is_restart_notice_only, merge, reword_restart
from console_bridge._cells._recordings import Recording
from console_bridge._connection._async import AsyncMcpConnection
from console_bridge._console._session_files import SessionFiles
from console_bridge._console._status import LANGUAGES, SERVER
from console_bridge._console._usage import CellMeter
from console_bridge._console._whole_output import complete
from console_bridge._console._worker_boot import WorkerBoot
from console_bridge._errors import Busy, ConnectionClosed, ServerError
from console_bridge._results import CellResult

__all__ = ["CallPath"]

#: What mcp-console answers a call in flight when it shuts down (its stdin closed: `console-bridge kill`).
_STOPPED = "[worker stopped before operation completed]"
#: The connection's words for a server that ended by itself with status 0 (under a call: its input closed).
_CLEAN_EXIT = "the server process exited with status 0"
_CLOSED_OUTSIDE = (
    "send: the session was closed from outside while the cell ran (`console-bridge kill`, or its supervisor was "
    "stopped); its state is gone. Start a new console."
)


def _refused_unrun(cell: CellResult) -> bool:
    """The server's answer holds nothing but its "explicit restart required" notice: no output, no exit of a
    worker (a cell that ran and died says how its worker ended)."""
    return not cell.worker_exited and is_restart_notice_only(cell.combined)


def _alive(pid: int) -> bool:
    """The process ``pid`` runs (a zombie does not)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class CallPath:
    """``send`` calls of one session, one at a time.

    ``require(what)`` gives the session's connection, or raises when the caller or the session's
    state forbids a call; ``mark`` runs before each cell (the confinement's counters);
    ``recording`` gives the session's recording once there is one; ``close_reason`` why the
    session was closed from outside, if it was; ``poll_window`` the console's (read at each use).
    The launcher sets :attr:`meter` once the session runs and :attr:`log_cells` once its probe
    passed (the probe is not the user's cell).
    """

    def __init__(
        self,
        require: Callable[[str], AsyncMcpConnection],
        observer: CellObserver,
        *,
        boot: WorkerBoot,
        files: SessionFiles,
        mark: Callable[[], None],
        recording: Callable[[], Recording | None],
        close_reason: Callable[[], str | None],
        poll_window: Callable[[], float],
    ) -> None:
        self._require = require
        self._observer = observer
        self._boot = boot
        self._files = files
        self._mark = mark
        self._recording = recording
        self._close_reason = close_reason
        self._poll_window = poll_window
        #: what each cell used (the launcher sets it once the session's processes are known)
        self.meter: CellMeter | None = None
        #: the user's cells go to the log (after the probe)
        self.log_cells = False
        #: the user's cells, logged next to the recording as they end (the notebook export reads it)
        self.cells = CellLog()
        self._cell: tuple[str, str, list[CellResult]] | None = None
        self._worker_died_at: float | None = None  # when a worker last died or was restarted
        #: the last cell's result told the caller its worker was killed (a limit, an exit), and no restart came since
        self._death_reported = False

    async def call(self, args: dict[str, Any], *, errors_as_results: bool = False) -> CellResult:
        """One ``send``. An error result raises :class:`ServerError`, except a worker exit (a
        result with ``worker_exited``) and, with ``errors_as_results``, any error result."""
        conn = self._require("send")
        language = next((lang for lang in LANGUAGES if lang in args), None)
        if args.get("control") != "restart":
            await self._boot.before_call()
            return await self._send(conn, args, language, errors_as_results=errors_as_results)
        self._boot.ahead()
        await self._boot.before_call()
        async with self._files.kept():
            return await self._send(conn, args, language, errors_as_results=errors_as_results)

    async def _send(
        self,
        conn: AsyncMcpConnection,
        args: dict[str, Any],
        language: str | None,
        *,
        errors_as_results: bool = False,
        again: bool = False,
    ) -> CellResult:
        death_reported, self._death_reported = self._death_reported, False
        mark = self._observer.mark(language)
        started = time.monotonic()
        meter = self.meter
        running_cell, running_meter = self._cell, meter.state() if meter is not None else None
        if language is not None:
            self._mark()
            if meter is not None:
                meter.start()
            if self.log_cells:
                self._cell = (language, str(args[language]), [])
        try:
            result = await self._submit(conn, args, code=language is not None)
        except ConnectionClosed as exc:
            reason = self._close_reason()
            if reason is None and language is not None and _CLEAN_EXIT in str(exc):
                # mcp-console ends with status 0 only when its input closes: the session was shut from outside
                # (`console-bridge kill`, its supervisor stopped) and the server went before it answered the cell
                raise ConnectionClosed(_CLOSED_OUTSIDE, server=SERVER, pid=exc.pid) from None
            if reason is None:
                raise
            raise type(exc)(f"send: this console was {reason}", server=SERVER, pid=exc.pid) from None
        except ServerError as exc:
            if exc.result is None:
                raise
            text = exc.result.text
            if text.lstrip().startswith((BUSY, BEING_POLLED)):
                # Nothing was submitted: the running cell keeps its log record and its meter.
                self._cell = running_cell
                if meter is not None and running_meter is not None:
                    meter.restore(running_meter)
                raise Busy(
                    "a cell is still running in this console; poll() for its output, interrupt() it, or wait "
                    "(nothing was queued)",
                    server=SERVER,
                ) from None
            self._observer.submitted(language, mark)
            cell = await self._observer.observe(exc.result, started, is_error=True)
            if self._observer.last_notice.held and not cell.running:
                cell = await self._collect_held(conn, cell)
            restart = self._observer.last_notice.restart_required
            if cell.worker_exited or restart or errors_as_results:
                if restart:
                    await self.restart_worker()
                    if language is not None and death_reported and not again and _refused_unrun(cell):
                        # The worker the last cell's limit killed was gone before this cell: the server refused it
                        # unrun with nothing but its restart notice (its death was that cell's news, not this
                        # one's). The code never ran, so it goes to the fresh worker now (issue 30).
                        self._cell = None
                        return await self._send(conn, args, language, errors_as_results=errors_as_results, again=True)
                    cell = reword_restart(cell)
                return self._measured(cell)
            if text.lstrip().startswith(_STOPPED) and await self._server_went_away(conn):
                raise ConnectionClosed(_CLOSED_OUTSIDE, server=SERVER, pid=conn.pid) from None
            raise ServerError(f"mcp-console refused the call: {text[:2000]}", result=cell, server=SERVER) from None
        self._observer.submitted(language, mark)
        cell = await self._observer.observe(result, started)
        if self._observer.last_notice.held and not cell.running:
            cell = await self._collect_held(conn, cell)
        return self._measured(cell)

    async def _collect_held(self, conn: AsyncMcpConnection, cell: CellResult) -> CellResult:
        """The cell ended as the server answered "running" (``CellNotice.held``): the server refuses
        the next cell as Busy until an empty send collects this one, so that send is made now and
        whatever it brings is the same cell's."""
        started = time.monotonic()
        try:
            result = await conn.call_tool("send", {"timeout_ms": int(self._poll_window() * 1000)})
        except ServerError as exc:
            self._observer.notices.append(f"collecting a cell the server still held failed: {str(exc)[:200]}")
            return cell
        rest = await self._observer.observe(result, started)
        return merge([cell, rest], cell.elapsed + rest.elapsed, running=rest.running)

    async def _server_went_away(self, conn: AsyncMcpConnection, within: float = 2.0) -> bool:
        """Does the server end within ``within`` seconds (it is shutting down under the call)?"""
        pid = conn.pid
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if conn.status().state == "closed" or pid is None or not _alive(pid):
                return True
            await anyio.sleep(0.05)
        return False

    def _measured(self, cell: CellResult) -> CellResult:
        """The observation that ends a cell carries what the cell used; the cell goes to the log."""
        if cell.worker_exited or (cell.error is not None and cell.error.kind in ("limit", "worker_exited")):
            self._worker_died_at = time.monotonic()  # the server is bringing up a fresh worker (see _submit)
            self._death_reported = not (cell.running or cell.waiting_for_input)
        if cell.worker_exited or (cell.error is not None and cell.error.kind == "worker_exited"):
            self._boot.ahead()  # (a limit the worker survived, e.g. TMPDIR full, needs no new one)
        elif self._boot.pending and self._cell is not None and not (cell.running or cell.waiting_for_input):
            self._boot.ran()  # a cell of the user's ended on the fresh worker: it has booted
        if cell.running or cell.waiting_for_input:
            if self._cell is not None and len(self._cell[2]) < 10_000:
                self._cell[2].append(cell)
            return cell
        meter = self.meter
        if meter is not None and meter.active:
            cell = dataclasses.replace(cell, usage=meter.stop())
        if self._cell is not None:
            language, code, chunks = self._cell
            self._cell = None
            recording = self._recording()
            whole = merge([*chunks, cell], sum(chunk.elapsed for chunk in [*chunks, cell])) if chunks else cell
            path = recording.path if recording is not None else None
            # the log keeps every output whole (an export is the notebook), not what the polls' windows kept
            self.cells.write(path, language, code, complete(whole, path, MAX_RECORD))
        return cell

    async def _submit(self, conn: AsyncMcpConnection, args: dict[str, Any], *, code: bool) -> Any:
        """``send`` once; a cell refused as Busy within a poll window (+5 s) of a worker's death or
        restart is submitted again, every 0.1 s: nothing was queued, and the server is still bringing
        up the fresh worker or holding a poll the dead cell left open until its window ends."""
        while True:
            try:
                return await conn.call_tool("send", args)
            except ServerError as exc:
                busy = exc.result is not None and exc.result.text.lstrip().startswith((BUSY, BEING_POLLED))
                died = self._worker_died_at
                settling = died is not None and time.monotonic() - died < self._poll_window() + 5
                if not (code and busy and settling):
                    raise
            await anyio.sleep(0.1)

    async def restart_worker(self) -> None:
        """Start a fresh worker and wait (bounded) until it is up: a cell sent while the restart
        is still under way would be refused as Busy (see ``_submit``)."""
        conn = self._require("restart")
        self._worker_died_at = time.monotonic()
        self._death_reported = False
        self._boot.ahead()
        await self._boot.before_call()
        async with self._files.kept():
            with contextlib.suppress(ServerError):
                await conn.call_tool("send", {"control": "restart", "timeout_ms": 5000})
