"""``Console``: the blocking twin of :class:`AsyncConsole`, a thin portal (works inside Jupyter)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from console_bridge._cells._recordings import Recording
from console_bridge._console._session import AsyncConsole, ConsoleStatus
from console_bridge._handles import NotCopyable, ToolHandle
from console_bridge._identity import check_owner
from console_bridge._portal import Portal
from console_bridge._results import CellResult

__all__ = ["Console"]


class Console(NotCopyable):
    """Blocking twin of :class:`AsyncConsole`: same arguments, same methods, blocking.

    Usable in scripts, in Jupyter (inside a running event loop) and from threads (one
    object per thread). Ctrl-C during :meth:`run` interrupts the cell, keeps the
    session and re-raises ``KeyboardInterrupt``. Example::

        with Console("analysis/") as console:
            print(console.run(python="1 + 1").text)
    """

    def __init__(self, workspace: Any = ".", **kwargs: Any) -> None:
        self._portal = Portal(self, "Console")
        try:
            self._async: AsyncConsole = self._portal.run_sync(lambda: AsyncConsole(workspace, **kwargs))
        except BaseException:
            self._portal.stop()
            raise
        self._portal.set_closer(self._async.close)

    def __repr__(self) -> str:
        return repr(self._async).replace("AsyncConsole", "Console")

    def __enter__(self) -> Console:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __getattr__(self, name: str) -> Any:
        # Plain attributes (workspace, languages, poll_window, ...) read through; methods are explicit below.
        if name.startswith("_"):
            raise AttributeError(name)
        value = getattr(self._async, name)
        if callable(value):
            raise AttributeError(name)
        return value

    def _check(self) -> None:
        check_owner(self._async.owner, "console")

    def start(self) -> None:
        self._check()
        self._portal.call(self._async.start)

    def close(self) -> None:
        """Close cleanly (recording finalized) and stop the loop thread. Idempotent."""
        self._portal.stop()

    def cancel(self) -> None:
        """Kill the session at once. Idempotent."""
        self._portal.cancel(self._async.cancel)

    def status(self) -> ConsoleStatus:
        return self._async.status()

    @property
    def recording(self) -> Recording | None:
        return self._async.recording

    def send(
        self,
        *,
        python: str | None = None,
        r: str | None = None,
        sql: str | None = None,
        stdin: str | None = None,
        timeout_ms: int | None = None,
    ) -> CellResult:
        self._check()
        return self._portal.call(
            lambda: self._async.send(python=python, r=r, sql=sql, stdin=stdin, timeout_ms=timeout_ms)
        )

    def poll(self, timeout_ms: int | None = None) -> CellResult:
        self._check()
        return self._portal.call(self._async.poll, timeout_ms)

    def run(
        self,
        *,
        python: str | None = None,
        r: str | None = None,
        sql: str | None = None,
        timeout: float | None = None,
        on_output: Callable[[CellResult], Any] | None = None,
        check: bool = False,
    ) -> CellResult:
        """Run a cell to completion (see :meth:`AsyncConsole.run`). ``on_output`` runs in the caller's
        process but on the console's loop thread."""
        self._check()
        return self._portal.call_settling(
            lambda: self._async.run(python=python, r=r, sql=sql, timeout=timeout, on_output=on_output, check=check),
            lambda: self._async.settle(30.0, on_output),  # interrupt the cell; the next call is accepted
        )

    def settle(self, bound: float = 10.0, on_output: Callable[[CellResult], Any] | None = None) -> CellResult | None:
        """Interrupt the running cell and poll until it stopped (see :meth:`AsyncConsole.settle`)."""
        self._check()
        return self._portal.call(self._async.settle, bound, on_output)

    def interrupt(self) -> CellResult:
        self._check()
        return self._portal.call(self._async.interrupt)

    def restart(self) -> CellResult:
        self._check()
        return self._portal.call(self._async.restart)

    def put_file(self, name: str, data: bytes) -> str:
        self._check()
        return self._portal.call(self._async.put_file, name, data)

    def get_file(self, name: str, *, max_bytes: int = 100_000_000) -> bytes:
        self._check()
        return self._portal.call(lambda: self._async.get_file(name, max_bytes=max_bytes))

    def push(self, name: str, value: Any) -> None:
        self._check()
        self._portal.call(self._async.push, name, value)

    def pull(self, name: str, *, max_bytes: int = 100_000_000) -> Any:
        self._check()
        return self._portal.call(lambda: self._async.pull(name, max_bytes=max_bytes))

    def list_files(self, pattern: str = "**") -> list[str]:
        """The files in the session's TMPDIR matching ``pattern`` (see :meth:`AsyncConsole.list_files`)."""
        self._check()
        return self._portal.call(self._async.list_files, pattern)

    def tools(self) -> list[ToolHandle]:
        self._check()
        return [self._portal.blocking_handle(h) for h in self._async.tools()]


def _mirror(names: tuple[str, ...]) -> None:
    """Give the blocking methods the async methods' docstrings (the behaviour is the async method's,
    through the portal), and ``__init__`` its signature (``help(Console)`` shows the real parameters,
    not ``**kwargs``). The methods spell their own signatures, so mypy and the parity test see them."""
    Console.__init__.__signature__ = inspect.signature(AsyncConsole.__init__)  # type: ignore[attr-defined]
    for name in names:
        getattr(Console, name).__doc__ = getattr(AsyncConsole, name).__doc__


_mirror(("__init__", "send", "poll", "run", "interrupt", "restart", "put_file", "get_file", "list_files", "status"))

if TYPE_CHECKING:
    from console_bridge._surfaces import AsyncConsoleSurface, ConsoleSurface

    def _keeps_to_its_surface(
        console: AsyncConsole, twin: Console
    ) -> tuple[AsyncConsoleSurface[ConsoleStatus], ConsoleSurface[ConsoleStatus]]:
        """mypy fails here when AsyncConsole or Console drifts from its surface (``_surfaces``)."""
        return console, twin
