"""The manager's periodic check: which sessions died, were closed by their owner, sat idle or grew too old.

Local state only (psutil and the console's own status): nothing is sent to a server. The
verdicts come one at a time, so that what the manager does with one (a discard frees a slot, a
waiting claim is handed a warm session) is what the check of the next one sees.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Literal

from console_bridge._manager._entry import Entry, calls_of, server_alive
from console_bridge._manager._info import cull_reason

__all__ = ["Verdict", "observe", "verdicts"]

#: ``dead``: a warm session whose server died (discard it); ``closed``: an in-use session closed by its
#: owner or its crashed server (free its slot); ``cull``: idle or over age (close it, saying why).
Verdict = tuple[Literal["dead", "closed", "cull"], Entry, str]


def observe(entry: Entry, now: float) -> None:
    """Note a call seen since the last look (or one still active) as the session's last use."""
    calls, busy = calls_of(entry.console)
    if busy or calls != entry.calls_seen:
        entry.calls_seen = calls
        entry.last_used = now
        entry.last_used_wall = datetime.now(UTC)


def verdicts(entries: Iterable[Entry], *, idle_timeout: float | None, max_lifetime: float | None) -> Iterator[Verdict]:
    """What must happen to each warm or in-use session now; a session to keep yields nothing."""
    now = time.monotonic()
    for entry in entries:
        if entry.state == "warm" and not server_alive(entry):
            yield "dead", entry, "its server had died"
            continue
        if entry.state == "in_use" and entry.console.status().state == "closed":
            # Closed by its owner directly (console.close()) or crashed: its slot frees.
            yield "closed", entry, "closed (by its owner, or its server stopped)"
            continue
        if entry.state == "in_use":
            observe(entry, now)
        elif entry.state != "warm":
            continue
        last = entry.last_used if entry.state == "in_use" else now
        why = cull_reason(
            now=now,
            created=entry.created,
            last_used=last,
            idle_timeout=idle_timeout,
            max_lifetime=max_lifetime,
        )
        if why is not None:
            yield "cull", entry, why
