"""The watchdog thread: ends the run when a call overstays its bound (a shielded hang)."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable

from .bounds import WATCHDOG_SLACK


class Watchdog(threading.Thread):
    """Ends the run when a step overstays its bound by ``WATCHDOG_SLACK`` (a shielded hang)."""

    def __init__(self, on_fire: Callable[[str, float], None]) -> None:
        super().__init__(name="chaos-watchdog", daemon=True)
        self._lock = threading.Lock()
        self._armed: dict[int, tuple[str, float, float]] = {}
        self._tokens = itertools.count()
        self._on_fire = on_fire
        self._stopped = threading.Event()

    def arm(self, label: str, bound: float) -> int:
        token = next(self._tokens)
        with self._lock:
            self._armed[token] = (label, time.monotonic(), bound)
        return token

    def disarm(self, token: int) -> None:
        with self._lock:
            self._armed.pop(token, None)

    def stop(self) -> None:
        self._stopped.set()

    def run(self) -> None:
        while not self._stopped.wait(1.0):
            now = time.monotonic()
            with self._lock:
                overdue = [
                    (label, now - t0) for label, t0, bound in self._armed.values() if now - t0 > bound + WATCHDOG_SLACK
                ]
            if overdue:
                self._on_fire(*overdue[0])
                return
