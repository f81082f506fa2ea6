"""The one bounded wait of the suite: poll a probe until it says done or a bound passes.

``until`` returns the probe's last value either way (a test asserts on it and names what was
left: processes still alive, files left behind); ``eventually`` raises ``AssertionError`` naming
what did not hold. Each has a blocking twin for tests that run no event loop. Performance is
never asserted through these: a bound is a ceiling for a slow machine, not a measurement.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import anyio

__all__ = ["eventually", "eventually_blocking", "until", "until_blocking"]

T = TypeVar("T")


def _done_when_truthy(value: object) -> bool:
    return bool(value)


async def until(
    probe: Callable[[], T], done: Callable[[T], bool] = _done_when_truthy, *, bound: float, every: float = 0.02
) -> T:
    """``probe()`` re-read every ``every`` seconds until ``done`` of it, for at most ``bound`` seconds;
    its last value."""
    deadline = time.monotonic() + bound
    while True:
        value = probe()
        if done(value) or time.monotonic() > deadline:
            return value
        await anyio.sleep(every)


def until_blocking(
    probe: Callable[[], T], done: Callable[[T], bool] = _done_when_truthy, *, bound: float, every: float = 0.02
) -> T:
    """:func:`until` without an event loop."""
    deadline = time.monotonic() + bound
    while True:
        value = probe()
        if done(value) or time.monotonic() > deadline:
            return value
        time.sleep(every)


async def eventually(
    condition: Callable[[], object], bound: float = 30.0, what: str = "condition", *, every: float = 0.02
) -> None:
    """Wait until ``condition()`` holds, for at most ``bound`` seconds, else fail naming ``what``."""
    if not await until(condition, bound=bound, every=every):
        raise AssertionError(f"{what} did not hold within {bound:g}s")


def eventually_blocking(
    condition: Callable[[], object], bound: float = 30.0, what: str = "condition", *, every: float = 0.02
) -> None:
    """:func:`eventually` without an event loop."""
    if not until_blocking(condition, bound=bound, every=every):
        raise AssertionError(f"{what} did not hold within {bound:g}s")
