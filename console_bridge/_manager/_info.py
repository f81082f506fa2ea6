"""What a session manager reports, and the decisions it takes that need no I/O (pure)."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Literal

from console_bridge._errors import LaunchRefused
from console_bridge._identity import Owner

__all__ = [
    "CullWords",
    "LatencySummary",
    "ManagerStats",
    "SessionInfo",
    "SessionState",
    "count_option",
    "cull_reason",
    "percentile",
    "refill_count",
    "seconds_option",
]

#: ``starting`` (launching, not yet handed out or ready), ``warm`` (started, verified, booted,
#: waiting for a claim), ``in_use`` (handed out), ``closing`` (released, culled or discarded).
SessionState = Literal["starting", "warm", "in_use", "closing"]


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """One session of a manager (local state only; nothing is sent to the server).

    ``owner`` is None until the session is handed out; ``last_used`` is when a call was
    last seen (at the manager's ``check_interval`` granularity); ``cells`` counts the
    owner's calls (the warm-up cell is not one of them).
    """

    id: str
    owner: Owner | None
    state: SessionState
    created: datetime
    last_used: datetime | None
    cells: int
    pid: int | None
    recording: Path | None
    name: str | None = None


@dataclass(frozen=True, slots=True)
class LatencySummary:
    """Claim latencies (claim start to hand-over) of the most recent claims, in milliseconds."""

    count: int
    p50_ms: float | None
    p99_ms: float | None


@dataclass(frozen=True, slots=True)
class ManagerStats:
    """Counters and claim latencies of a session manager.

    ``warm``: ready sessions; ``starting``: sessions being launched (warm-ups and cold
    claims); ``in_use``: handed-out sessions; ``waiting``: claims queued for capacity;
    ``started``: sessions that started successfully; ``culled``: closed for idleness or
    lifetime; ``failed``: warm-up launches that failed (``last_failure`` says why);
    ``discarded``: warm sessions found dead and replaced; ``closed``: sessions closed
    for any reason. ``warm_hits``/``misses``: latency of claims served from the pool /
    by a cold start.
    """

    warm: int
    starting: int
    in_use: int
    waiting: int
    started: int
    culled: int
    failed: int
    discarded: int
    closed: int
    warm_hits: LatencySummary
    misses: LatencySummary
    last_failure: str | None


def percentile(values: Iterable[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100, nearest rank) of ``values``; None when there are none."""
    ordered = sorted(values)
    if not ordered:
        return None
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def summarize(samples: deque[float]) -> LatencySummary:
    p50, p99 = percentile(samples, 50), percentile(samples, 99)
    return LatencySummary(
        count=len(samples),
        p50_ms=None if p50 is None else round(p50 * 1000, 3),
        p99_ms=None if p99 is None else round(p99 * 1000, 3),
    )


def refill_count(*, target: int, warm: int, live: int, max_sessions: int, waiting: int, backing_off: bool) -> int:
    """How many warm sessions to start now.

    ``warm`` counts ready and warming sessions, ``live`` every session holding a slot.
    Waiting claims come first (a freed slot goes to them, not to the pool), a failed
    warm-up backs off, and the pool never pushes ``live`` past ``max_sessions``.
    """
    if waiting or backing_off:
        return 0
    return max(0, min(target - warm, max_sessions - live))


@dataclass(frozen=True)
class CullWords:
    """How a culled session's close reason reads (``{:g}`` is the limit in seconds): the manager's
    words by default; ``serve`` names its command-line options instead."""

    lifetime: str = "closed by the session manager after reaching max_lifetime={:g} s"
    idle: str = "closed by the session manager after {:g} s idle"


def cull_reason(
    *,
    now: float,
    created: float,
    last_used: float,
    idle_timeout: float | None,
    max_lifetime: float | None,
    busy: bool = False,
    words: CullWords = CullWords(),
) -> str | None:
    """Why a session must be closed now (monotonic seconds), or None to keep it: the one rule of the
    manager's culling and of ``serve``'s consoles. A ``busy`` session (a cell running) is never idle."""
    if max_lifetime is not None and now - created >= max_lifetime:
        return words.lifetime.format(max_lifetime)
    if idle_timeout is not None and not busy and now - last_used >= idle_timeout:
        return words.idle.format(idle_timeout)
    return None


def count_option(label: str, value: object, low: int) -> int:
    """A manager option that counts something: an int of at least ``low``, else :class:`LaunchRefused`."""
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise LaunchRefused(f"{label} must be an integer >= {low}, not {value!r}")
    return value


def seconds_option(label: str, value: object, optional: bool = False) -> float | None:
    """A manager option in seconds: positive and finite (or None when ``optional``), else :class:`LaunchRefused`."""
    if value is None and optional:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool) or not 0 < value < float("inf"):
        raise LaunchRefused(f"{label} must be a positive, finite number of seconds, not {value!r}")
    return float(value)
