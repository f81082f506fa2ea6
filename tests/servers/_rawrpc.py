"""Shared pieces for the test MCP servers in this folder.

`RawServer` is a hand-written JSON-RPC 2.0 loop over newline-delimited stdin/stdout that
does not use the SDK, so a script can misbehave in ways the SDK would not allow. A script
subclasses it and overrides `call_tool` (and, for the hostile ones, `list_tools`).

Also here: `log_method` (the `--log FILE` format every server uses) and `png_bytes`.
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
import zlib
from typing import Any, ClassVar

JsonObj = dict[str, Any]
RequestId = int | str

# What the 2.3.0 client offers in `initialize` is "2025-11-25"; echo any handshake version we know.
HANDSHAKE_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
LATEST_HANDSHAKE_VERSION = HANDSHAKE_VERSIONS[-1]

METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
PARSE_ERROR = -32700

# The spec's schema for a tool without arguments.
EMPTY_SCHEMA: JsonObj = {"type": "object", "properties": {}}
READ_ONLY: JsonObj = {"readOnlyHint": True}


def log_method(path: str | None, method: str, params: Any) -> None:
    """Append `METHOD[ TARGET]` to `path`, TARGET being the tool/prompt name or resource URI."""
    if path is None:
        return
    target = None
    if isinstance(params, dict) and method in ("tools/call", "prompts/get", "resources/read"):
        target = params.get("uri" if method == "resources/read" else "name")
    log_line(path, method if target is None else f"{method} {target}")


def log_line(path: str, line: str) -> None:
    # One short O_APPEND write per line, reopened each time: never buffered, safe to read at any moment.
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")


def png_bytes(width: int, height: int, rgb: tuple[int, int, int] = (255, 0, 0), level: int = 9) -> bytes:
    """A valid RGB PNG of one flat colour (no PIL). `level=0` makes the size ~ width*height*3."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    row = b"\x00" + bytes(rgb) * width  # filter type 0, then the pixels
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit truecolour
    idat = zlib.compress(row * height, level)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def text_result(text: str, *, is_error: bool = False) -> JsonObj:
    result: JsonObj = {"content": [{"type": "text", "text": text}]}
    if is_error:
        result["isError"] = True
    return result


def tool(name: str, description: str, schema: JsonObj | None = None, hints: JsonObj | None = None) -> JsonObj:
    """A tools/list entry; `hints` become its annotations (none when omitted)."""
    entry: JsonObj = {"name": name, "description": description, "inputSchema": schema or EMPTY_SCHEMA}
    if hints is not None:
        entry["annotations"] = hints
    return entry


def log_arg_parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--log", metavar="FILE", help="append one line per JSON-RPC method received")
    return parser


class RpcError(Exception):
    """Raised by a handler to answer the request with a JSON-RPC error."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class RawServer:
    """Synchronous JSON-RPC loop: answers `initialize`, `ping`, `tools/list`, `tools/call`.

    Notifications are ignored, any other request gets METHOD_NOT_FOUND (so the SDK `Client`'s
    `server/discover` probe falls back to `initialize`). Returns when stdin reaches EOF.
    A handler answers by calling `self.reply` / `self.error` / `self.send`, or not at all.
    """

    name: ClassVar[str] = "raw"
    tools: ClassVar[list[JsonObj]] = [tool("t", "Tool t.", hints=READ_ONLY)]
    list_changed: ClassVar[bool] = False

    def __init__(self, log: str | None = None) -> None:
        self.log = log
        self._out = sys.stdout.buffer

    # -- overridable handlers ------------------------------------------------------------

    def list_tools(self, req_id: RequestId, params: JsonObj) -> None:
        self.reply(req_id, {"tools": self.tools})

    def call_tool(self, req_id: RequestId, params: JsonObj) -> None:
        self.reply(req_id, text_result("ok"))

    # -- wire helpers --------------------------------------------------------------------

    def write_line(self, line: str) -> None:
        try:
            self._out.write(line.encode() + b"\n")
            self._out.flush()
        except BrokenPipeError:
            sys.exit(0)  # the client is gone

    def send(self, message: JsonObj) -> None:
        self.write_line(json.dumps({"jsonrpc": "2.0", **message}, separators=(",", ":")))

    def reply(self, req_id: RequestId, result: JsonObj) -> None:
        self.send({"id": req_id, "result": result})

    def error(self, req_id: RequestId | None, code: int, message: str) -> None:
        self.send({"id": req_id, "error": {"code": code, "message": message}})

    def notify(self, method: str, params: JsonObj | None = None) -> None:
        self.send({"method": method} if params is None else {"method": method, "params": params})

    # -- loop ----------------------------------------------------------------------------

    def initialize(self, params: JsonObj) -> JsonObj:
        requested = params.get("protocolVersion")
        version = requested if requested in HANDSHAKE_VERSIONS else LATEST_HANDSHAKE_VERSION
        return {
            "protocolVersion": version,
            "capabilities": {"tools": {"listChanged": self.list_changed}},
            "serverInfo": {"name": self.name, "version": "0.0.1"},
        }

    def handle(self, message: JsonObj) -> None:
        method, req_id = message.get("method"), message.get("id")
        params = message.get("params") or {}
        if not isinstance(method, str):
            return  # a response to something we never sent, or junk: ignore
        log_method(self.log, method, params)
        if not isinstance(req_id, int | str):
            return  # a notification (or a request with a null id, which JSON-RPC cannot answer)
        try:
            if method == "initialize":
                self.reply(req_id, self.initialize(params))
            elif method == "ping":
                self.reply(req_id, {})
            elif method == "tools/list":
                self.list_tools(req_id, params)
            elif method == "tools/call":
                self.call_tool(req_id, params)
            else:
                raise RpcError(METHOD_NOT_FOUND, f"Method not found: {method}")
        except RpcError as exc:
            self.error(req_id, exc.code, exc.message)

    def serve(self) -> None:
        for raw in sys.stdin.buffer:
            if not raw.strip():
                continue
            try:
                message = json.loads(raw)
            except ValueError:
                self.error(None, PARSE_ERROR, "Parse error")
                continue
            if isinstance(message, dict):
                self.handle(message)
