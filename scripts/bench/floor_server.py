"""The floor of one MCP hop for ``scripts/bench.py --serve``: a server that does nothing.

It answers ``initialize``, ``tools/list`` and every ``tools/call`` with the text ``1`` at once, over
stdio (``floor_server.py stdio``) or Streamable HTTP on 127.0.0.1 (``floor_server.py http``: plain
JSON responses, no sessions; it prints its URL on stdout). The same MCP SDK client that drives
``console-bridge serve`` drives it, so a round trip here is what the client, the transport and two
process wake-ups cost with no server work at all: the least any second hop can add.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from typing import Any


def _answer(message: dict[str, Any]) -> dict[str, Any] | None:
    if "id" not in message:
        return None  # a notification
    method = message.get("method")
    if method == "initialize":
        version = (message.get("params") or {}).get("protocolVersion", "2025-06-18")
        result: dict[str, Any] = {
            "protocolVersion": version,
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "floor", "version": "1"},
        }
    elif method == "tools/list":
        result = {"tools": [{"name": "send", "inputSchema": {"type": "object"}}]}
    elif method == "tools/call":
        result = {"content": [{"type": "text", "text": "1"}], "isError": False}
    else:
        return {"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": "Method not found"}}
    return {"jsonrpc": "2.0", "id": message["id"], "result": result}


async def _stdio() -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(0, "rb", buffering=0))
    transport, _ = await loop.connect_write_pipe(asyncio.Protocol, os.fdopen(1, "wb", buffering=0))
    while line := await reader.readline():
        reply = _answer(json.loads(line))
        if reply is not None:
            transport.write(json.dumps(reply).encode() + b"\n")


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    body = b""
    while True:
        chunk = await receive()
        body += chunk.get("body", b"")
        if not chunk.get("more_body"):
            break
    reply = _answer(json.loads(body)) if scope["method"] == "POST" and body else None
    if reply is None:
        await send({"type": "http.response.start", "status": 202, "headers": [(b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})
        return
    out = json.dumps(reply).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(out)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": out})


async def _http() -> None:
    import uvicorn

    # proto TCP, so asyncio sets TCP_NODELAY (as console-bridge serve does)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    print(f"http://127.0.0.1:{sock.getsockname()[1]}/mcp", flush=True)
    server = uvicorn.Server(uvicorn.Config(_app, log_level="warning", lifespan="on"))
    await server.serve(sockets=[sock])


if __name__ == "__main__":
    asyncio.run(_stdio() if sys.argv[1:] == ["stdio"] else _http())
