"""What ``console.status()`` returns: a snapshot of the session (local state only)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from console_bridge._connection._async import ConnectionStatus
from console_bridge._console._usage import SessionUsage
from console_bridge._identity import Owner

__all__ = ["LANGUAGES", "SERVER", "ConsoleStatus"]

SERVER = "mcp-console"
#: The languages a console may offer (``languages=`` takes a selection).
LANGUAGES = ("python", "r", "sql")


@dataclass(frozen=True, slots=True)
class ConsoleStatus:
    """A snapshot of the session (local state only)."""

    connection: ConnectionStatus | None
    state: str
    version: str | None
    command: str | None
    workspace: Path
    profile: str
    sandbox: dict[str, Any] | None
    dependencies: str
    languages: tuple[str, ...]
    poll_window: float
    recording: Path | None
    pid: int | None = None
    tmpdir: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    limits: dict[str, dict[str, Any]] = field(default_factory=dict)
    session_id: str | None = None
    supervisor_pid: int | None = None
    deny_read: tuple[str, ...] = ()
    view: list[dict[str, Any]] = field(default_factory=list)
    host: str | None = None
    #: what the session used so far (see :class:`SessionUsage`); None before it started
    usage: SessionUsage | None = None
    #: who the session runs for (the console's ``owner``, or the one a session manager handed it to)
    owner: Owner = field(default_factory=lambda: Owner("host"))

    # The connection status's own fields, at the top level too (the contract's "connection status
    # plus ..."); before the server is started they read as for a connection that has made no call.
    @property
    def server(self) -> str:
        return self.connection.server if self.connection is not None else SERVER

    @property
    def tools(self) -> tuple[str, ...]:
        return self.connection.tools if self.connection is not None else ()

    @property
    def resources(self) -> tuple[str, ...]:
        return self.connection.resources if self.connection is not None else ()

    @property
    def prompts(self) -> tuple[str, ...]:
        return self.connection.prompts if self.connection is not None else ()

    @property
    def server_info(self) -> dict[str, Any] | None:
        return self.connection.server_info if self.connection is not None else None

    @property
    def calls(self) -> int:
        return self.connection.calls if self.connection is not None else 0

    @property
    def last_error(self) -> str | None:
        return self.connection.last_error if self.connection is not None else None

    @property
    def stderr_tail(self) -> str:
        return self.connection.stderr_tail if self.connection is not None else ""
