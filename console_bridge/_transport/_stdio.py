"""A hardened stdio child: replacement environment, own process group, piped stderr
kept in a bounded ring, run under console-bridge's supervisor (the child subreaper that
owns every descendant exactly, see ``_confinement/_supervisor.py``), and a shutdown that
leaves no survivor. Nothing is polled while the child runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import shutil
import signal
import socket
import subprocess
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import anyio
import mcp_types
import psutil
from anyio.abc import Process
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage

from console_bridge._transport._process import ProcessTree

__all__ = ["MAX_MESSAGE_BYTES", "StderrRing", "StdioChild", "Supervised", "base_environment", "open_stdio"]


class Supervised(Protocol):
    """How a stdio child is started under its supervisor: the command line that wraps the server's,
    and the variables that command needs. ``_confinement._plan.Supervision`` is the one there is
    (the supervisor owns the server's process tree, and the session's limits and view with it);
    the transport knows only this shape."""

    def command(self, argv: list[str], *, cwd: str | None, grace: float) -> list[str]: ...

    @property
    def env(self) -> Mapping[str, str]: ...


#: Environment variables a stdio child inherits from the host (plus ``LC_*``).
INHERITED_ENV = ("PATH", "HOME", "LANG", "TMPDIR")

#: A single JSON-RPC line larger than this ends the connection (a runaway server).
MAX_MESSAGE_BYTES = 256 * 1024 * 1024


def base_environment(host: Mapping[str, str] | None = None) -> dict[str, str]:
    """The short allowlist of host variables a child gets: PATH, HOME, LANG, LC_*, TMPDIR."""
    host = os.environ if host is None else host
    env = {key: host[key] for key in INHERITED_ENV if key in host}
    env.update({key: value for key, value in host.items() if key.startswith("LC_")})
    return env


@dataclass
class StderrRing:
    """The last ``limit`` bytes a child wrote on stderr."""

    limit: int = 64 * 1024
    _buffer: bytearray = field(default_factory=bytearray)
    total: int = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        self._buffer += chunk
        if len(self._buffer) > self.limit:
            del self._buffer[: len(self._buffer) - self.limit]

    def text(self) -> str:
        return self._buffer.decode("utf-8", errors="replace")


class StdinSocket:
    """The host's end of the server's stdin: one end of a ``socketpair`` whose other end the
    supervisor hands to the server as it is, so requests reach the server without a relay (see
    ``_confinement/_supervisor.py``). One-way: its read side is shut, so the server cannot write
    into it. Closing it is the server's EOF."""

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self._sock: socket.socket | None = sock
        self._waiter: asyncio.Future[None] | None = None

    async def send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            sock = self._sock
            if sock is None:
                raise anyio.ClosedResourceError
            try:
                view = view[sock.send(view, socket.MSG_NOSIGNAL) :]
            except BlockingIOError:  # the server is not reading: wait until the socket drains
                loop = asyncio.get_running_loop()
                waiter = self._waiter = loop.create_future()
                loop.add_writer(sock.fileno(), _wake, waiter)
                try:
                    await waiter
                finally:
                    self._waiter = None
                    if self._sock is sock:
                        loop.remove_writer(sock.fileno())

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is None:
            return
        waiter, self._waiter = self._waiter, None
        if waiter is not None:  # a send is waiting: stop watching the descriptor before it is closed
            asyncio.get_running_loop().remove_writer(sock.fileno())
            if not waiter.done():
                waiter.set_exception(anyio.ClosedResourceError())
        # The socket's write side, not only this descriptor: a copy in a process forked from the
        # host does not keep the server's input open.
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_WR)
        sock.close()


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


@dataclass
class StdioChild:
    """A running child and the streams the MCP session reads and writes."""

    process: Process
    tree: ProcessTree
    stderr: StderrRing
    read_stream: MemoryObjectReceiveStream[SessionMessage | Exception]
    write_stream: MemoryObjectSendStream[SessionMessage]
    stdin: StdinSocket

    _server_pid: int | None = None

    @property
    def pid(self) -> int:
        """The supervisor's pid (the root of the tree)."""
        return self.process.pid

    @property
    def server_pid(self) -> int:
        """The server's pid: the supervisor's first child (the supervisor's own pid until it started)."""
        if self._server_pid is None:
            try:
                children = psutil.Process(self.process.pid).children()
            except psutil.Error:
                children = []
            if not children:
                return self.process.pid
            self._server_pid = min(children, key=lambda proc: (proc.create_time(), proc.pid)).pid
        return self._server_pid

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    def kill_now(self) -> None:
        """Kill the whole tree at once (cancel): the supervisor SIGKILLs every descendant, then exits."""
        if self.process.returncode is None:
            with contextlib.suppress(OSError):
                os.kill(self.process.pid, signal.SIGUSR1)


def resolve_executable(command: str, env: Mapping[str, str], cwd: Path | None) -> str:
    """``command`` as an absolute path, searched on the child's PATH; OSError when missing."""
    if os.sep in command:
        path = Path(command) if Path(command).is_absolute() else (cwd or Path.cwd()) / command
        if not path.exists():
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), command)
        if not os.access(path, os.X_OK) or path.is_dir():
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), command)
        return str(path)
    found = shutil.which(command, path=env.get("PATH", os.defpath))
    if found is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), command)
    return str(Path(found).absolute())


def _parse(line: bytes) -> SessionMessage | Exception:
    try:
        return SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        preview = line[:200].decode("utf-8", errors="replace")
        return ValueError(f"the server wrote a line that is not a JSON-RPC message: {preview!r} ({exc})")


@asynccontextmanager
async def open_stdio(
    command: str,
    args: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path | None,
    stderr_limit: int,
    shutdown_grace: float,
    supervised: Supervised,
) -> AsyncIterator[StdioChild]:
    """Start ``command`` under the supervisor (``supervised`` says how) and yield a :class:`StdioChild`; on exit stop
    it and every descendant.

    Raises OSError when the command is missing or the spawn fails. Shutdown is shielded
    and bounded: close stdin (the supervisor closes the server's), wait
    ``shutdown_grace`` for the tree to end, ask the supervisor to kill it at once, wait
    ``shutdown_grace`` again, then SIGKILL the supervisor, its group and its descendants.
    """
    executable = resolve_executable(command, env, cwd)
    argv = supervised.command([executable, *args], cwd=str(cwd) if cwd is not None else None, grace=shutdown_grace)
    scope_env = dict(supervised.env)
    # The server's stdin is a socket the supervisor passes on as it is (no copy, no wake-up of
    # the supervisor per request); what the server sends still comes back on its stdout pipe.
    host_end, server_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        host_end.shutdown(socket.SHUT_RD)
        process = await anyio.open_process(
            argv,
            stdin=server_end.fileno(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env) | scope_env,
            cwd=cwd,
            start_new_session=True,
        )
    except BaseException:
        host_end.close()
        raise
    finally:
        server_end.close()
    stdin = StdinSocket(host_end)
    tree = ProcessTree(process.pid)
    ring = StderrRing(stderr_limit)
    to_session, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    write_stream, from_session = anyio.create_memory_object_stream[SessionMessage](16)
    child = StdioChild(process, tree, ring, read_stream, write_stream, stdin)

    async def read_stdout() -> None:
        assert process.stdout is not None
        pieces: list[bytes] = []
        size = 0
        async with to_session:
            with contextlib.suppress(anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                async for chunk in process.stdout:
                    start = 0
                    while (end := chunk.find(b"\n", start)) >= 0:
                        pieces.append(chunk[start:end])
                        line = b"".join(pieces)
                        pieces, size = [], 0
                        start = end + 1
                        if line.strip():
                            await to_session.send(_parse(line))
                    pieces.append(chunk[start:])
                    size += len(chunk) - start
                    if size > MAX_MESSAGE_BYTES:
                        await to_session.send(ValueError(f"a message exceeded {MAX_MESSAGE_BYTES} bytes"))
                        return

    async def read_stderr() -> None:
        assert process.stderr is not None
        with contextlib.suppress(anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            async for chunk in process.stderr:
                ring.feed(chunk)

    async def write_stdin() -> None:
        async with from_session:
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                async for message in from_session:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await stdin.send(data.encode("utf-8") + b"\n")
            # The session closed its write side: close the child's stdin (clean shutdown).
            stdin.close()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(read_stdout)
            tg.start_soon(read_stderr)
            tg.start_soon(write_stdin)
            try:
                yield child
            finally:
                with anyio.CancelScope(shield=True):
                    await _shutdown(child, shutdown_grace)
                tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            if process.returncode is None:  # only reached when the task group itself failed
                child.kill_now()
                if not await _wait_exit(process, shutdown_grace):
                    tree.kill_now()
                    await tree.wait_gone(shutdown_grace)
            stdin.close()
            for stream in (process.stdout, process.stderr):
                if stream is not None:
                    with contextlib.suppress(OSError, anyio.BrokenResourceError):
                        await stream.aclose()
            with contextlib.suppress(OSError, anyio.BrokenResourceError):
                await process.aclose()


async def _wait_exit(process: Process, timeout: float) -> bool:
    with anyio.move_on_after(timeout):
        await process.wait()
    return process.returncode is not None


async def _shutdown(child: StdioChild, grace: float) -> None:
    """Close stdin; the supervisor stops the server and every descendant, cleans up, exits."""
    process, tree = child.process, child.tree
    child.write_stream.close()
    child.stdin.close()
    # The supervisor waits up to `grace` for the server, then kills the tree itself.
    if await _wait_exit(process, grace * 2 + 1.0):
        return
    child.kill_now()
    if await _wait_exit(process, grace):
        return
    # The supervisor does not answer: kill it, its group and whatever descends from it now.
    tree.snapshot()
    tree.kill_now()
    await tree.wait_gone(grace)
