"""``BlockingRaySessionManager``: the blocking twin of :class:`RaySessionManager`, a thin portal."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from console_bridge._handles import NotCopyable, ToolHandle
from console_bridge._identity import Owner
from console_bridge._portal import BlockingManager, Portal
from console_bridge._results import CellResult
from console_bridge.ray._host import RayConsoleStatus
from console_bridge.ray._manager import RayManagerStats, RaySessionInfo, RaySessionManager
from console_bridge.ray._remote import RayConsole

__all__ = ["BlockingRayConsole", "BlockingRaySessionManager"]


class BlockingRayConsole(NotCopyable):
    """A blocking view of a :class:`RayConsole` (same methods, blocking; ``status()`` too)."""

    def __init__(self, portal: Portal, console: RayConsole) -> None:
        self._portal = portal
        self._async = console
        self.id = console.id
        self.owner = console.owner
        self.node_id = console.node_id

    def __repr__(self) -> str:
        return repr(self._async).replace("<RayConsole", "<BlockingRayConsole")

    def __enter__(self) -> BlockingRayConsole:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def send(
        self,
        *,
        python: str | None = None,
        r: str | None = None,
        sql: str | None = None,
        stdin: str | None = None,
        timeout_ms: int | None = None,
    ) -> CellResult:
        return self._portal.call(
            lambda: self._async.send(python=python, r=r, sql=sql, stdin=stdin, timeout_ms=timeout_ms)
        )

    def poll(self, timeout_ms: int | None = None) -> CellResult:
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
        """Run a cell to completion; ``on_output`` is called in the portal's thread as chunks arrive.
        ``check=True`` raises :class:`CellError` when the cell failed. Ctrl-C interrupts the cell,
        keeps the session and re-raises ``KeyboardInterrupt`` (as :class:`Console`)."""
        return self._portal.call_settling(
            lambda: self._async.run(python=python, r=r, sql=sql, timeout=timeout, on_output=on_output, check=check),
            lambda: self._async.settle(10.0, on_output),  # interrupt the cell; the next call is accepted
        )

    def settle(self, bound: float = 10.0, on_output: Callable[[CellResult], Any] | None = None) -> CellResult | None:
        """Interrupt the running cell and poll until it stopped (see :meth:`RayConsole.settle`)."""
        return self._portal.call(self._async.settle, bound, on_output)

    def interrupt(self) -> CellResult:
        return self._portal.call(self._async.interrupt)

    def restart(self) -> CellResult:
        return self._portal.call(self._async.restart)

    def status(self) -> RayConsoleStatus:
        return self._portal.call(self._async.status)

    def put_file(self, name: str, data: bytes) -> str:
        return self._portal.call(self._async.put_file, name, data)

    def get_file(self, name: str, *, max_bytes: int = 100_000_000) -> bytes:
        return self._portal.call(lambda: self._async.get_file(name, max_bytes=max_bytes))

    def list_files(self, pattern: str = "**") -> list[str]:
        return self._portal.call(self._async.list_files, pattern)

    def push(self, name: str, value: Any) -> None:
        self._portal.call(self._async.push, name, value)

    def pull(self, name: str, *, max_bytes: int = 100_000_000) -> Any:
        return self._portal.call(lambda: self._async.pull(name, max_bytes=max_bytes))

    def tools(self) -> list[ToolHandle]:
        """The model-facing ``send`` tool; ``handle.call({...})`` blocks."""
        return [self._portal.blocking_handle(handle) for handle in self._async.tools()]

    def close(self) -> None:
        """Close the session on its node; its slot frees. Idempotent."""
        if not self._portal.closed:
            self._portal.call(self._async.close)

    def cancel(self) -> None:
        """Kill the session on its node at once, then free its slot. Idempotent."""
        if not self._portal.closed:
            self._portal.call(self._async.cancel)


class BlockingRaySessionManager(BlockingManager[RaySessionManager, BlockingRayConsole]):
    """Blocking twin of :class:`RaySessionManager`: same arguments, same methods, blocking. Example::

    with BlockingRaySessionManager(workspace=None) as manager:
        with manager.session(owner=Owner("agent-1")) as console:
            print(console.run(python="1 + 1").text, console.status().node_id)
    """

    def __init__(self, address: str | None = None, **kwargs: Any) -> None:
        self._build("BlockingRaySessionManager", lambda: RaySessionManager(address, **kwargs))

    def open(self, *, owner: Owner, name: str | None = None) -> BlockingRayConsole:
        console = self._portal.call(lambda: self._async.open(owner=owner, name=name))
        return BlockingRayConsole(self._portal, console)

    def get(self, session_id: str) -> BlockingRayConsole:
        return BlockingRayConsole(self._portal, self._portal.run_sync(lambda: self._async.get(session_id)))

    def sessions(self) -> list[RaySessionInfo]:
        return self._portal.call(self._async.sessions)

    def stats(self) -> RayManagerStats:
        return self._portal.call(self._async.stats)


if TYPE_CHECKING:
    from console_bridge._surfaces import AsyncConsoleSurface, AsyncManagerSurface, ConsoleSurface, ManagerSurface

    def _keeps_to_its_surface(
        console: RayConsole, twin: BlockingRayConsole
    ) -> tuple[AsyncConsoleSurface[Awaitable[RayConsoleStatus]], ConsoleSurface[RayConsoleStatus]]:
        """mypy fails here when RayConsole or BlockingRayConsole drifts from its surface (``_surfaces``)."""
        return console, twin

    def _managers_keep_to_their_surface(
        manager: RaySessionManager, twin: BlockingRaySessionManager
    ) -> tuple[
        AsyncManagerSurface[RayConsole, Awaitable[list[RaySessionInfo]], Awaitable[RayManagerStats]],
        ManagerSurface[BlockingRayConsole, list[RaySessionInfo], RayManagerStats],
    ]:
        """mypy fails here when RaySessionManager or its blocking twin drifts from its surface (``_surfaces``)."""
        return manager, twin
