"""The node host: a Ray actor, one per node, holding a local :class:`AsyncSessionManager`.

It runs on the node it is pinned to and forwards calls to the very same ``AsyncConsole``
objects a local manager hands out; nothing of a session is re-implemented here. Every
method names sessions by the manager's id.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, fields
from typing import Any

import anyio
import ray

from console_bridge._console._session import AsyncConsole, ConsoleStatus
from console_bridge._errors import ConnectionClosed, LaunchRefused, NotAllowed
from console_bridge._identity import Owner
from console_bridge._manager._async import AsyncSessionManager
from console_bridge._manager._info import ManagerStats, SessionInfo
from console_bridge._results import CellResult

__all__ = ["CALLS", "NodeHost", "RayConsoleStatus", "ToolSpec"]

#: The console methods a driver may call through :meth:`NodeHost.call`.
CALLS = frozenset(
    {"send", "poll", "run", "settle", "interrupt", "restart", "cancel"}
    | {"put_file", "get_file", "list_files", "push", "pull"}
)
#: The console methods whose chunks stream back to the driver through :meth:`NodeHost.run_stream`.
STREAMS = frozenset({"run", "settle"})


@dataclass(frozen=True, slots=True)
class RayConsoleStatus(ConsoleStatus):
    """:class:`ConsoleStatus` of a session hosted on a Ray node; ``node_id`` is Ray's hex node id."""

    node_id: str = ""


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """What a driver needs to build the model-facing tool handle of a remote session."""

    name: str
    tool: str
    server: str
    description: str
    input_schema: dict[str, Any]
    annotations: dict[str, Any]
    requires_approval: bool


class NodeHost:
    """Hosts one :class:`AsyncSessionManager` on its node (created by :class:`RaySessionManager`)."""

    def __init__(self, workspace: str | None, capacity: int, manager_options: dict[str, Any]) -> None:
        self.node_id: str = ray.get_runtime_context().get_node_id()
        self.workspace = workspace
        self.capacity = capacity
        self.options = dict(manager_options)
        self._manager: AsyncSessionManager | None = None

    async def start(self) -> dict[str, Any]:
        """Start the node's manager (its warm pool fills in the background). Raises
        :class:`LaunchRefused` naming this node when the workspace is not a folder here."""
        if self.workspace is not None and not await anyio.Path(self.workspace).is_dir():
            raise LaunchRefused(
                f"workspace {self.workspace!r} does not exist on Ray node {self.node_id}; a workspace must be a "
                "folder present on every node with console_sessions, or pass workspace=None for an empty folder "
                "per session (data in and out with put_file/get_file)",
                details={"node_id": self.node_id, "workspace": self.workspace},
            )
        options = dict(self.options)
        options["warm"] = min(int(options.get("warm", 1)), self.capacity)
        manager = AsyncSessionManager(self.workspace, max_sessions=self.capacity, **options)
        await manager.__aenter__()
        self._manager = manager
        return {"node_id": self.node_id, "pid": os.getpid()}

    def _require(self) -> AsyncSessionManager:
        if self._manager is None:
            raise LaunchRefused(f"the session manager on Ray node {self.node_id} is not started")
        return self._manager

    def _console(self, session_id: str) -> AsyncConsole:
        return self._require().get(session_id)

    # ------------------------------------------------------------------ claims
    async def open(self, owner: Owner, name: str | None) -> tuple[str, ToolSpec | None]:
        """Claim a session for ``owner``; return its id and its tool spec."""
        manager = self._require()
        console = await manager.open(owner=owner, name=name)
        session_id = manager.id_of(console)
        [handle] = console.tools()
        spec = ToolSpec(
            name=handle.name,
            tool=handle.tool,
            server=handle.server,
            description=handle.description,
            input_schema=handle.input_schema,
            annotations=handle.annotations,
            requires_approval=handle.requires_approval,
        )
        return session_id, spec

    async def close(self, session_id: str) -> None:
        await self._require().close(session_id)

    def ended(self, session_ids: list[str]) -> dict[str, str]:
        """Why each of these sessions ended (the manager's own message, e.g. culled after idling)."""
        out: dict[str, str] = {}
        for session_id in session_ids:
            try:
                self._require().get(session_id)
            except (ConnectionClosed, NotAllowed) as exc:
                out[session_id] = exc.message
        return out

    # ------------------------------------------------------------------- calls
    async def call(self, session_id: str, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Call ``method`` (one of :data:`CALLS`) of the session; errors travel as themselves."""
        if method not in CALLS:
            raise NotAllowed(f"{method!r} cannot be called on a remote console")
        return await getattr(self._console(session_id), method)(*args, **kwargs)

    async def run_stream(
        self, session_id: str, kwargs: dict[str, Any], method: str = "run"
    ) -> AsyncIterator[tuple[bool, CellResult | None]]:
        """``run`` (or ``settle``) whose chunks stream back as they arrive: ``(False, chunk)`` ...,
        then ``(True, result)``."""
        if method not in STREAMS:
            raise NotAllowed(f"{method!r} cannot stream from a remote console")
        call = getattr(self._console(session_id), method)
        # The cell runs in its own task; each chunk is yielded as soon as the call hands it over.
        send, receive = anyio.create_memory_object_stream[tuple[bool, CellResult | None] | BaseException](100)

        async def drive() -> None:
            async with send:
                try:
                    result = await call(on_output=lambda c: send.send((False, c)), **kwargs)
                except BaseException as exc:  # delivered to the driver as itself, after the chunks
                    await send.send(exc)
                    if not isinstance(exc, Exception):
                        raise
                else:
                    await send.send((True, result))

        async with anyio.create_task_group() as tg:
            tg.start_soon(drive)
            async with receive:
                async for item in receive:
                    if isinstance(item, BaseException):
                        raise item
                    yield item

    async def tool_send(self, session_id: str, arguments: dict[str, Any]) -> CellResult:
        """The session's governed model-facing ``send`` tool."""
        [handle] = self._console(session_id).tools()
        result = await handle(arguments)
        assert isinstance(result, CellResult)
        return result

    def status(self, session_id: str) -> RayConsoleStatus:
        status = self._console(session_id).status()
        values = {f.name: getattr(status, f.name) for f in fields(status)}
        return RayConsoleStatus(**values, node_id=self.node_id)

    # ------------------------------------------------------------------ status
    def sessions(self) -> list[SessionInfo]:
        return self._require().sessions()

    def stats(self) -> ManagerStats:
        return self._require().stats()

    def pids(self) -> list[int]:
        """The process ids of every server of this node's sessions (tests and ``ps`` use them)."""
        return [info.pid for info in self._require().sessions() if info.pid is not None]

    async def shutdown(self) -> None:
        """Close every session of this node (recordings finalized) and the manager."""
        if self._manager is not None:
            await self._manager.aclose()
