"""Streamable HTTP for ``console-bridge serve``: a gate in front of the MCP SDK's session manager.

Every request passes the gate first: the path (``/mcp``), the bearer token (401), the
``Origin`` (403, against DNS rebinding) and, for a request that opens an MCP session
(an ``initialize`` without ``Mcp-Session-Id``), its headers and body checked
(:func:`opening_refusal`: 406 for an ``Accept`` without JSON and SSE, 415 for a body that is
not ``application/json``, 400 for one that is not a JSON-RPC ``initialize``, however
malformed: bad UTF-8, nesting 10^5 deep, not an object) and only then a console claimed from
the session manager (503 past ``--max-sessions``, 429 past ``--max-per-client``). Nothing
is started for a refused request, and no malformed request gets a 500 or a traceback.
The SDK then serves the MCP session; its id is bound to the claimed console, and a ``DELETE``
of the session closes the console.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import anyio
import pydantic_core
from mcp.server import Server, ServerRequestContext
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp_types import jsonrpc_message_adapter
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.types import Message, Receive, Scope, Send

from console_bridge._console._session import AsyncConsole
from console_bridge._errors import BridgeError, Busy, ConnectionClosed, NotAllowed
from console_bridge._identity import Owner
from console_bridge._manager._async import AsyncSessionManager
from console_bridge.cli._serve_mcp import instructions_for

__all__ = ["LOOPBACK_HOSTS", "Gate", "GateOptions", "opening_refusal", "origin_allowed"]

LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
_log = logging.getLogger("console_bridge.serve")


def origin_allowed(origin: str | None, allowed: Sequence[str]) -> bool:
    """No ``Origin`` (not a browser), a loopback origin, or one listed exactly (scheme://host[:port])."""
    if origin is None:
        return True
    if origin.rstrip("/") in {a.rstrip("/") for a in allowed}:
        return True
    try:
        parts = urlsplit(origin)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and (parts.hostname or "") in LOOPBACK_HOSTS


def _media_types(header: str) -> set[str]:
    return {part.split(";")[0].strip().lower() for part in header.split(",")}


def opening_refusal(headers: dict[str, str], body: bytes) -> tuple[int, str] | None:
    """Why an opening request (a POST without ``Mcp-Session-Id``) must not claim a console, as
    ``(status, message)``; None for a well-formed ``initialize``. Pure; the same rules as the SDK's
    transport (which would refuse it only after the console was claimed)."""
    accept = _media_types(headers.get("accept", ""))
    has_json = bool(accept & {"*/*", "application/*", "application/json"})
    has_sse = bool(accept & {"*/*", "text/*", "text/event-stream"})
    if not (has_json and has_sse):
        return 406, "Not Acceptable: the client must accept both application/json and text/event-stream"
    content_type = {part.strip() for part in headers.get("content-type", "").split(";")[0].split(",")}
    if "application/json" not in content_type:
        return 415, "Unsupported Media Type: Content-Type must be application/json"
    try:
        message = pydantic_core.from_json(body)  # bounded recursion: deep nesting is a ValueError here
    except (ValueError, RecursionError) as exc:
        return 400, f"Parse error: the body is not JSON ({str(exc)[:200]})"
    if not isinstance(message, dict) or message.get("method") != "initialize":
        return None  # not an opening of a session: the SDK answers it (and claims nothing)
    try:
        jsonrpc_message_adapter.validate_python(message, by_name=False)
    except (ValueError, RecursionError):
        return 400, "Invalid Request: the initialize message is not a valid JSON-RPC request"
    if "id" not in message:
        return 400, "Invalid Request: initialize must be a request (with an id)"
    return None


@dataclass(frozen=True, slots=True)
class GateOptions:
    token: str
    path: str = "/mcp"
    allowed_origins: tuple[str, ...] = ()
    max_body_bytes: int = 16 * 1024 * 1024  # an opening request is read whole before anything starts


@dataclass(eq=False)
class Gate:
    """The ASGI application: checks, claims, binds; the SDK serves the MCP traffic."""

    manager: AsyncSessionManager
    options: GateOptions
    sdk: StreamableHTTPSessionManager | None = None
    server: Server[Any] | None = None
    sessions: dict[str, AsyncConsole] = field(default_factory=dict)

    async def bind(self, ctx: ServerRequestContext[Any, Any]) -> AsyncConsole:
        request: Any = ctx.request
        sid = request.headers.get(MCP_SESSION_ID_HEADER) if request is not None else None
        console = self.sessions.get(sid or "")
        if console is None:
            raise ConnectionClosed("this MCP session has no console (it was closed); start a new MCP session")
        return console

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if scope["path"].rstrip("/") != self.options.path:
            await _respond(send, 404, "not found; the MCP endpoint is " + self.options.path)
            return
        if not self._authorized(headers.get("authorization")):
            await _respond(send, 401, "missing or wrong bearer token", {"www-authenticate": "Bearer"})
            return
        if not origin_allowed(headers.get("origin"), self.options.allowed_origins):
            await _respond(send, 403, f"origin {headers.get('origin')!r} is not allowed (--allow-origin)")
            return
        version = headers.get("mcp-protocol-version")
        if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
            await _respond(
                send, 400, f"protocol {version!r} is not served: this server needs the initialize handshake (sessions)"
            )
            return
        assert self.sdk is not None
        sid = headers.get(MCP_SESSION_ID_HEADER)
        if sid is None and scope["method"] == "POST":
            await self._open(scope, receive, send, headers)
            return
        status = await _forward(self.sdk.handle_request, scope, receive, send)
        if sid is not None and scope["method"] == "DELETE" and status is not None and status < 400:
            await self._close(sid)

    def _authorized(self, header: str | None) -> bool:
        if header is None or not header.startswith("Bearer "):
            return False
        return hmac.compare_digest(header[len("Bearer ") :].strip().encode(), self.options.token.encode())

    async def _open(self, scope: Scope, receive: Receive, send: Send, headers: dict[str, str]) -> None:
        """An opening request: read it whole, claim a console only for an ``initialize``."""
        body, messages = await _read_body(receive, self.options.max_body_bytes)
        if body is None:
            await _respond(send, 413, f"request body over {self.options.max_body_bytes} bytes")
            return
        replay = _replay(messages, receive)
        refusal = opening_refusal(headers, body)
        if refusal is not None:  # checked before a console is claimed: a bad request costs no cold start
            await _respond(send, *refusal)
            return
        if not _is_initialize(body):
            await _forward(self.sdk.handle_request if self.sdk else _no_app, scope, replay, send)
            return
        client = scope.get("client") or ("unknown", 0)
        owner = Owner(f"mcp-http:{client[0]}")
        try:
            console = await self.manager.open(owner=owner)
        except Busy as exc:
            await _respond(send, 503, exc.message, {"retry-after": "5"})
            return
        except NotAllowed as exc:
            await _respond(send, 429, exc.message)
            return
        except BridgeError as exc:
            await _respond(send, 500, f"the console could not be started: {exc.message}")
            return
        if self.server is not None and self.server.instructions is None:
            self.server.instructions = instructions_for(console)
        session_id: list[str] = []

        async def capture(message: Message) -> None:
            if message["type"] == "http.response.start":
                for key, value in message.get("headers", []):
                    if key.decode("latin-1").lower() == MCP_SESSION_ID_HEADER:
                        session_id.append(value.decode("latin-1"))
                if message["status"] < 400 and session_id:
                    self.sessions[session_id[0]] = console
            await send(message)

        established = False
        try:
            assert self.sdk is not None
            status = await _forward(self.sdk.handle_request, scope, replay, capture)
            established = status is not None and status < 400 and bool(session_id)
        finally:
            if not established:
                if session_id:
                    self.sessions.pop(session_id[0], None)
                with anyio.CancelScope(shield=True):
                    await self._release(console)

    async def _close(self, sid: str) -> None:
        console = self.sessions.pop(sid, None)
        if console is not None:
            await self._release(console)

    async def _release(self, console: AsyncConsole) -> None:
        with contextlib.suppress(BridgeError):
            await self.manager.close(self.manager.id_of(console))

    async def sweep(self) -> None:
        """Forget bindings whose console ended (culled, crashed)."""
        for sid, console in list(self.sessions.items()):
            if console.status().state == "closed":
                self.sessions.pop(sid, None)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        message = await receive()
        assert message["type"] == "lifespan.startup"
        async with self._running():
            await send({"type": "lifespan.startup.complete"})
            message = await receive()
        await send({"type": "lifespan.shutdown.complete"})

    @contextlib.asynccontextmanager
    async def _running(self) -> AsyncIterator[None]:
        assert self.sdk is not None
        async with self.sdk.run():
            try:
                yield
            finally:
                with anyio.CancelScope(shield=True):
                    for sid in list(self.sessions):
                        await self._close(sid)


def make_sdk(
    server: Server[Any], *, idle_timeout: float | None, max_sessions: int, max_body_bytes: int
) -> StreamableHTTPSessionManager:
    """The SDK's session manager; the gate has checked origin and token (no SDK security settings)."""
    return StreamableHTTPSessionManager(
        app=server,
        session_idle_timeout=idle_timeout,
        max_sessions=max_sessions,
        security_settings=None,
        max_request_body_size=max_body_bytes,
    )


async def _no_app(scope: Scope, receive: Receive, send: Send) -> None:
    await _respond(send, 503, "the server is not ready")


def _is_initialize(body: bytes) -> bool:
    try:
        message = pydantic_core.from_json(body)
    except (ValueError, RecursionError):
        return False
    return isinstance(message, dict) and message.get("method") == "initialize"


async def _read_body(receive: Receive, limit: int) -> tuple[bytes | None, list[Message]]:
    messages: list[Message] = []
    size = 0
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            return b"", messages
        size += len(message.get("body", b""))
        if size > limit:
            return None, messages
        if not message.get("more_body", False):
            return b"".join(m.get("body", b"") for m in messages if m["type"] == "http.request"), messages


def _replay(messages: list[Message], receive: Receive) -> Receive:
    queue = list(messages)

    async def replayed() -> Message:
        if queue:
            return queue.pop(0)
        return await receive()

    return replayed


async def _forward(app: Any, scope: Scope, receive: Receive, send: Send) -> int | None:
    status: list[int] = []

    async def watch(message: Message) -> None:
        if message["type"] == "http.response.start":
            status.append(message["status"])
        await send(message)

    await app(scope, receive, watch)
    return status[0] if status else None


async def _respond(send: Send, status: int, message: str, extra: dict[str, str] | None = None) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": message}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.encode(), v.encode()) for k, v in (extra or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
