"""Plain helpers for the governance tests: configs, server logs, audit records."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from console_bridge import AsyncMcpConnection, Owner, Policy
from tests.support.places import server_entry

GOV_SERVERS = Path(__file__).resolve().parent / "servers"

OWNER = Owner("agent-x", session_id="sess-1")
OTHER = Owner("agent-y")
#: Small, explicit bounds for every connection a test opens.
TIMEOUT = 5.0
STARTUP_TIMEOUT = 20.0
SHUTDOWN_GRACE = 1.0


def config(script: str, *args: str, log: Path | None = None, name: str = "srv") -> dict[str, Any]:
    """An mcpServers config with one entry ``name`` running ``script`` (tests/servers or ./servers)."""
    extra = ("--log", str(log)) if log is not None else ()
    if (GOV_SERVERS / script).exists():
        entry: dict[str, Any] = {"command": sys.executable, "args": [str(GOV_SERVERS / script), *args, *extra]}
    else:
        entry = server_entry(script, *args, *extra)
    return {"mcpServers": {name: entry}}


def methods(log: Path) -> list[str]:
    """The lines a fixture server logged (``METHOD[ TARGET]``), oldest first."""
    return log.read_text(encoding="utf-8").splitlines() if log.exists() else []


def calls(log: Path) -> list[str]:
    """The tool names a fixture server was asked to call."""
    return [line.removeprefix("tools/call ") for line in methods(log) if line.startswith("tools/call")]


def records(path: Path, event: str | None = None, **match: Any) -> list[dict[str, Any]]:
    """Audit records of ``path`` (one JSON object per line), filtered by event and field values."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if event is not None and record["event"] != event:
            continue
        if all(record.get(key) == value for key, value in match.items()):
            out.append(record)
    return out


def only(items: list[dict[str, Any]]) -> dict[str, Any]:
    assert len(items) == 1, items
    return items[0]


@asynccontextmanager
async def connected(
    script: str,
    *args: str,
    tools: list[str],
    policy: Policy | None = None,
    log: Path | None = None,
    name: str = "srv",
    owner: Owner = OWNER,
    timeout: float = TIMEOUT,
    resources: tuple[str, ...] = (),
) -> AsyncIterator[AsyncMcpConnection]:
    conn = AsyncMcpConnection(
        config(script, *args, log=log, name=name),
        name,
        owner=owner,
        tools=tools,
        resources=resources,
        policy=policy,
        timeout=timeout,
        startup_timeout=STARTUP_TIMEOUT,
        shutdown_grace=SHUTDOWN_GRACE,
    )
    async with conn:
        yield conn
