"""The session host: one task that owns a connection's transport and MCP session from start to stop.

The transport is a stdio child (a supervised process tree, see ``_transport._stdio``)
or a Streamable HTTP client (with the caller's ``httpx2.Auth``, e.g. OAuth, if given);
between it and the MCP ``ClientSession`` sits the JSON-RPC :class:`Guard`. Everything
is entered and left in the one host task, so a stop always unwinds in the order it was
built. The host knows nothing of policy or of requests: it reports a crash, a desync
and ``tools/list_changed`` through the callbacks it was given, and the connection decides what they mean.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AsyncExitStack
from typing import Any

import anyio
import httpx2
import mcp_types
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from console_bridge._config import HttpSpec, ServerSpec, StdioSpec
from console_bridge._confinement._plan import Supervision
from console_bridge._errors import BridgeError, LaunchRefused, ServerError
from console_bridge._root_task import RootTask
from console_bridge._transport._guard import Guard
from console_bridge._transport._stdio import StdioChild, base_environment, open_stdio

__all__ = ["SessionHost", "startup_error"]

_CLIENT_INFO = mcp_types.Implementation(name="console-bridge", version="0.1.0")


class SessionHost:
    """Starts the transport and the session in a task of its own; :meth:`stop` unwinds them.

    ``ready`` is set once the session can be used or the start failed (then
    ``failure`` holds the exception); ``child`` is the stdio child (None over HTTP).
    """

    def __init__(
        self,
        spec: ServerSpec,
        *,
        auth: httpx2.Auth | None = None,
        stderr_limit: int,
        shutdown_grace: float,
        supervision: Supervision | None,
        on_crash: Callable[[str], None],
        on_desync: Callable[[str], None],
        on_tools_changed: Callable[[], None],
    ) -> None:
        self._spec = spec
        self._auth = auth
        self._refusal: tuple[int, str] | None = None
        self._stderr_limit = stderr_limit
        self._shutdown_grace = shutdown_grace
        self._supervision = supervision
        self._on_crash = on_crash
        self._on_desync = on_desync
        self._on_tools_changed = on_tools_changed
        self.child: StdioChild | None = None
        self.session: ClientSession | None = None
        self.ready = anyio.Event()
        self.failure: list[BaseException] = []
        self._root = RootTask(self._host)  # the connection outlives the task that connects it: see _root_task
        self._stop = anyio.Event()

    def start(self) -> None:
        """Start the host task (once); wait on ``ready``."""
        self._root.start()

    def stop(self) -> None:
        """Ask the host to unwind (idempotent); :meth:`wait_stopped` waits for it."""
        self._stop.set()

    async def wait_stopped(self) -> None:
        """Until the host task has unwound (at once when it never started)."""
        await self._root.wait()

    async def _host(self) -> None:
        ready = self.ready
        try:
            async with AsyncExitStack() as stack:
                read, write = await self._open_transport(stack)
                tg = await stack.enter_async_context(anyio.create_task_group())
                stack.callback(tg.cancel_scope.cancel)
                guard = Guard(on_violation=self._on_desync, on_tools_changed=self._on_tools_changed)
                session_read, session_write = guard.start(tg, read, write)
                stack.push_async_callback(guard.aclose)
                self.session = await stack.enter_async_context(
                    ClientSession(session_read, session_write, client_info=_CLIENT_INFO)
                )
                ready.set()
                await self._watch(self._stop)
        except BaseException as exc:
            if not ready.is_set():
                self.failure.append(exc)
            elif not isinstance(exc, anyio.get_cancelled_exc_class()):
                self._on_crash(f"transport failed: {type(exc).__name__}: {exc}")
        finally:
            self.session = None
            ready.set()

    async def _open_transport(self, stack: AsyncExitStack) -> tuple[Any, Any]:
        spec = self._spec
        if isinstance(spec, HttpSpec):
            client = await stack.enter_async_context(
                httpx2.AsyncClient(
                    headers=dict(spec.headers),
                    auth=self._auth,
                    timeout=httpx2.Timeout(30.0, read=300.0),
                    event_hooks={"response": [self._note_response]},
                )
            )
            read, write = await stack.enter_async_context(streamable_http_client(spec.url, http_client=client))
            return read, write
        env = base_environment() | dict(spec.env)
        self.child = await stack.enter_async_context(
            open_stdio(
                spec.command,
                spec.args,
                env=env,
                cwd=spec.cwd,
                stderr_limit=self._stderr_limit,
                shutdown_grace=self._shutdown_grace,
                supervised=self._supervision if self._supervision is not None else Supervision(),
            )
        )
        return self.child.read_stream, self.child.write_stream

    async def _note_response(self, response: httpx2.Response) -> None:
        """Remember an HTTP 401/403 from the MCP endpoint (the SDK reports it as a bare error); any
        later success forgets it (an ``auth`` flow's first 401 is followed by the authorized retry)."""
        if response.status_code in (401, 403) and isinstance(self._spec, HttpSpec):
            self._refusal = (response.status_code, response.headers.get("www-authenticate", ""))
        elif response.status_code < 400:
            self._refusal = None

    def take_auth_refusal(self) -> str | None:
        """What the last 401/403 of the server means to the caller (once), or None."""
        refusal, self._refusal = self._refusal, None
        if refusal is None:
            return None
        status, challenge = refusal
        said = f" (WWW-Authenticate: {challenge[:300]})" if challenge else ""
        if self._auth is None:
            fix = (
                "pass auth= (an httpx2.Auth, e.g. mcp.client.auth.OAuthClientProvider for an OAuth server) or "
                "an Authorization header in the entry's headers"
            )
        else:
            fix = "the auth= given did not obtain access: check its client registration, scopes and token storage"
        what = "requires authorization" if status == 401 else "refused access"
        return f"server {self._spec.name!r} {what} (HTTP {status}){said}; {fix}"

    async def _watch(self, stop: anyio.Event) -> None:
        """Wait for a stop request or, for a stdio child, its exit (a crash); nothing is polled."""
        child = self.child
        if child is None:
            await stop.wait()
            return
        async with anyio.create_task_group() as tg:

            async def stopped() -> None:
                await stop.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(stopped)
            await child.process.wait()
            tg.cancel_scope.cancel()
        if child.returncode is not None and not stop.is_set():
            self._on_crash(f"the server process exited with status {child.returncode}")


def startup_error(exc: BaseException, spec: ServerSpec, context: dict[str, Any]) -> BridgeError | None:
    """What a failed start means to the caller (``context``: server, pid, stderr tail), or None.

    A command that cannot be run is :class:`LaunchRefused`, a refused ``initialize``
    :class:`ServerError`; None for anything else (the connection reports its close).
    """
    server = context["server"]
    if isinstance(exc, BridgeError):
        return exc
    if isinstance(exc, OSError):
        command = spec.command if isinstance(spec, StdioSpec) else spec.url
        return LaunchRefused(
            f"server {server!r} could not be started ({command!r}: {exc.strerror or exc}); "
            "check that the command exists and is executable",
            server=server,
        )
    if isinstance(exc, MCPError):
        return ServerError(f"server {server!r} refused to initialize: {exc.message}", code=exc.code, **context)
    return None
