"""The stdio wire of ``console-bridge serve``, without a thread per line.

The SDK's ``stdio_server`` reads and writes through worker threads (``anyio.wrap_file``): two
thread hops per message, most of serve's overhead on a trivial cell. This is the same wire
(newline-delimited JSON-RPC on the process's stdin and stdout) on the event loop's own pipe
transports. As the SDK does, fd 0 is pointed at the null device and fd 1 at stderr while
serving, so stray output can never corrupt the wire. Used when stdin and stdout are pipes
(what every MCP host gives a stdio server); otherwise serve falls back to the SDK's transport.
With a ``FastSend`` (``_fast``) the hot request, a warm ``send``, is answered beside the SDK
instead of through it; every other message takes the SDK's path unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
from collections.abc import AsyncIterator
from typing import Any

import anyio
import mcp_types as types
import pydantic_core
from anyio.abc import TaskGroup
from mcp.shared.message import SessionMessage

from console_bridge._serve._fast import FastSend

__all__ = ["pipes_on_stdio", "stdio_pipes"]


def pipes_on_stdio() -> bool:
    """True when fd 0 and fd 1 are pipes or sockets (the event loop can watch them)."""
    try:
        return all(stat.S_ISFIFO(m) or stat.S_ISSOCK(m) for m in (os.fstat(0).st_mode, os.fstat(1).st_mode))
    except OSError:
        return False


@contextlib.asynccontextmanager
async def stdio_pipes(
    max_message_bytes: int = 256 * 1024 * 1024, fast: FastSend | None = None
) -> AsyncIterator[tuple[Any, Any]]:
    """(read stream, write stream) of SessionMessages over stdin/stdout. A message longer than
    ``max_message_bytes`` ends the session (the client sees the server close). ``fast`` answers the
    requests it takes itself, each in its own task, writing whole lines beside the SDK's."""
    loop = asyncio.get_running_loop()
    in_fd, out_fd = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    reader = asyncio.StreamReader(limit=max_message_bytes)
    read_transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(in_fd, "rb", buffering=0)
    )
    write_transport, write_protocol = await loop.connect_write_pipe(
        lambda: asyncio.streams.FlowControlMixin(), os.fdopen(out_fd, "wb", buffering=0)
    )
    writer = asyncio.StreamWriter(write_transport, write_protocol, None, loop)
    incoming_send, incoming = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    outgoing, outgoing_receive = anyio.create_memory_object_stream[SessionMessage](0)

    def write_line(data: bytes) -> None:
        writer.write(data)  # one whole line, never interleaved (no await within a write)

    async def answer(request_id: types.RequestId, arguments: dict[str, Any]) -> None:
        assert fast is not None
        await fast.answer(request_id, arguments, write_line)
        with contextlib.suppress(ConnectionError):
            await writer.drain()

    async def read_lines(tg: TaskGroup) -> None:
        async with incoming_send:
            while True:
                try:
                    line = await reader.readuntil(b"\n")
                except asyncio.IncompleteReadError:
                    return  # EOF: the client closed stdin
                except (asyncio.LimitOverrunError, ValueError, OSError):
                    return
                if fast is not None:
                    try:
                        raw = pydantic_core.from_json(line)
                    except ValueError:
                        raw = None  # the SDK's own parse below reports it
                    if fast.cancels(raw):
                        continue
                    taken = fast.inbound(raw)
                    if taken is not None:
                        tg.start_soon(answer, *taken)
                        continue
                try:
                    message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                except Exception as exc:  # a malformed line is the peer's error, reported by the server
                    await incoming_send.send(exc)
                    continue
                await incoming_send.send(SessionMessage(message))

    async def write_lines() -> None:
        async with outgoing_receive:
            async for item in outgoing_receive:
                if fast is not None:
                    fast.outbound(item.message)
                data = item.message.model_dump_json(by_alias=True, exclude_unset=True)
                writer.write(data.encode("utf-8") + b"\n")
                with contextlib.suppress(ConnectionError):
                    await writer.drain()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(read_lines, tg)
            tg.start_soon(write_lines)
            try:
                yield incoming, outgoing
            finally:
                tg.cancel_scope.cancel()
    finally:
        read_transport.close()
        write_transport.close()
