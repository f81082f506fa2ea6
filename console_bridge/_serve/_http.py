"""Streamable HTTP for ``console-bridge serve``: a gate in front of the MCP SDK's session manager.

Every request passes the gate first: the path (``/mcp``), the bearer token (401; it names the
client's identity, see ``_identity``) and the ``Origin`` (403, against DNS rebinding).
Nothing is claimed here: the SDK serves both protocol eras on the one endpoint (the 2025
``initialize`` handshake with ``Mcp-Session-Id``, and 2026-07-28's self-contained requests),
the identity rides on the request (``scope["user"]``, so the SDK refuses an MCP session to any
other identity), and consoles are claimed on first use by ``Consoles``. A ``DELETE`` of an MCP
session closes that session's own console. A POST's body is read (bounded) and checked first
(:func:`opening_refusal` for one without ``Mcp-Session-Id``: 406 for an ``Accept`` without JSON
and SSE, 415 for a body that is not ``application/json``, 400 for one that is not JSON-RPC, however
malformed: bad UTF-8, nesting 10^5 deep, not an object), so no malformed request gets a 500 or a
traceback. SSE streams are resumable (``_events``: a priming event, ``retry``, ``Last-Event-ID``).
A ``send`` within an MCP session that asks for no progress is answered as one JSON body instead
(:func:`plain_reply`; the transport allows either for any request, and every client must take
both): no stream, event store or priming event for the hot request, one write less each way.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import pydantic_core
from mcp.server import Server, ServerRequestContext
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER, StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import MCP_PARAM_HEADER_PREFIX
from mcp_types import INTERNAL_ERROR, jsonrpc_message_adapter
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.types import Message, Receive, Scope, Send

from console_bridge import Owner
from console_bridge._serve._consoles import Consoles
from console_bridge._serve._contract import CONSOLE_ID_HEADER
from console_bridge._serve._events import BoundedEventStore
from console_bridge._serve._identity import Identities
from console_bridge._serve._mcp import Caller

__all__ = [
    "LOOPBACK_HOSTS",
    "HttpGate",
    "HttpGateOptions",
    "host_allowed",
    "opening_refusal",
    "origin_allowed",
    "plain_reply",
]

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


_NO_BATCH = (
    "Invalid Request: JSON-RPC batches are not part of MCP (removed in 2025-06-18); send one message per request"
)


def body_refusal(body: bytes) -> tuple[int, str] | None:
    """A request body within a session that is not JSON at all (400), checked with bounded recursion,
    or a batch."""
    try:
        message = pydantic_core.from_json(body)
    except (ValueError, RecursionError) as exc:
        return 400, f"Parse error: the body is not JSON ({str(exc)[:200]})"
    if isinstance(message, list):
        return 400, _NO_BATCH
    return None


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
    if isinstance(message, list):
        return 400, _NO_BATCH
    if not isinstance(message, dict) or message.get("method") != "initialize":
        return None  # not an opening of a session: the SDK answers it (and claims nothing)
    try:
        jsonrpc_message_adapter.validate_python(message, by_name=False)
    except (ValueError, RecursionError):
        return 400, "Invalid Request: the initialize message is not a valid JSON-RPC request"
    if "id" not in message:
        return 400, "Invalid Request: initialize must be a request (with an id)"
    return None


def plain_reply(headers: dict[str, str], body: bytes, tool: str | None) -> bool:
    """Whether a POST within an MCP session is answered as one JSON body rather than an SSE stream:
    a ``tools/call`` of ``tool`` (``send``) in the handshake era with no ``progressToken`` (progress
    needs the stream), from a client that accepts both (as it must; otherwise the SDK refuses it as
    before). Everything else, including a malformed body, keeps the SDK's stream."""
    if (
        tool is None
        or headers.get("mcp-protocol-version", HANDSHAKE_PROTOCOL_VERSIONS[0]) not in HANDSHAKE_PROTOCOL_VERSIONS
    ):
        return False
    accept = _media_types(headers.get("accept", ""))
    if not (accept & {"*/*", "application/*", "application/json"} and accept & {"*/*", "text/*", "text/event-stream"}):
        return False
    try:
        message = pydantic_core.from_json(body)
    except (ValueError, RecursionError):
        return False
    if not isinstance(message, dict) or message.get("method") != "tools/call" or "id" not in message:
        return False
    params = message.get("params")
    if not isinstance(params, dict) or params.get("name") != tool:
        return False
    meta = params.get("_meta")
    return meta is None or (isinstance(meta, dict) and "progressToken" not in meta)


#: Set by the gate, in the request's own task, for a request answered as one JSON body (plain_reply).
_PLAIN: contextvars.ContextVar[bool] = contextvars.ContextVar("console_bridge_plain_reply", default=False)


class _Transport(StreamableHTTPServerTransport):
    """The SDK's transport, choosing JSON or SSE per request: the SDK reads this flag while it
    handles the POST (in the request's task, where the gate set ``_PLAIN``); the session's message
    router reads it in the session's own task, where it is False, so no progress notification of a
    streamed request is ever dropped as if it were a JSON one. (A JSON body carries the first message
    routed to its request; a plain ``send`` has none before its response: no progressToken, and serve
    sends no logs or requests to clients.)"""

    @property
    def is_json_response_enabled(self) -> bool:
        return _PLAIN.get()

    @is_json_response_enabled.setter
    def is_json_response_enabled(self, value: bool) -> None:
        pass  # the SDK's constructor sets it; the choice is per request


IDENTITY_KEY = "console_bridge.identity"  # the ASGI scope key the gate puts the caller's identity under


@dataclass(frozen=True, slots=True)
class HttpGateOptions:
    path: str = "/mcp"
    allowed_origins: tuple[str, ...] = ()
    max_body_bytes: int = 16 * 1024 * 1024  # a larger request body is refused (413) by the SDK
    #: the ``Host`` names requests may carry besides loopback ones (a reverse proxy's); None: any (a server
    #: listening beyond loopback, given no --allow-host)
    allowed_hosts: tuple[str, ...] | None = ()


def host_allowed(host: str | None, allowed: tuple[str, ...] | None) -> bool:
    """DNS rebinding: a server on loopback answers only requests addressed to a loopback name (or one
    ``--allow-host`` names); a page of another site whose name was re-pointed at 127.0.0.1 is refused."""
    if allowed is None:
        return True
    name = (host or "").strip().lower()
    if name.startswith("["):
        name = name[1 : name.find("]")] if "]" in name else name
    elif name.count(":") == 1:
        name = name.partition(":")[0]
    return name in LOOPBACK_HOSTS or name in {a.lower() for a in allowed}


@dataclass(eq=False)
class HttpGate:
    """The ASGI application: checks and identifies; the SDK serves the MCP traffic."""

    consoles: Consoles
    identities: Identities
    options: HttpGateOptions = field(default_factory=HttpGateOptions)
    sdk: StreamableHTTPSessionManager | None = None
    server: Server[Any] | None = None
    plain_tool: str | None = None  # the tool whose calls may be answered as one JSON body (plain_reply)

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
        header = request.headers.get(f"{MCP_PARAM_HEADER_PREFIX}{CONSOLE_ID_HEADER}")
        return Caller(identity=identity, session=session, console_header=header)

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
        origin = headers.get("origin")
        if origin is not None and origin_allowed(origin, self.options.allowed_origins):
            if scope["method"] == "OPTIONS":  # a browser's preflight carries no credentials: answered here
                await _preflight(send, origin, headers.get("access-control-request-headers"))
                return
            send = _with_cors(send, origin)
        if not host_allowed(headers.get("host"), self.options.allowed_hosts):
            await _respond(
                send,
                421,
                f"Host {headers.get('host', '')!r} is not this server's (DNS rebinding protection); behind a reverse "
                "proxy, name it with --allow-host",
            )
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
        if scope["method"] == "POST":
            body, messages = await _read_body(receive, self.options.max_body_bytes)
            if body is None:
                await _respond(send, 413, f"request body over {self.options.max_body_bytes} bytes")
                return
            refusal = opening_refusal(headers, body) if sid is None else body_refusal(body)
            if refusal is None and sid is None:
                refusal = self._over_share(identity)
            if refusal is not None:  # before the SDK sees it: malformed bodies are 4xx, never a 500
                await _respond(send, *refusal)
                return
            receive = _replay(messages, receive)
            if sid is not None and plain_reply(headers, body, self.plain_tool):
                plain = _PLAIN.set(True)
                try:
                    await _forward(self.sdk.handle_request, scope, receive, send)
                finally:
                    _PLAIN.reset(plain)
                return
        status = await _forward(self.sdk.handle_request, scope, receive, send)
        if sid is not None and scope["method"] == "DELETE" and status is not None and status < 400:
            await self.consoles.end_session(sid)

    def _over_share(self, identity: str) -> tuple[int, str] | None:
        """An opening request of an identity that holds its share of the MCP sessions: 503, saying so."""
        sdk = self.sdk
        if not isinstance(sdk, _Sessions):
            return None
        share, held = sdk.share(), sdk.open_by(identity)
        if share is None or held < share:
            return None
        return (
            503,
            f"identity {identity!r} holds {held} open MCP sessions, its share of the server's "
            f"{sdk.max_sessions} (split between {max(1, sdk.identities())} identities): end some "
            "(HTTP DELETE with their Mcp-Session-Id) or wait for the idle timeout; other identities are not affected",
        )

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


class _Sessions(StreamableHTTPSessionManager):
    """The SDK's session manager, with resumable SSE streams: each MCP session gets its own view of one
    bounded event store (stream ids repeat across sessions; the SDK would share one store), and each
    identity its share of the open MCP sessions (``share``): one client cannot lock the others out."""

    def __init__(
        self, server: Server[Any], events: BoundedEventStore, identities: Callable[[], int], **options: Any
    ) -> None:
        super().__init__(app=server, **options)
        self.events = events
        self.identities = identities  # how many identities the server accepts now (tokens reload)

    def share(self) -> int | None:
        """The MCP sessions one identity may hold open: the cap split evenly between the identities."""
        if self.max_sessions is None:
            return None
        return max(1, self.max_sessions // max(1, self.identities()))

    def open_by(self, identity: str) -> int:
        return sum(1 for owner in self._session_owners.values() if owner.get("client_id") == identity)

    def _admit_session(self, requestor: Any) -> StreamableHTTPServerTransport | None:
        share = self.share()
        identity = requestor.get("client_id") if isinstance(requestor, dict) else None
        if share is not None and identity is not None and self.open_by(identity) >= share:
            return None  # (the gate said why before; this holds under the SDK's lock)
        transport = super()._admit_session(requestor)
        if transport is not None and transport.mcp_session_id is not None:
            transport._event_store = self.events.session(transport.mcp_session_id)
            transport.__class__ = _Transport  # made by the SDK; the subclass only adds the per-request choice
        return transport


#: The reconnection delay an SSE stream suggests to its client (the ``retry`` field), milliseconds.
SSE_RETRY_MS = 1000


def make_sdk(
    server: Server[Any],
    *,
    idle_timeout: float | None,
    max_sessions: int,
    max_body_bytes: int,
    identities: Callable[[], int] = lambda: 1,
) -> StreamableHTTPSessionManager:
    """The SDK's session manager; the gate has checked origin and token (no SDK security settings)."""
    return _Sessions(
        server,
        BoundedEventStore(),
        identities,
        session_idle_timeout=idle_timeout,
        max_sessions=max_sessions,
        security_settings=None,
        max_request_body_size=max_body_bytes,
        retry_interval=SSE_RETRY_MS,
    )


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


#: What a browser client may send and read across origins (the MCP headers of both protocol eras: the
#: 2026 era's ``Mcp-Param-*`` too, so a preflight's own list is answered, filtered to these).
_CORS_REQUEST_HEADERS = ("authorization", "content-type", "accept", "last-event-id", "mcp-session-id")
_CORS_EXPOSED = "mcp-session-id, mcp-protocol-version, www-authenticate"


def _allowed_request_headers(requested: str | None) -> str:
    names = [name.strip().lower() for name in (requested or "").split(",") if name.strip()]
    kept = [name for name in names if name in _CORS_REQUEST_HEADERS or name.startswith("mcp-")]
    return ", ".join(dict.fromkeys([*_CORS_REQUEST_HEADERS, "mcp-protocol-version", *kept]))


async def _preflight(send: Send, origin: str, requested: str | None) -> None:
    """The CORS preflight of an allowed origin: 204 with what it may send (nothing of MCP is served)."""
    headers = [
        (b"access-control-allow-origin", origin.encode("latin-1")),
        (b"access-control-allow-methods", b"GET, POST, DELETE, OPTIONS"),
        (b"access-control-allow-headers", _allowed_request_headers(requested).encode("latin-1")),
        (b"access-control-max-age", b"600"),
        (b"vary", b"Origin"),
        (b"content-length", b"0"),
    ]
    await send({"type": "http.response.start", "status": 204, "headers": headers})
    await send({"type": "http.response.body", "body": b""})


def _with_cors(send: Send, origin: str) -> Send:
    """``send`` with the CORS headers of an allowed origin added to the response's start."""

    async def cors(message: Message) -> None:
        if message["type"] == "http.response.start":
            extra = [
                (b"access-control-allow-origin", origin.encode("latin-1")),
                (b"access-control-expose-headers", _CORS_EXPOSED.encode()),
                (b"vary", b"Origin"),
            ]
            message = {**message, "headers": [*message.get("headers", []), *extra]}
        await send(message)

    return cors


async def _respond(send: Send, status: int, message: str, extra: dict[str, str] | None = None) -> None:
    code = -32700 if message.startswith("Parse error") else -32600  # (JSON-RPC's codes: not JSON, not a request)
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.encode(), v.encode()) for k, v in (extra or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
