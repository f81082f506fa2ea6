"""Fixtures for the adapter tests.

One real mcp-console session serves the whole package (owned by ``OWNER``); each test
that needs an approval gate gets its own governed connection to ``wellbehaved.py``.
Every model is an offline, scripted one: nothing here touches the network.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from console_bridge import (
    ApprovalRequest,
    AsyncConsole,
    AsyncMcpConnection,
    Owner,
    Policy,
    ToolHandle,
)
from tests.support.binaries import binary_for
from tests.support.places import server_entry

OWNER = Owner("analyst", session_id="adapters")
INTRUDER = Owner("intruder")
SIX_TIMES_SEVEN = {"python": "print(6 * 7)"}
RESTART = {"control": "restart"}


@pytest.fixture(scope="package")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="package")
async def console(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[AsyncConsole]:
    root = tmp_path_factory.mktemp("adapters")
    workspace, recordings = root / "ws", root / "recordings"
    workspace.mkdir()
    recordings.mkdir()
    async with AsyncConsole(workspace, command=binary_for("0.0.6"), recordings_dir=recordings, owner=OWNER) as c:
        yield c


@dataclass
class Gate:
    """The bridge's approval gate: answers with ``verdicts`` in order and records every request."""

    verdicts: list[bool] = field(default_factory=list)
    requests: list[ApprovalRequest] = field(default_factory=list)

    def __call__(self, request: ApprovalRequest) -> bool:
        self.requests.append(request)
        return self.verdicts.pop(0)


@dataclass
class Notes:
    conn: AsyncMcpConnection
    gate: Gate
    log: Path


@pytest.fixture(scope="package")
async def notes_server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Notes]:
    log = tmp_path_factory.mktemp("notes") / "notes.log"
    gate = Gate()
    config = {"mcpServers": {"notes": server_entry("wellbehaved.py", "--log", str(log))}}
    policy = Policy(mode="read_write", approve=gate)
    async with AsyncMcpConnection(config, "notes", owner=OWNER, tools=["write_note", "image"], policy=policy) as conn:
        yield Notes(conn, gate, log)


@pytest.fixture
def gate(notes_server: Notes) -> Gate:
    """The notes connection's gate, set to deny the first request and approve the second."""
    notes_server.gate.verdicts[:] = [False, True]
    notes_server.gate.requests.clear()
    return notes_server.gate


@pytest.fixture
def notes(notes_server: Notes, gate: Gate) -> AsyncMcpConnection:
    """``write_note`` (write-like: every call asks ``gate``) and ``image`` (read-only, a tiny PNG)."""
    return notes_server.conn


@pytest.fixture
def notes_calls(notes_server: Notes) -> Callable[[], list[str]]:
    """The tools the notes server was asked to run since the test started, in order."""
    before = len(server_calls(notes_server.log))
    return lambda: server_calls(notes_server.log)[before:]


@pytest.fixture(scope="package")
async def closed_handles() -> list[ToolHandle]:
    """Handles of a connection that has been closed since: every call raises ConnectionClosed."""
    config = {"mcpServers": {"notes": server_entry("wellbehaved.py")}}
    conn = AsyncMcpConnection(config, "notes", owner=OWNER, tools=["echo"])
    await conn.connect()
    handles = conn.tools()
    await conn.close()
    return handles


def server_calls(log: Path) -> list[str]:
    """The tools the server was asked to run, in order (from its ``--log``)."""
    if not log.exists():
        return []
    return [line.split()[1] for line in log.read_text().splitlines() if line.startswith("tools/call ")]
