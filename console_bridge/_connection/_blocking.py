"""``McpConnection``: the blocking twin of :class:`AsyncMcpConnection`, a thin portal."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import httpx2

from console_bridge._connection._async import AsyncMcpConnection, ConnectionStatus, Kind, Page
from console_bridge._governance._policy import Policy
from console_bridge._handles import NotCopyable, ToolHandle
from console_bridge._identity import Owner, check_owner
from console_bridge._portal import Portal
from console_bridge._results import ToolResult

__all__ = ["McpConnection"]


class McpConnection(NotCopyable):
    """Blocking twin of :class:`AsyncMcpConnection` (same arguments, same methods, blocking).

    Works in scripts, inside a running event loop (Jupyter) and from several threads
    (one object per thread). Example::

        with McpConnection("mcp.json", "files", owner=Owner("agent-1"), tools=["read_file"]) as conn:
            print(conn.call_tool("read_file", {"path": "README.md"}).text)
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
        auth: httpx2.Auth | None = None,
        protocol: Literal["auto", "legacy"] = "auto",
    ) -> None:
        self._portal = Portal(self, f"McpConnection to {server!r}")
        try:
            self._async: AsyncMcpConnection = self._portal.run_sync(
                lambda: AsyncMcpConnection(
                    config,
                    server,
                    owner=owner,
                    tools=tools,
                    resources=resources,
                    prompts=prompts,
                    policy=policy,
                    timeout=timeout,
                    startup_timeout=startup_timeout,
                    shutdown_grace=shutdown_grace,
                    stderr_limit=stderr_limit,
                    auth=auth,
                    protocol=protocol,
                )
            )
        except BaseException:
            self._portal.stop()
            raise
        self._portal.set_closer(self._async.close)

    def __repr__(self) -> str:
        return repr(self._async).replace("AsyncMcpConnection", "McpConnection")

    def __enter__(self) -> McpConnection:
        self.connect()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def server(self) -> str:
        return self._async.server

    @property
    def owner(self) -> Owner:
        return self._async.owner

    @property
    def pid(self) -> int | None:
        return self._async.pid

    def _check(self) -> None:
        check_owner(self._async.owner, f"connection to {self._async.server!r}")

    def connect(self) -> None:
        """Blocking :meth:`AsyncMcpConnection.connect`: start, initialize, verify the tool allowlist."""
        self._check()
        self._portal.call(self._async.connect)

    def close(self) -> None:
        """Close cleanly and stop the loop thread. Idempotent."""
        self._portal.stop()

    def cancel(self) -> None:
        """Kill the server's tree at once. Idempotent."""
        self._portal.cancel(self._async.cancel)

    def status(self) -> ConnectionStatus:
        """Local state only: nothing is sent to the server."""
        return self._async.status()

    def discover(self, kind: Kind = "tools", cursor: str | None = None) -> Page:
        """One page of the server's listing; authorizes nothing (see :meth:`AsyncMcpConnection.discover`)."""
        self._check()
        return self._portal.call(self._async.discover, kind, cursor)

    def read_resource(self, uri: str) -> ToolResult:
        """Read an allowlisted resource (exact URI), else :class:`NotAllowed` without contacting the server."""
        self._check()
        return self._portal.call(self._async.read_resource, uri)

    def get_prompt(self, name: str, arguments: Mapping[str, str] | None = None) -> ToolResult:
        """Get an allowlisted prompt (exact name), else :class:`NotAllowed` without contacting the server."""
        self._check()
        return self._portal.call(self._async.get_prompt, name, arguments)

    def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        on_progress: Callable[[float, float | None, str | None], Any] | None = None,
    ) -> ToolResult:
        """Blocking :meth:`AsyncMcpConnection.call_tool`: same policy, same errors.

        ``on_progress`` is called on the connection's loop thread."""
        self._check()
        return self._portal.call(lambda: self._async.call_tool(name, arguments, on_progress=on_progress))

    def tools(self, prefix: str | None = None) -> list[ToolHandle]:
        """Handles for the exposed allowlisted tools; call them with ``handle.call(arguments)``."""
        self._check()
        return [self._portal.blocking_handle(h) for h in self._async.tools(prefix)]

    def capability_tools(self, prefix: str = "mcp") -> list[ToolHandle]:
        """Read-resource and get-prompt handles whose argument is an enum of the allowlist."""
        self._check()
        return [self._portal.blocking_handle(h) for h in self._async.capability_tools(prefix)]
