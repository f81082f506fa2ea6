"""One pooled session as the manager tracks it, and one queued claim waiting for a session."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

import anyio
import psutil

from console_bridge._cells._recordings import Recording, Recordings, find_recording
from console_bridge._console._session import AsyncConsole
from console_bridge._errors import BridgeError, ConnectionClosed, NotAllowed
from console_bridge._identity import Owner
from console_bridge._manager._info import SessionState

__all__ = ["Entry", "Waiter", "calls_of", "drop_recording", "server_alive", "spare_recording"]


@dataclass(eq=False)
class Entry:
    """A session of the pool: its console, state, owner once handed out, and what the checks saw."""

    id: str
    console: AsyncConsole
    state: SessionState = "starting"
    owner: Owner | None = None
    name: str | None = None
    cold: bool = False
    created: float = field(default_factory=time.monotonic)
    created_wall: datetime = field(default_factory=lambda: datetime.now(UTC))
    last_used: float = 0.0
    last_used_wall: datetime | None = None
    calls_seen: int = 0
    calls_at_handover: int = 0
    server: psutil.Process | None = None  # the server as seen when it became warm (pid reuse is detected)
    folder: str | None = None  # the session's own empty workspace (workspace=None), removed after it closed


@dataclass(eq=False)
class Waiter:
    """A queued claim. The dispatcher grants it a ready entry or a slot for a cold start."""

    event: anyio.Event = field(default_factory=anyio.Event)
    entry: Entry | None = None
    slot: bool = False
    error: ConnectionClosed | None = None


def calls_of(console: AsyncConsole) -> tuple[int, bool]:
    """The console's call count and whether a call is active (local state only)."""
    conn = console.status().connection
    if conn is None:
        return 0, False
    return conn.calls, conn.state == "busy"


def server_alive(entry: Entry) -> bool:
    """Cheap local check: the console is open and its server process is the one that was started."""
    if entry.server is None or entry.console.status().state == "closed":
        return False
    try:
        # is_running() compares the creation time too, so a reused pid is not taken for the server.
        return entry.server.is_running() and entry.server.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def spare_recording(entry: Entry) -> Recording | None:
    """The recording of a warm session never handed out: the probe and the warm-up cell, nobody's work.
    Taken before the session closes (the recording is found by its server's pid, the connection's or,
    during a warm-up, the process the manager started)."""
    if entry.owner is not None or entry.cold:
        return None
    recording = entry.console.recording
    if recording is None and entry.server is not None:
        recording = find_recording(entry.console.recordings_base, entry.server.pid)
    return recording


async def drop_recording(recording: Recording | None, *, within: float = 2.0) -> None:
    """Delete a spare's recording once its server is gone, so that no orphan is listed (with no work in
    it) and left for ever: retention prunes by workspace. A live one is refused: it is tried again
    while its server ends (bounded by ``within`` seconds), then kept. Never raises."""
    if recording is None:
        return
    deadline = time.monotonic() + within
    while True:
        try:
            Recordings(recording.path.parent.parent).delete(recording.run_id)
            return
        except NotAllowed:  # (live: the closed server's process had not ended yet, seen under load)
            if time.monotonic() >= deadline:
                return
            await anyio.sleep(0.05)
        except (BridgeError, OSError):
            return
