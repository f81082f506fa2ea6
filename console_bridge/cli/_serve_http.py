"""Streamable HTTP for ``console-bridge serve``: a gate in front of the MCP SDK's session manager.

Every request passes the gate first: the path (``/mcp``), the bearer token (401; it names the
client's identity, see ``_serve_identity``) and the ``Origin`` (403, against DNS rebinding).
Nothing is claimed here: the SDK serves both protocol eras on the one endpoint (the 2025
``initialize`` handshake with ``Mcp-Session-Id``, and 2026-07-28's self-contained requests),
the identity rides on the request (``scope["user"]``, so the SDK refuses an MCP session to any
other identity), and consoles are claimed on first use by ``Consoles``. A ``DELETE`` of an MCP
session closes that session's own console.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from mcp.server import Server, ServerRequestContext
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.types import Message, Receive, Scope, Send

from console_bridge._identity import Owner
from console_bridge.cli._serve_consoles import Consoles
from console_bridge.cli._serve_identity import Identities
from console_bridge.cli._serve_mcp import Caller

__all__ = ["LOOPBACK_HOSTS", "Gate", "GateOptions", "origin_allowed"]

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


IDENTITY_KEY = "console_bridge.identity"  # the ASGI scope key the gate puts the caller's identity under


@dataclass(frozen=True, slots=True)
class GateOptions:
    path: str = "/mcp"
    allowed_origins: tuple[str, ...] = ()
    max_body_bytes: int = 16 * 1024 * 1024  # a larger request body is refused (413) by the SDK


@dataclass(eq=False)
class Gate:
    """The ASGI application: checks and identifies; the SDK serves the MCP traffic."""

    consoles: Consoles
    identities: Identities
    options: GateOptions = field(default_factory=GateOptions)
    sdk: StreamableHTTPSessionManager | None = None
    server: Server[Any] | None = None

    def caller(self, ctx: ServerRequestContext[Any, Any]) -> Caller:
        """The identity the gate found for this request, and its MCP session (handshake era only)."""
        request: Any = ctx.request
        scope = getattr(request, "scope", None) or {}
        identity = scope.get(IDENTITY_KEY)
        if not isinstance(identity, Owner):
            raise MCPError(INTERNAL_ERROR, "the request carries no identity (it did not pass the gate)")
        session = None
        if ctx.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS:
            session = request.headers.get(MCP_SESSION_ID_HEADER)
        return Caller(identity=identity, session=session)

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
        identity = self.identities.authenticate(headers.get("authorization"))
        if identity is None:
            await _respond(send, 401, "missing or wrong bearer token", {"www-authenticate": "Bearer"})
            return
        if not origin_allowed(headers.get("origin"), self.options.allowed_origins):
            await _respond(send, 403, f"origin {headers.get('origin')!r} is not allowed (--allow-origin)")
            return
        assert self.sdk is not None
        user = AuthenticatedUser(AccessToken(token="-", client_id=identity, scopes=[]))
        scope = {**scope, "user": user, IDENTITY_KEY: Owner(identity)}
        sid = headers.get(MCP_SESSION_ID_HEADER)
        status = await _forward(self.sdk.handle_request, scope, receive, send)
        if sid is not None and scope["method"] == "DELETE" and status is not None and status < 400:
            await self.consoles.end_session(sid)

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
                await self.consoles.aclose()


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
