"""``AsyncConsole``: a verified, governed mcp-console session for one workspace.

The parts, each a layer of the class: ``_session_state`` (options, state, status, usage, the
call path), ``_session_start`` (start, verification, probe, teardown), and here the cells,
files in and out, and the model's tool.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from console_bridge._connection._handles import ToolHandle
from console_bridge._console import _values
from console_bridge._console._files import check_glob, glob_match
from console_bridge._console._live_output import LiveOutput
from console_bridge._console._model_schema import consistent_text, model_schema, without_nulls
from console_bridge._console._observe import for_model, merge
from console_bridge._console._outcome import outcome_dir_name
from console_bridge._console._session_start import ConsoleStart
from console_bridge._console._session_state import SERVER, ConsoleStatus
from console_bridge._console._whole_output import complete
from console_bridge._errors import Busy, CellTimeout, ConnectionClosed, DependenciesRefused, NotAllowed
from console_bridge._governance._gate import Gate
from console_bridge._governance._policy import Exposure
from console_bridge._identity import current_owner
from console_bridge._results import CellResult

__all__ = ["AsyncConsole", "ConsoleStatus"]

_BRIDGE_NOTE = (
    "\n\nconsole-bridge: `timeout_ms` is capped at {cap} ms per call; a field sent as null is a field "
    "not given. A response that ends with `[running; poll with an empty send]` means the cell is still "
    "running: call `send` again with no code (`{{}}`) to keep watching it, or with "
    '`control: "interrupt"` to stop it. `control: "restart"` is reserved for the host.{deps}'
)


class AsyncConsole(ConsoleStart):
    """A governed MCP Console session for one workspace.

    It refuses to run unless everything checks out: a qualified binary, allowlisted
    launch arguments, no project config unless ``project_config=True``, and an
    advertised sandbox exactly equal to the requested profile. Example::

        async with AsyncConsole("analysis/", profile="workspace") as console:
            result = await console.run(python="import pandas as pd; print(pd.__version__)")
            print(result.text)

    Nothing it starts outlives it: closing stops the server's process tree and
    removes the session's private ``TMPDIR``; a clean ``close()`` finalizes the
    recording.
    """

    # --------------------------------------------------------------- lifecycle
    async def __aenter__(self) -> AsyncConsole:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def send(
        self,
        *,
        python: str | None = None,
        r: str | None = None,
        sql: str | None = None,
        stdin: str | None = None,
        timeout_ms: int | None = None,
    ) -> CellResult:
        """One observation window: submit code (or answer stdin, or just poll) and return what arrived.

        ``timeout_ms`` is clamped to ``poll_window``. ``running`` on the result means the
        cell goes on; poll again. Code sent while a cell runs raises :class:`Busy`.
        """
        args: dict[str, Any] = self._code_args(python, r, sql)
        if stdin is not None:
            if not isinstance(stdin, str):
                raise NotAllowed("stdin must be a string")
            args["stdin"] = stdin
        args["timeout_ms"] = self._window_ms(timeout_ms)
        return await self._call(args)

    async def poll(self, timeout_ms: int | None = None) -> CellResult:
        """An empty send: new output of the running cell, or ``[idle]``."""
        return await self.send(timeout_ms=timeout_ms)

    async def run(
        self,
        *,
        python: str | None = None,
        r: str | None = None,
        sql: str | None = None,
        timeout: float | None = None,
        on_output: Callable[[CellResult], Any] | None = None,
        check: bool = False,
    ) -> CellResult:
        """Submit a cell and poll until it is done; return the whole output (``error`` set when it failed).

        ``timeout`` counts the cell itself, from the moment the worker started it; worker
        startup has its own bound (``startup_timeout``). Past either the cell is interrupted
        (restarted if the interrupt does not take) and :class:`CellTimeout` is raised with
        the output so far; the session stays usable. ``on_output`` receives each piece of
        the cell's output as it arrives (polled in ``stream_window`` slices, whatever
        ``poll_window`` is), all of it, past the server's per-poll window, up to ``max_output``
        bytes (then it stops, saying so once); chunks never hold server notices. ``check=True`` raises
        :class:`CellError` when the cell failed (see :meth:`CellResult.raise_for_error`).
        """
        code = self._code_args(python, r, sql)
        if not code:
            raise NotAllowed("run() needs code: python=, r= or sql=")
        if timeout is not None and (not isinstance(timeout, int | float) or timeout <= 0):
            raise NotAllowed(f"timeout must be a positive number of seconds, not {timeout!r}")
        started = time.monotonic()
        startup_deadline = started + self.startup_timeout
        deadline: float | None = None
        cell_started = saw_phase = False
        chunks: list[CellResult] = []
        args: dict[str, Any] = dict(code)
        reason = ""
        live = LiveOutput(self._observer, self.max_output) if on_output is not None else None
        while True:
            now = time.monotonic()
            window = self.poll_window
            if on_output is not None or (timeout is not None and not cell_started):
                window = min(window, self.stream_window)
            limit = deadline if deadline is not None else (startup_deadline if not cell_started else None)
            if limit is not None:
                window = max(0.0, min(window, limit - now))
            args["timeout_ms"] = int(window * 1000)
            chunk = await self._call(args)
            chunks.append(chunk)
            # The cell started: the recording says so (0.0.6), output came, it ended, or (0.0.5, which
            # records no start) the server no longer reports a worker-preparation phase.
            starting = self._observer.last_notice.starting
            saw_phase = saw_phase or starting
            # A worker that was prepared runs the bridge's Python startup code before the cell: its
            # "ready" note (last_started_at) marks the start then, not the end of the phase.
            no_phase = self.version == "0.0.5" and not starting and not (saw_phase and "python" in self.languages)
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
                for piece in live.pieces(chunk, self.recording.path if self.recording is not None else None):
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
                    f"the worker did not start the cell within startup_timeout={self.startup_timeout:g}s (the cell "
                    "never ran); it was stopped and the session lives on. Raise startup_timeout on a slow machine."
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
        recording = self.recording
        shown = live.shown if live is not None else None
        return complete(result, recording.path if recording is not None else None, self.max_output, shown=shown)

    async def _stop_cell(self, grace_ms: int = 5000) -> list[CellResult]:
        """Interrupt the running cell; restart the worker if the interrupt does not take."""
        # An interrupt that lands in worker startup comes back as an error result
        # ("worker startup interrupted"): that is still a stopped cell, not a failure.
        chunks = [await self._call({"control": "interrupt", "timeout_ms": grace_ms}, errors_as_results=True)]
        if chunks[-1].running:
            chunks.append(await self._call({"timeout_ms": grace_ms}, errors_as_results=True))
        if chunks[-1].running or (chunks[0].is_error and chunks[0].error is None):
            # Still running, or the interrupt broke worker startup: a fresh worker makes the
            # session usable again (a worker that never started held no state).
            chunks.append(await self._call({"control": "restart", "timeout_ms": grace_ms}, errors_as_results=True))
        return chunks

    async def _stop_leftover_work(self) -> list[CellResult]:
        """After a timed-out cell was interrupted: if threads or processes it started still burn
        CPU, restart the worker (the only way to stop a thread); its state is lost, and the
        result says so."""
        busy = self._confined.cpu_busy()
        if busy is None or not await busy():
            return []
        restart = await self._call({"control": "restart", "timeout_ms": 5000}, errors_as_results=True)
        note = (
            "[console-bridge: the timed-out cell left threads or processes running; the worker was restarted "
            "to stop them (its state is lost)]\n"
        )
        return [dataclasses.replace(restart, text="", stderr=note, segments=(("stderr", note),), content=[])]

    async def settle(
        self, bound: float = 10.0, on_output: Callable[[CellResult], Any] | None = None
    ) -> CellResult | None:
        """After an abandoned call (Ctrl-C): interrupt the cell and poll until it stopped.

        mcp-console keeps an abandoned poll open until its window ends and refuses new
        polls meanwhile; those refusals are retried every 50 ms within ``bound`` seconds.
        ``on_output`` sees each observation (the cell's last words after the interrupt).
        Returns the last observation, or None when the bound passed first.
        """
        self._host_only("settle()")
        interrupted = False
        with anyio.move_on_after(bound):
            while True:
                try:
                    if not interrupted:
                        result = await self._interrupt_cell(1000)
                        interrupted = True
                    else:
                        result = await self._call({"timeout_ms": 1000})
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

    def _host_only(self, what: str) -> None:
        active = current_owner()
        if active is not None:
            raise NotAllowed(
                f"{what} is a host control; it cannot be used under the run context of {active!s}. "
                "Call it from host code, outside run_context()."
            )

    async def interrupt(self) -> CellResult:
        """Host-only: deliver KeyboardInterrupt to the running cell (state kept)."""
        self._host_only("interrupt()")
        return await self._interrupt_cell()

    async def _interrupt_cell(self, timeout_ms: int = 5000) -> CellResult:
        """Interrupt; when that breaks a worker still starting (an error result), start a fresh one.

        A worker that never finished starting held no state, and without the restart every
        later call would fail (the model cannot restart by itself).
        """
        result = await self._call({"control": "interrupt", "timeout_ms": timeout_ms}, errors_as_results=True)
        if result.is_error and result.error is None:
            # A server error result (not the cell's KeyboardInterrupt, not a worker exit).
            await self._restart_worker()
        return result

    async def restart(self) -> CellResult:
        """Host-only: stop the worker and start a fresh one (in-memory state lost)."""
        self._host_only("restart()")
        return await self._call({"control": "restart", "timeout_ms": 5000})

    # ------------------------------------------------------ files in and out
    async def put_file(self, name: str, data: bytes) -> str:
        """Write ``data`` to ``name`` in the session's private TMPDIR; return the path a cell opens.

        ``name`` is relative without ``..``; nothing is followed through a symlink, nothing
        existing is replaced. Raises :class:`NotAllowed` for a bad name or an existing file.
        The file stays across :meth:`restart` (moved into the fresh worker's TMPDIR, at the same
        name under ``os.environ["TMPDIR"]``); a worker that dies takes its files with it.
        """
        self._require("put_file")
        if not isinstance(data, bytes | bytearray | memoryview):
            raise NotAllowed("put_file data must be bytes")
        payload = bytes(data)
        try:
            return await anyio.to_thread.run_sync(lambda: self._tmp_files().put(name, payload))
        except OSError as exc:
            raise NotAllowed(f"put_file({name!r}) failed: {exc.strerror or exc}; pick a new name") from None

    async def get_file(self, name: str, *, max_bytes: int = 100_000_000) -> bytes:
        """The bytes of ``name`` in the session's private TMPDIR (written by a cell), never through a
        symlink; larger than ``max_bytes`` raises :class:`NotAllowed`."""
        self._require("get_file")
        try:
            return await anyio.to_thread.run_sync(lambda: self._tmp_files().get(name, max_bytes))
        except OSError as exc:
            raise NotAllowed(f"get_file({name!r}) failed: {exc.strerror or exc}; check the name") from None

    async def push(self, name: str, value: Any) -> None:
        """Bind ``name`` in the session's Python to a copy of ``value``: a pandas data frame (through
        Parquet), a numpy array (``.npy``) or plain data (JSON). Nothing is pickled."""
        await _values.push(self, name, value)

    async def pull(self, name: str, *, max_bytes: int = 100_000_000) -> Any:
        """A copy of the session's Python value ``name``: a data frame, an array or plain data, read on
        the host by Parquet, ``.npy`` (no pickle) or JSON readers alone; anything else is refused."""
        return await _values.pull(self, name, max_bytes=max_bytes)

    async def list_files(self, pattern: str = "**") -> list[str]:
        """The names (relative, sorted) of the regular files in the session's private TMPDIR that
        match the glob ``pattern`` (``*.csv``, ``out/**/*.png``; ``**`` any folders; hidden names
        only when the pattern names them). Symlinks are neither followed nor listed; the bridge's
        own folder is never listed. Raises :class:`NotAllowed` for a bad pattern."""
        self._require("list_files")
        check_glob(pattern)
        try:
            found = await anyio.to_thread.run_sync(self._tmp_files().list)
        except OSError as exc:
            raise NotAllowed(f"list_files({pattern!r}) failed: {exc.strerror or exc}") from None
        private = outcome_dir_name(self._nonce) + "/"
        return sorted(name for name, _ in found if not name.startswith(private) and glob_match(pattern, name))

    # ------------------------------------------------------- the model's tool
    def tools(self) -> list[ToolHandle]:
        """The model-facing ``send`` tool, governed: no restart, clamped windows, no installs under
        ``deny``, approval through ``policy.approve`` when set, audited."""
        self._require("tools()")
        cap = int(self.poll_window * 1000)
        installs = self.dependencies != "deny"
        schema = model_schema(self._send_schema, cap, installs=installs)  # one definition, serve's too
        deps = "" if installs else " Package installs (`requirements`) are disabled."
        note = _BRIDGE_NOTE.format(cap=cap, deps=deps)
        description = consistent_text(self._description, cap, installs=installs) + note
        approval = self.policy.approve is not None
        self._model_gate.govern(
            {"name": "send", "description": description, "inputSchema": schema, "annotations": {}},
            Exposure(exposed=True, needs_approval=approval, reasons=("runs code",)),
        )
        return [
            ToolHandle(
                name="send",
                tool="send",
                server=SERVER,
                description=description,
                input_schema=schema,
                annotations={},
                requires_approval=approval,
                owner=self.owner,
                invoke=self._model_send,
            )
        ]

    @functools.cached_property
    def _model_gate(self) -> Gate:
        """The governance gate of the model's ``send``: its refusals, approval and their audit records
        are a connection's (host calls go through the session's connection, which asks no approval)."""
        return Gate(
            self.policy,
            SERVER,
            owner=lambda: self.owner,
            tools=("send",),
            resources=(),
            prompts=(),
            note_error=lambda text: None,  # the status's last_error is the session connection's
            closed_error=lambda what: ConnectionClosed(f"{what}: the model's send was never handed out", server=SERVER),
        )

    async def _model_send(self, arguments: dict[str, Any]) -> CellResult:
        arguments = without_nulls(arguments)  # every field is nullable: null means not given
        gate = self._model_gate
        pinned = gate.authorize("send")
        if arguments.get("control") == "restart":
            gate.refuse("tool 'send'", "restart is host-only", tool="send")
            raise NotAllowed('control: "restart" is reserved for the host; send control: "interrupt" to stop a cell')
        if "requirements" in arguments and self.dependencies == "deny":
            gate.refuse("tool 'send'", "requirements under dependencies='deny'", tool="send")
            raise DependenciesRefused(
                "package installs (`requirements`) are disabled for this console; use the packages already installed",
                server=SERVER,
            )
        props = set((self._send_schema.get("properties") or {}).keys())
        unknown = sorted(set(arguments) - props)
        if unknown:
            raise NotAllowed(f"send does not take {', '.join(unknown)}; allowed fields: {', '.join(sorted(props))}")
        args = dict(arguments)
        args["timeout_ms"] = self._window_ms(args.get("timeout_ms"))
        # The gate hands the approver a deep copy: what it approves is what runs.
        await gate.approve(pinned, args, gate.next_call_id())
        try:
            if args.get("control") == "interrupt" and not any(k in args for k in ("python", "r", "sql", "stdin")):
                return for_model(await self._interrupt_cell(args["timeout_ms"]))
            return for_model(await self._call(args))
        except Busy:
            # The model drives the cell through send alone: say it in send's terms, not the Python API's.
            raise Busy(
                "a cell is still running; call send({}) to keep watching it, or send with "
                'control: "interrupt" to stop it (nothing was queued)',
                server=SERVER,
            ) from None
