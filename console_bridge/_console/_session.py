"""``AsyncConsole``: a verified, governed mcp-console session for one workspace.

The parts, each a layer of the class: ``_session_state`` (options, state, status, usage, the
call path), ``_session_start`` (start, verification, probe, teardown), and here the cells,
files in and out, and the model's tool.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from console_bridge._connection._handles import ToolHandle
from console_bridge._console import _values
from console_bridge._console._session_start import ConsoleStart
from console_bridge._console._session_state import ConsoleStatus
from console_bridge._errors import NotAllowed
from console_bridge._identity import current_owner
from console_bridge._results import CellResult

__all__ = ["AsyncConsole", "ConsoleStatus"]


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
        return await self._calls.call(args)

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
        ``poll_window`` is); chunks never hold server notices. ``check=True`` raises
        :class:`CellError` when the cell failed (see :meth:`CellResult.raise_for_error`).
        """
        code = self._code_args(python, r, sql)
        if not code:
            raise NotAllowed("run() needs code: python=, r= or sql=")
        if timeout is not None and (not isinstance(timeout, int | float) or timeout <= 0):
            raise NotAllowed(f"timeout must be a positive number of seconds, not {timeout!r}")
        return await self._loop.run(code, timeout=timeout, on_output=on_output, check=check)

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
        return await self._loop.settle(bound, on_output)

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
        return await self._loop.interrupt()

    async def restart(self) -> CellResult:
        """Host-only: stop the worker and start a fresh one (in-memory state lost)."""
        self._host_only("restart()")
        return await self._calls.call({"control": "restart", "timeout_ms": 5000})

    # ------------------------------------------------------ files in and out
    async def put_file(self, name: str, data: bytes) -> str:
        """Write ``data`` to ``name`` in the session's private TMPDIR; return the path a cell opens.

        ``name`` is relative without ``..``; nothing is followed through a symlink, nothing
        existing is replaced. Raises :class:`NotAllowed` for a bad name or an existing file.
        The file stays across :meth:`restart` (moved into the fresh worker's TMPDIR, at the same
        name under ``os.environ["TMPDIR"]``); a worker that dies takes its files with it.
        """
        self._require("put_file")
        return await self._files.put(name, data)

    async def get_file(self, name: str, *, max_bytes: int = 100_000_000) -> bytes:
        """The bytes of ``name`` in the session's private TMPDIR (written by a cell), never through a
        symlink; larger than ``max_bytes`` raises :class:`NotAllowed`."""
        self._require("get_file")
        return await self._files.get(name, max_bytes)

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
        return await self._files.find(pattern)

    # ------------------------------------------------------- the model's tool
    def tools(self) -> list[ToolHandle]:
        """The model-facing ``send`` tool, governed: no restart, clamped windows, no installs under
        ``deny``, approval through ``policy.approve`` when set, audited."""
        self._require("tools()")
        return self._model.handles()
