"""The governed MCP connection (async core; the blocking twin wraps this, nothing else)."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, TypeVar

import anyio
import httpx2
import mcp_types
import pydantic
from mcp.client._probe import negotiate_auto
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError

from console_bridge._config import ServerSpec, StdioSpec, check_auth, load_server_spec
from console_bridge._confinement._plan import Supervision
from console_bridge._connection import _input as input_rounds
from console_bridge._connection._session_host import SessionHost, startup_error
from console_bridge._connection._startup import start_within
from console_bridge._connection._status import ConnectionStatus, Page, State
from console_bridge._connection._wire import (
    Kind,
    check_cursor,
    list_all,
    list_page,
    progress_callback,
    prompt_content,
    resource_content,
    wire,
)
from console_bridge._errors import (
    BridgeError,
    Busy,
    CallTimeout,
    ConnectionClosed,
    Desynchronized,
    LaunchRefused,
    NotAllowed,
    ServerError,
)
from console_bridge._governance._gate import Gate
from console_bridge._governance._policy import Policy
from console_bridge._handles import (
    NotCopyable,
    ToolHandle,
    capability_handles,
    check_prefix,
    tool_handles,
)
from console_bridge._identity import Owner, check_owner
from console_bridge._results import ToolResult
from console_bridge._transport._stdio import StdioChild

__all__ = ["AsyncMcpConnection", "ConnectionStatus", "Kind", "Page"]

T = TypeVar("T")


class AsyncMcpConnection(NotCopyable):
    """A governed client for one MCP server entry of an ``mcpServers`` config.

    Example::

        async with AsyncMcpConnection("mcp.json", "files", owner=Owner("agent-1"),
                                      tools=["read_file"]) as conn:
            result = await conn.call_tool("read_file", {"path": "README.md"})
            print(result.text)

    Guarantees: fixed allowlists (discovery never widens them), one active request at a time
    (a second raises :class:`Busy`, nothing sent), every request bounded by ``timeout`` (on expiry
    :class:`CallTimeout` and the connection is closed), a stdio child that gets only a short
    environment allowlist and never outlives the connection, the :class:`Policy` applied to every
    tool call. ``protocol="legacy"`` skips the 2026-07-28 probe (a server known to speak 2025 only).
    """

    def __init__(
        self,
        config: str | os.PathLike[str] | Mapping[str, Any],
        server: str,
        *,
        owner: Owner,
        tools: Sequence[str] = (),
        resources: Sequence[str] = (),
        prompts: Sequence[str] = (),
        policy: Policy | None = None,
        timeout: float = 60.0,
        startup_timeout: float = 60.0,
        shutdown_grace: float = 2.0,
        stderr_limit: int = 64 * 1024,
        supervision: Supervision | None = None,
        auth: httpx2.Auth | None = None,
        protocol: Literal["auto", "legacy"] = "auto",
    ) -> None:
        if not isinstance(owner, Owner):
            raise LaunchRefused("owner must be an Owner(agent_id, session_id=None) assigned by the host")
        if policy is not None and not isinstance(policy, Policy):
            raise LaunchRefused("policy must be a console_bridge.Policy or None")
        for label, value in (("timeout", timeout), ("startup_timeout", startup_timeout)):
            if not isinstance(value, int | float) or value <= 0:
                raise LaunchRefused(f"{label} must be a positive number of seconds, not {value!r}")
        if protocol not in ("auto", "legacy"):
            raise LaunchRefused(
                f"protocol must be 'auto' (2026-07-28, else the 2025 handshake) or 'legacy', not {protocol!r}"
            )
        self._spec: ServerSpec = load_server_spec(config, server)
        check_auth(auth, self._spec)
        self.server = server
        self.owner = owner
        self.timeout = float(timeout)
        self.startup_timeout = float(startup_timeout)
        self.shutdown_grace = float(shutdown_grace)
        self._state: State = "new"
        self._calls = 0
        self._last_error: str | None = None
        #: Every policy decision (allowlists, floor, pins, approval, caps, audit) is the gate's.
        self._gate = Gate(
            policy if policy is not None else Policy(),
            server,
            owner=lambda: self.owner,
            tools=tools,
            resources=resources,
            prompts=prompts,
            note_error=self._note_error,
            closed_error=self._closed_error,
        )
        self._close_error: ConnectionClosed | None = None
        self._host = SessionHost(
            self._spec,
            auth=auth,
            stderr_limit=stderr_limit,
            shutdown_grace=self.shutdown_grace,
            supervision=supervision,
            on_crash=self._record_crash,
            on_desync=self._on_desync,
            on_tools_changed=self._gate.tools_changed,
        )
        self._active_scope: anyio.CancelScope | None = None
        self._seen_cursors: dict[str, set[str]] = {}
        self._server_info: dict[str, Any] | None = None
        self._instructions: str | None = None
        self._negotiate = negotiate_auto if protocol == "auto" else ClientSession.initialize
        self._protocol: str | None = None  # the protocol version negotiated (2026-07-28, or a 2025 handshake one)

    @property
    def policy(self) -> Policy:
        """The :class:`Policy` every call of this connection is held to."""
        return self._gate.policy

    def __repr__(self) -> str:
        return f"<{type(self).__name__} server={self.server!r} state={self._state} owner={self.owner!s}>"

    # --------------------------------------------------------------- lifecycle
    async def __aenter__(self) -> AsyncMcpConnection:
        await self.connect()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def connect(self) -> None:
        """Start (or reach) the server, initialize, and verify the tool allowlist.

        Raises :class:`LaunchRefused` when the command cannot be started,
        :class:`CallTimeout` past ``startup_timeout``, :class:`VerificationFailed`
        when an allowlisted tool is missing, :class:`ConnectionClosed` when the
        connection was already closed (a closed connection cannot be reopened).
        """
        check_owner(self.owner, f"connection to {self.server!r}")
        if self._state != "new":
            if self._state == "closed":
                raise self._closed_error("connect()")
            return
        self._state = "connecting"
        self._gate.audit("lifecycle", action="connect_start")
        await start_within(
            self._host,
            server=self.server,
            startup_timeout=self.startup_timeout,
            handshake=self._handshake,
            finish=self._finish,
            translate=self._translate_startup,
            context=self._context,
        )
        self._state = "idle"
        self._gate.audit(
            "lifecycle", action="connect", pid=self.pid, server_info=self._server_info, protocol=self._protocol
        )

    async def close(self) -> None:
        """Close cleanly (stdin closed, bounded wait, then the tree is killed). Idempotent.

        An active call fails with :class:`ConnectionClosed`; every later use raises it.
        """
        with anyio.CancelScope(shield=True):
            await self._finish(ConnectionClosed(f"connection to {self.server!r} was closed by close()"))

    async def cancel(self) -> None:
        """Kill the server's process tree at once and fail any active call. Idempotent."""
        if self._child is not None:
            self._child.kill_now()
        with anyio.CancelScope(shield=True):
            await self._finish(ConnectionClosed(f"connection to {self.server!r} was cancelled"), action="cancel")

    @property
    def pid(self) -> int | None:
        return self._child.server_pid if self._child is not None else None

    @property
    def supervisor_pid(self) -> int | None:
        """The pid of the supervisor process that owns the stdio server's tree (None over HTTP)."""
        return self._child.pid if self._child is not None else None

    @property
    def closed(self) -> bool:
        return self._state == "closed"

    def status(self) -> ConnectionStatus:
        """Local state only: nothing is sent to the server."""
        return ConnectionStatus(
            state=self._state,
            server=self.server,
            pid=self.pid,
            owner=self.owner,
            tools=self._gate.tools,
            resources=self._gate.resources,
            prompts=self._gate.prompts,
            server_info=self._server_info,
            calls=self._calls,
            last_error=self._last_error,
            stderr_tail=self._child.stderr.text() if self._child is not None else "",
            revoked=self._gate.revoked,
            transport="stdio" if isinstance(self._spec, StdioSpec) else "http",
            notices=self._gate.notices(),
            instructions=self._instructions,
            protocol_version=self._protocol,
        )

    # ---------------------------------------------------------------- the host
    @property
    def _child(self) -> StdioChild | None:
        return self._host.child

    @property
    def _session(self) -> ClientSession | None:
        return self._host.session

    def _record_crash(self, what: str) -> None:
        if self._close_error is None:
            self._close_error = ConnectionClosed(
                f"server {self.server!r} crashed: {what}; the connection is closed, create a new one "
                "(check the server's stderr below)",
                **self._context(),
            )
            self._last_error = str(self._close_error.message)
            self._gate.audit("lifecycle", action="crash", reason=what)
        self._interrupt_active()
        self._host.stop()

    def _on_desync(self, reason: str) -> None:
        if self._close_error is None:
            self._close_error = Desynchronized(
                f"server {self.server!r} broke the JSON-RPC stream ({reason}); the connection was closed so "
                "no reply can reach the wrong request. Create a new connection.",
                **self._context(),
            )
            self._last_error = self._close_error.message
            self._gate.audit("lifecycle", action="desynchronized", reason=reason)
        self._interrupt_active()
        self._host.stop()

    def _interrupt_active(self) -> None:
        if self._active_scope is not None:
            self._active_scope.cancel()

    async def _finish(self, error: ConnectionClosed | None, action: str = "close") -> None:
        """Stop the host (idempotent) and mark the connection closed with ``error``."""
        already = self._state == "closed"
        if self._close_error is None and error is not None:
            self._close_error = error
        if self._close_error is None:
            self._close_error = ConnectionClosed(f"connection to {self.server!r} is closed")
        self._state = "closed"
        self._interrupt_active()
        self._host.stop()
        # Shielded: a caller cancelled mid-close must not lose the stop (or its audit record).
        with anyio.CancelScope(shield=True):
            await self._host.wait_stopped()
        if not already:
            self._gate.audit("lifecycle", action=action, reason=self._close_error.message)

    def _context(self) -> dict[str, Any]:
        child = self._child
        return {
            "server": self.server,
            "pid": child.server_pid if child is not None else None,
            "stderr_tail": child.stderr.text()[-4000:] if child is not None else None,
        }

    def _closed_error(self, what: str) -> ConnectionClosed:
        base = self._close_error or ConnectionClosed(f"connection to {self.server!r} is closed")
        error = type(base)(f"{what}: {base.message}", **self._context())
        return error

    def _translate_startup(self, exc: BaseException) -> BridgeError:
        error = startup_error(exc, self._spec, self._context())
        if error is not None:
            return error
        if self._close_error is not None:
            return self._closed_error("startup")
        return ConnectionClosed(
            f"server {self.server!r} failed during startup ({type(exc).__name__}: {exc}); it was stopped",
            **self._context(),
        )

    # --------------------------------------------------------------- requests
    def _require_session(self, what: str) -> ClientSession:
        check_owner(self.owner, f"connection to {self.server!r}")
        if self._state == "closed" or self._close_error is not None:
            raise self._closed_error(what)
        if self._state == "new":
            raise ConnectionClosed(f"{what}: connection to {self.server!r} is not connected; call connect() first")
        session = self._session
        if session is None:
            raise self._closed_error(what)
        return session

    async def _request(
        self,
        what: str,
        operation: Callable[[ClientSession], Awaitable[T]],
        *,
        timeout: float | None = None,
        hold: bool = True,
    ) -> T:
        """Run one server request under the busy slot and its deadline.

        Translates every lower-level failure: a passed deadline closes the connection
        (:class:`CallTimeout`); a malformed reply closes it (:class:`Desynchronized`);
        an MCP error response becomes :class:`ServerError`.
        """
        session = self._require_session(what)
        if hold:
            if self._state == "busy":
                self._gate.audit("refusal", target=what, reason="busy")
                raise self._busy(what)
            self._state = "busy"
        deadline = self.timeout if timeout is None else timeout
        scope = anyio.CancelScope()
        self._active_scope = scope
        try:
            with scope:
                with anyio.move_on_after(deadline) as timer:
                    try:
                        return await operation(session)
                    except MCPError as exc:
                        if self._close_error is not None:  # the crash was seen first by the watcher
                            with anyio.CancelScope(shield=True):
                                await self._finish(None)
                            raise self._closed_error(what) from None
                        if exc.code == mcp_types.CONNECTION_CLOSED:
                            await self._settle_crash(what)
                            raise self._closed_error(what) from None
                        refusal = self._host.take_auth_refusal()
                        if refusal is not None:
                            raise ServerError(f"{what}: {refusal}", code=exc.code, server=self.server) from None
                        raise ServerError(
                            f"{what}: server {self.server!r} answered with an error: {exc.message}",
                            code=exc.code,
                            server=self.server,
                        ) from None
                    except pydantic.ValidationError as exc:
                        self._on_desync(f"the reply to {what} has the wrong shape: {exc}")
                        with anyio.CancelScope(shield=True):
                            await self._finish(None)
                        raise self._closed_error(what) from None
                if timer.cancelled_caught:
                    error = CallTimeout(
                        f"{what} on server {self.server!r} passed its {deadline:g}s deadline; the connection "
                        "was closed and its processes stopped. Raise timeout= or make the call cheaper.",
                        **self._context(),
                    )
                    self._last_error = error.message
                    with anyio.CancelScope(shield=True):
                        await self._finish(error, action="timeout")
                    raise error
            # Our scope was cancelled from outside: close, cancel, crash or desync.
            with anyio.CancelScope(shield=True):
                await self._settle_crash(what)
            raise self._closed_error(what)
        finally:
            self._active_scope = None
            if hold and self._state == "busy":
                self._state = "idle"

    def _busy(self, what: str) -> Busy:
        return Busy(
            f"{what}: another call is active on the connection to {self.server!r}; nothing was sent. "
            "Wait for it to finish, or use a second connection.",
            server=self.server,
        )

    async def _settle_crash(self, what: str) -> None:
        """After a failed request: wait briefly for the child's exit status, then close."""
        child = self._child
        if child is not None:
            with anyio.move_on_after(min(1.0, self.shutdown_grace)):
                while child.returncode is None and self._close_error is None:
                    await anyio.sleep(0.01)
            if self._close_error is None:
                status = child.returncode
                self._record_crash(
                    f"the server process exited with status {status}"
                    if status is not None
                    else "the server closed its output"
                )
        elif self._close_error is None:
            self._record_crash(f"the transport closed during {what}")
        await self._finish(None)

    async def _handshake(self, session: ClientSession) -> None:
        remaining = self.startup_timeout

        # "auto": 2026-07-28 by server/discover where the server offers it, else the 2025 handshake (the SDK's)
        await self._request("initialize", self._negotiate, timeout=remaining, hold=False)
        self._server_info = wire(session.server_info) if session.server_info is not None else None
        self._instructions = session.instructions if isinstance(session.instructions, str) else None
        self._protocol = session.protocol_version
        if not self._gate.tools:
            return

        listing = await self._request(
            "tools/list", lambda s: list_all(s, "tools", self.server), timeout=remaining, hold=False
        )
        self._gate.admit(listing, self._context)

    # -------------------------------------------------------------- discovery
    async def discover(
        self,
        kind: Kind = "tools",
        cursor: str | None = None,
    ) -> Page:
        """One page of the server's listing. Authorizes nothing; the allowlists stay as built.

        A server that hands back a cursor it already gave in this walk raises
        :class:`ServerError`. Items are the server's own (unsanitized) definitions.
        """
        if kind not in ("tools", "resources", "resource_templates", "prompts"):
            raise NotAllowed(
                f"discover(kind={kind!r}): kind must be 'tools', 'resources', 'resource_templates' or 'prompts'"
            )
        if cursor is not None and not isinstance(cursor, str):
            raise NotAllowed("discover(cursor=...): the cursor must be the opaque string a previous page returned")

        items, next_cursor = await self._request(f"{kind}/list", lambda s: list_page(s, kind, cursor))
        check_cursor(self._seen_cursors.setdefault(kind, set()), kind, cursor, next_cursor, self.server)
        self._gate.audit("discover", kind=kind, count=len(items))
        return Page(items=items, next_cursor=next_cursor, server=self.server, cursor=cursor, kind=kind)

    # -------------------------------------------------- resources and prompts
    async def read_resource(self, uri: str) -> ToolResult:
        """Read an allowlisted resource (exact URI), else :class:`NotAllowed` without contacting the server."""
        self._require_session(f"resource {uri!r}")  # owner and closed checks come before the allowlist
        self._gate.allow_resource(uri)
        started = time.monotonic()
        result = await self._request(f"resources/read {uri}", lambda s: input_rounds.read_resource(s, self._gate, uri))
        return self._gate.finish_result(resource_content(result), None, f"resource:{uri}", {"uri": uri}, started)

    async def get_prompt(self, name: str, arguments: Mapping[str, str] | None = None) -> ToolResult:
        """Get an allowlisted prompt (exact name), else :class:`NotAllowed` without contacting the server."""
        self._require_session(f"prompt {name!r}")  # owner and closed checks come before the allowlist
        self._gate.allow_prompt(name)
        args = {str(k): str(v) for k, v in (arguments or {}).items()}
        started = time.monotonic()
        result = await self._request(
            f"prompts/get {name}", lambda s: input_rounds.get_prompt(s, self._gate, name, args)
        )
        return self._gate.finish_result(prompt_content(result), None, f"prompt:{name}", args, started)

    # ------------------------------------------------------------------ tools
    async def _verify_pins(self, session: ClientSession, name: str) -> None:
        """Re-list the tools and let the gate compare every pin. Raises :class:`SchemaDrift` for ``name``."""
        try:
            with anyio.fail_after(self.timeout):
                listing = await list_all(session, "tools", self.server)
        except (TimeoutError, MCPError, ServerError) as exc:
            if isinstance(exc, MCPError) and exc.code == mcp_types.CONNECTION_CLOSED:
                raise  # the server is gone, not drifted: _request reports the crash
            if self._close_error is not None:
                raise self._closed_error(f"tool {name!r}") from None
            why = "timed out" if isinstance(exc, TimeoutError) else f"failed ({exc})"
            raise self._gate.relisting_failed(name, why) from None
        self._gate.check_pins(listing, name)

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        on_progress: Callable[[float, float | None, str | None], Any] | None = None,
    ) -> ToolResult:
        """Call an allowlisted, exposed tool under the policy.

        With ``on_progress`` the request carries a ``progressToken`` and each progress
        notification of the server calls ``on_progress(progress, total, message)`` (a
        plain or async callable; an exception in it is ignored, the call goes on).

        Raises :class:`NotAllowed` (allowlist, read-only floor), :class:`ApprovalDenied`,
        :class:`SchemaDrift`, :class:`Busy`, :class:`ServerError` (error response or
        tool error result, or structured output violating the tool's output schema),
        :class:`CallTimeout` and :class:`ConnectionClosed`.
        """
        self._require_session(f"tool {name!r}")
        if arguments is not None and not isinstance(arguments, Mapping):
            raise NotAllowed(f"tool {name!r}: arguments must be a JSON object (a dict), not {type(arguments).__name__}")
        args = dict(arguments or {})
        pinned = self._gate.authorize(name)
        if self._state == "busy":
            self._gate.refuse(f"tool {name!r}", "busy", tool=name)
            raise self._busy(f"tool {name!r}")
        self._state = "busy"
        call_id = self._gate.next_call_id()
        try:
            await self._gate.approve(pinned, args, call_id)
            return await self._call_authorized(name, args, call_id, on_progress)
        finally:
            if self._state == "busy":
                self._state = "idle"

    async def _call_authorized(
        self,
        name: str,
        args: dict[str, Any],
        call_id: str,
        on_progress: Callable[[float, float | None, str | None], Any] | None = None,
    ) -> ToolResult:
        started = time.monotonic()
        self._calls += 1
        self._gate.call_started(name, call_id, args)
        report = progress_callback(
            on_progress, lambda: self._note_error(f"tool {name!r}: the on_progress callback raised")
        )
        try:
            if self._gate.pins_due():
                # The re-listing bounds itself by `timeout`: a slow or failing re-list is SchemaDrift
                # (the tool is revoked, the connection stays open), not a CallTimeout.
                await self._request(
                    f"tool {name!r} (pin check)", lambda s: self._verify_pins(s, name), timeout=math.inf, hold=False
                )
            result = await self._request(
                f"tool {name!r}",
                lambda s: input_rounds.call_tool(s, self._gate, name, args, report, call_id),
                hold=False,
            )
        except BridgeError as exc:
            self._gate.call_failed(name, call_id, exc, started)
            raise
        content = [wire(block) for block in result.content]
        return self._gate.tool_result(
            name,
            args,
            content,
            result.structured_content,
            is_error=bool(result.is_error),
            started=started,
            call_id=call_id,
        )

    def tools(self, prefix: str | None = None) -> list[ToolHandle]:
        """Handles for the allowlisted tools the policy exposes (revoked ones left out).

        ``prefix`` names them ``<prefix>_<tool>`` so tools of several servers never collide.
        """
        self._require_session("tools()")
        check_prefix(prefix, optional=True)
        return tool_handles(self._gate.exposed_tools(), prefix, self.server, self.owner, self.call_tool)

    def capability_tools(self, prefix: str = "mcp") -> list[ToolHandle]:
        """Read-resource and get-prompt tools whose argument is an enum of the allowlist."""
        self._require_session("capability_tools()")
        check_prefix(prefix)
        return capability_handles(
            prefix,
            self.server,
            self.owner,
            resources=self._gate.resources,
            prompts=self._gate.prompts,
            read=lambda args: self.read_resource(str(args.get("uri", ""))),
            get=lambda args: self.get_prompt(str(args.get("name", "")), args.get("arguments")),
        )

    def _note_error(self, text: str) -> None:
        self._last_error = text
