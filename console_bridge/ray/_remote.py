"""The driver's side of a remote session: error translation and the :class:`RayConsole` proxy."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import anyio
import ray
import ray.exceptions

from console_bridge._errors import BridgeError, ConnectionClosed, NotAllowed
from console_bridge._handles import NotCopyable, ToolHandle
from console_bridge._identity import Owner, check_owner, current_owner
from console_bridge._results import CellResult
from console_bridge.ray._host import RayConsoleStatus, ToolSpec

__all__ = ["RayConsole", "lost_message", "remote"]


class _Node(Protocol):
    node_id: str
    actor: Any  # the node's host actor (ray.actor.ActorHandle)
    lost: str | None
    used: int
    consoles: set[RayConsole]


def lost_message(node_id: str, why: str) -> str:
    return (
        f"the Ray node {node_id} hosting this session was lost ({why}); its sessions are gone and were not "
        "recreated: open a new session"
    )


def translate(exc: BaseException, node: _Node, what: str) -> BaseException:
    """The error a caller sees for a failed remote call: the session's own :class:`BridgeError`
    (same class, same fields), or :class:`ConnectionClosed` naming the node when it was lost."""
    if isinstance(exc, ray.exceptions.RayTaskError):
        cause = exc.cause
        if isinstance(cause, BridgeError):
            return cause
        return BridgeError(
            f"{what} failed on Ray node {node.node_id}: {type(cause).__name__}: {cause}",
            details={"node_id": node.node_id, "traceback": str(exc)[-4000:]},
        )
    if isinstance(exc, ray.exceptions.RayActorError | ray.exceptions.NodeDiedError | ray.exceptions.WorkerCrashedError):
        node.lost = node.lost or f"{type(exc).__name__}"
        return ConnectionClosed(f"{what}: {lost_message(node.node_id, node.lost)}", details={"node_id": node.node_id})
    if isinstance(exc, ray.exceptions.RayError):
        return ConnectionClosed(
            f"{what}: Ray failed the call to node {node.node_id}: {type(exc).__name__}: {exc}",
            details={"node_id": node.node_id},
        )
    return exc


async def remote(node: _Node, what: str, ref: Any) -> Any:
    """Await one actor call; a cancelled caller cancels the remote task. Errors are translated."""
    if node.lost is not None:
        ref_cancel(ref)
        raise ConnectionClosed(f"{what}: {lost_message(node.node_id, node.lost)}", details={"node_id": node.node_id})
    try:
        return await ref
    except anyio.get_cancelled_exc_class():
        ref_cancel(ref)
        raise
    except Exception as exc:
        translated = translate(exc, node, what)
        if translated is exc:
            raise
        raise translated from None


def ref_cancel(ref: Any) -> None:
    with contextlib.suppress(Exception):  # already finished, or the node is gone: nothing left to cancel
        ray.cancel(ref)


class RayConsole(NotCopyable):
    """A session hosted on a Ray node, driven from here: the :class:`AsyncConsole` methods, remote.

    Errors are the session's own (:class:`CellTimeout`, :class:`Busy`, :class:`NotAllowed`, ...,
    with their fields); a lost node or host actor raises :class:`ConnectionClosed` naming the
    node id. ``status()`` is async here (it asks the node) and carries ``node_id``.
    """

    def __init__(
        self,
        *,
        node: _Node,
        session_id: str,
        owner: Owner,
        spec: ToolSpec | None,
        on_closed: Callable[[RayConsole], Awaitable[None]],
    ) -> None:
        self.node = node  # the driver's record of the hosting node
        self.id = session_id
        self.owner = owner
        self._spec = spec
        self._on_closed = on_closed
        self.closed = False
        self.close_reason: str | None = None  # why it ended on its node, when the node said so

    def __repr__(self) -> str:
        return f"<RayConsole {self.id} node={self.node_id[:12]} owner={self.owner!s}{' closed' if self.closed else ''}>"

    @property
    def node_id(self) -> str:
        """Ray's hex id of the node hosting this session."""
        return self.node.node_id

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        check_owner(self.owner, "console")
        self._check_open(method)
        try:
            return await remote(self.node, method, self.node.actor.call.remote(self.id, method, args, kwargs))
        except ConnectionClosed:
            await self._on_closed(self)
            raise

    def _check_open(self, what: str) -> None:
        if self.node.lost is not None:
            raise ConnectionClosed(
                f"{what}: {lost_message(self.node_id, self.node.lost)}", details={"node_id": self.node_id}
            )
        if self.closed:
            why = self.close_reason or "this console was closed"
            raise ConnectionClosed(f"{what}: {why}; open a new session")

    @staticmethod
    def _host_only(what: str) -> None:
        active = current_owner()
        if active is not None:
            raise NotAllowed(
                f"{what} is a host control; it cannot be used under the run context of {active!s}. "
                "Call it from host code, outside run_context()."
            )

    # ----------------------------------------------------------------- cells
    async def send(
        self,
        *,
        python: str | None = None,
        r: str | None = None,
        sql: str | None = None,
        stdin: str | None = None,
        timeout_ms: int | None = None,
    ) -> CellResult:
        """One observation window (see :meth:`AsyncConsole.send`)."""
        result: CellResult = await self._call("send", python=python, r=r, sql=sql, stdin=stdin, timeout_ms=timeout_ms)
        return result

    async def poll(self, timeout_ms: int | None = None) -> CellResult:
        """An empty send (see :meth:`AsyncConsole.poll`)."""
        result: CellResult = await self._call("poll", timeout_ms)
        return result

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
        """Run a cell to completion (see :meth:`AsyncConsole.run`); ``on_output`` runs here, on the
        driver, for each chunk as the node streams it back. ``check=True`` raises :class:`CellError`
        (here, on the driver) when the cell failed."""
        result = await self._run(python=python, r=r, sql=sql, timeout=timeout, on_output=on_output)
        return result.raise_for_error() if check else result

    async def _run(
        self,
        *,
        python: str | None,
        r: str | None,
        sql: str | None,
        timeout: float | None,
        on_output: Callable[[CellResult], Any] | None,
    ) -> CellResult:
        kwargs: dict[str, Any] = {"python": python, "r": r, "sql": sql, "timeout": timeout}
        if on_output is None:
            result: CellResult = await self._call("run", **kwargs)
            return result
        streamed: CellResult = await self._stream("run", kwargs, on_output)
        return streamed

    async def _stream(self, method: str, kwargs: dict[str, Any], on_output: Callable[[CellResult], Any]) -> Any:
        """``method`` (``run`` or ``settle``) on the node, its chunks handed to ``on_output`` here as
        they stream back; returns the method's result."""
        check_owner(self.owner, "console")
        self._check_open(method)
        stream: Any = self.node.actor.run_stream.remote(self.id, kwargs, method)
        try:
            while True:
                try:
                    ref = await stream.__anext__()
                except StopAsyncIteration:
                    raise ConnectionClosed(
                        f"{method}: the stream from Ray node {self.node_id} ended without a result"
                    ) from None
                done, chunk = await remote(self.node, method, ref)
                if done:
                    return chunk
                outcome = on_output(chunk)
                if isinstance(outcome, Awaitable):
                    await outcome
        except anyio.get_cancelled_exc_class():
            ref_cancel(stream)
            raise
        except ConnectionClosed:
            await self._on_closed(self)
            raise
        except Exception as exc:
            translated = translate(exc, self.node, method)
            if translated is exc:
                raise
            if isinstance(translated, ConnectionClosed):
                await self._on_closed(self)
            raise translated from None

    async def settle(
        self, bound: float = 10.0, on_output: Callable[[CellResult], Any] | None = None
    ) -> CellResult | None:
        """Host-only: interrupt the running cell and poll until it stopped, within ``bound`` seconds
        (see :meth:`AsyncConsole.settle`); ``on_output`` runs here, on the driver."""
        self._host_only("settle()")
        if on_output is None:
            result: CellResult | None = await self._call("settle", bound)
            return result
        streamed: CellResult | None = await self._stream("settle", {"bound": bound}, on_output)
        return streamed

    async def interrupt(self) -> CellResult:
        """Host-only: interrupt the running cell (state kept)."""
        self._host_only("interrupt()")
        result: CellResult = await self._call("interrupt")
        return result

    async def restart(self) -> CellResult:
        """Host-only: a fresh worker (in-memory state lost)."""
        self._host_only("restart()")
        result: CellResult = await self._call("restart")
        return result

    async def status(self) -> RayConsoleStatus:
        """The session's status on its node, with ``node_id``."""
        check_owner(self.owner, "console")
        self._check_open("status")
        status: RayConsoleStatus = await remote(self.node, "status", self.node.actor.status.remote(self.id))
        return status

    # ------------------------------------------------------ files in and out
    async def put_file(self, name: str, data: bytes) -> str:
        """Write ``data`` into the session's private TMPDIR on its node; the path a cell opens."""
        path: str = await self._call("put_file", name, bytes(data))
        return path

    async def get_file(self, name: str, *, max_bytes: int = 100_000_000) -> bytes:
        """The bytes of a file a cell wrote into its TMPDIR (see :meth:`AsyncConsole.get_file`)."""
        data: bytes = await self._call("get_file", name, max_bytes=max_bytes)
        return data

    async def list_files(self, pattern: str = "**") -> list[str]:
        """The files in the session's TMPDIR on its node matching ``pattern`` (see :meth:`AsyncConsole.list_files`)."""
        names: list[str] = await self._call("list_files", pattern)
        return names

    async def push(self, name: str, value: Any) -> None:
        """Bind ``name`` in the session's Python to a copy of ``value`` (see :meth:`AsyncConsole.push`);
        the value reaches the node through Ray, the sandbox through Parquet, ``.npy`` or JSON."""
        await self._call("push", name, value)

    async def pull(self, name: str, *, max_bytes: int = 100_000_000) -> Any:
        """A copy of the session's Python value ``name`` (see :meth:`AsyncConsole.pull`): read on the
        node without pickle, then sent here through Ray."""
        return await self._call("pull", name, max_bytes=max_bytes)

    # ----------------------------------------------------------------- tools
    def tools(self) -> list[ToolHandle]:
        """The session's governed model-facing ``send`` tool; each call runs on the node."""
        self._check_open("tools()")
        spec = self._spec
        assert spec is not None

        async def invoke(arguments: dict[str, Any]) -> CellResult:
            self._check_open("send")
            try:
                result: CellResult = await remote(
                    self.node, "send", self.node.actor.tool_send.remote(self.id, arguments)
                )
            except ConnectionClosed:
                await self._on_closed(self)
                raise
            return result

        return [
            ToolHandle(
                name=spec.name,
                tool=spec.tool,
                server=spec.server,
                description=spec.description,
                input_schema=spec.input_schema,
                annotations=spec.annotations,
                requires_approval=spec.requires_approval,
                owner=self.owner,
                invoke=invoke,
            )
        ]

    # ----------------------------------------------------------------- close
    async def close(self) -> None:
        """Close the session on its node (recording finalized, tree stopped); its slot frees. Idempotent."""
        await self._on_closed(self)

    async def cancel(self) -> None:
        """Kill the session's process tree on its node at once (the recording is not finalized), then
        free its slot. Idempotent."""
        if not self.closed and self.node.lost is None:
            with anyio.CancelScope(shield=True), contextlib.suppress(ConnectionClosed):
                await remote(self.node, "cancel", self.node.actor.call.remote(self.id, "cancel", (), {}))
        await self._on_closed(self)

    async def __aenter__(self) -> RayConsole:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
