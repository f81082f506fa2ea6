"""What a connection reports without server traffic: its status snapshot and discovery pages."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from console_bridge._identity import Owner

__all__ = ["ConnectionStatus", "Page", "State"]

State = Literal["new", "connecting", "idle", "busy", "closed"]


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a discovery listing. Authorizes nothing."""

    items: list[dict[str, Any]]
    next_cursor: str | None
    server: str
    cursor: str | None = None
    kind: str = "tools"


@dataclass(frozen=True, slots=True)
class ConnectionStatus:
    """A snapshot of local state (no server traffic)."""

    state: State
    server: str
    pid: int | None
    owner: Owner
    tools: tuple[str, ...]
    resources: tuple[str, ...]
    prompts: tuple[str, ...]
    server_info: dict[str, Any] | None
    calls: int
    last_error: str | None
    stderr_tail: str
    revoked: dict[str, str] = field(default_factory=dict)
    transport: str = "stdio"
    notices: tuple[str, ...] = ()
    instructions: str | None = None  # the server's initialize instructions (untrusted text)
    #: the protocol version negotiated: "2026-07-28" (``server/discover``) or a 2025 handshake version
    protocol_version: str | None = None
