"""The surfaces the twins keep to: one ``Protocol`` per surface (console, manager), async and blocking.

Why: users treat ``AsyncConsole``, its blocking twin ``Console`` and the Ray twins (``RayConsole``,
``BlockingRayConsole``) as one shape, and the managers (``AsyncSessionManager``,
``SessionManager``, ``RaySessionManager``, ``BlockingRaySessionManager``) as another; nothing
else keeps four classes in step. Each class is checked against its surface by mypy, in an
``if TYPE_CHECKING:`` block at the bottom of its twin's module (``_console/_blocking``,
``_manager/_blocking``, ``ray/_blocking``): a method that drifts (renamed, a parameter added,
dropped or retyped, a result retyped) fails ``mypy console_bridge``. ``tests/test_surfaces.py``
compares the signatures by ``inspect`` as well (names, kinds and defaults, which mypy lets
differ), async surface against blocking.

What differs by design is a type parameter: a Ray console's ``status()`` and a Ray manager's
``sessions()`` and ``stats()`` ask a node, so they are awaited there and carry the node id;
the console a manager hands out is its own kind. The blocking surface is the async one with
every ``await`` taken off and ``with`` for ``async with``. Nothing here runs: the module holds
types only.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol, Self, TypeVar

if TYPE_CHECKING:
    from console_bridge._handles import ToolHandle
    from console_bridge._identity import Owner
    from console_bridge._results import CellResult

__all__ = ["AsyncConsoleSurface", "AsyncManagerSurface", "ConsoleSurface", "ManagerSurface"]

Status_co = TypeVar("Status_co", covariant=True)
Console_co = TypeVar("Console_co", covariant=True)
Sessions_co = TypeVar("Sessions_co", covariant=True)
Stats_co = TypeVar("Stats_co", covariant=True)


class AsyncConsoleSurface(Protocol[Status_co]):
    """What every async console offers; ``Status_co`` is what ``status()`` returns (``ConsoleStatus``
    locally, an awaitable ``RayConsoleStatus`` on Ray)."""

    async def __aenter__(self) -> Self: ...

    async def __aexit__(self, *exc_info: object) -> None: ...

    async def send(
        self,
        *,
        python: str | None = None,
        r: str | None = None,
        sql: str | None = None,
        stdin: str | None = None,
        timeout_ms: int | None = None,
    ) -> CellResult: ...

    async def poll(self, timeout_ms: int | None = None) -> CellResult: ...

    async def run(
        self,
        *,
        python: str | None = None,
        r: str | None = None,
        sql: str | None = None,
        timeout: float | None = None,
        on_output: Callable[[CellResult], Any] | None = None,
        check: bool = False,
    ) -> CellResult: ...

    async def settle(
        self, bound: float = 10.0, on_output: Callable[[CellResult], Any] | None = None
    ) -> CellResult | None: ...

    async def interrupt(self) -> CellResult: ...

    async def restart(self) -> CellResult: ...

    def status(self) -> Status_co: ...

    async def put_file(self, name: str, data: bytes) -> str: ...

    async def get_file(self, name: str, *, max_bytes: int = 100_000_000) -> bytes: ...

    async def list_files(self, pattern: str = "**") -> list[str]: ...

    async def push(self, name: str, value: Any) -> None: ...

    async def pull(self, name: str, *, max_bytes: int = 100_000_000) -> Any: ...

    def tools(self) -> list[ToolHandle]: ...

    async def close(self) -> None: ...

    async def cancel(self) -> None: ...


class ConsoleSurface(Protocol[Status_co]):
    """The blocking twin of :class:`AsyncConsoleSurface`: the same methods, blocking."""

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc_info: object) -> None: ...

    def send(
        self,
        *,
        python: str | None = None,
        r: str | None = None,
        sql: str | None = None,
        stdin: str | None = None,
        timeout_ms: int | None = None,
    ) -> CellResult: ...

    def poll(self, timeout_ms: int | None = None) -> CellResult: ...

    def run(
        self,
        *,
        python: str | None = None,
        r: str | None = None,
        sql: str | None = None,
        timeout: float | None = None,
        on_output: Callable[[CellResult], Any] | None = None,
        check: bool = False,
    ) -> CellResult: ...

    def settle(
        self, bound: float = 10.0, on_output: Callable[[CellResult], Any] | None = None
    ) -> CellResult | None: ...

    def interrupt(self) -> CellResult: ...

    def restart(self) -> CellResult: ...

    def status(self) -> Status_co: ...

    def put_file(self, name: str, data: bytes) -> str: ...

    def get_file(self, name: str, *, max_bytes: int = 100_000_000) -> bytes: ...

    def list_files(self, pattern: str = "**") -> list[str]: ...

    def push(self, name: str, value: Any) -> None: ...

    def pull(self, name: str, *, max_bytes: int = 100_000_000) -> Any: ...

    def tools(self) -> list[ToolHandle]: ...

    def close(self) -> None: ...

    def cancel(self) -> None: ...


class AsyncManagerSurface(Protocol[Console_co, Sessions_co, Stats_co]):
    """What every async session manager offers: ``Console_co`` is the console it hands out,
    ``Sessions_co`` and ``Stats_co`` what ``sessions()`` and ``stats()`` return (awaitables on Ray)."""

    async def __aenter__(self) -> Self: ...

    async def __aexit__(self, *exc_info: object) -> None: ...

    async def aclose(self) -> None: ...

    def session(self, *, owner: Owner, name: str | None = None) -> AbstractAsyncContextManager[Console_co]: ...

    async def open(self, *, owner: Owner, name: str | None = None) -> Console_co: ...

    def get(self, session_id: str) -> Console_co: ...

    async def close(self, session_id: str) -> None: ...

    def sessions(self) -> Sessions_co: ...

    def stats(self) -> Stats_co: ...


class ManagerSurface(Protocol[Console_co, Sessions_co, Stats_co]):
    """The blocking twin of :class:`AsyncManagerSurface` (``start()``/``shutdown()`` for ``aenter``/``aclose``)."""

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc_info: object) -> None: ...

    def start(self) -> None: ...

    def shutdown(self) -> None: ...

    def session(self, *, owner: Owner, name: str | None = None) -> AbstractContextManager[Console_co]: ...

    def open(self, *, owner: Owner, name: str | None = None) -> Console_co: ...

    def get(self, session_id: str) -> Console_co: ...

    def close(self, session_id: str) -> None: ...

    def sessions(self) -> Sessions_co: ...

    def stats(self) -> Stats_co: ...
