"""Ownership of a child process and every descendant it ever had.

The child runs in its own session and process group. While it lives, its
descendants are recorded (pid plus create time, so a recycled pid is never hit),
including those that later leave the group with ``setsid``. On stop: close stdin,
wait a bounded grace period, SIGTERM the group, SIGKILL the group, then kill every
recorded descendant still alive. Nothing survives.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterable

import anyio
import psutil

__all__ = ["ProcessTree", "alive_pids"]

#: How often a running child's descendants are recorded. Not a wait bound: only
#: how fresh the record is; a final snapshot is always taken before any stop.
SNAPSHOT_INTERVAL = 0.25


def _children(pid: int) -> list[int] | None:
    """Direct children of ``pid`` from /proc (None when the kernel does not offer the files)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return []
    except OSError:
        return None
    found: list[int] = []
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as handle:
                found.extend(int(part) for part in handle.read().split())
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue  # the thread ended meanwhile
            return None
        except (OSError, ValueError):
            continue
    return found


def _descendants(pid: int) -> list[int] | None:
    """Every descendant of ``pid`` (breadth first), or None when /proc cannot tell."""
    out: list[int] = []
    queue = [pid]
    seen = {pid}
    while queue:
        children = _children(queue.pop())
        if children is None:
            return None
        for child in children:
            if child not in seen:
                seen.add(child)
                out.append(child)
                queue.append(child)
    return out


def _is_alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def alive_pids(pids: Iterable[int]) -> list[int]:
    """The pids among ``pids`` that name a live (non-zombie) process."""
    alive = []
    for pid in pids:
        try:
            if _is_alive(psutil.Process(pid)):
                alive.append(pid)
        except psutil.Error:
            continue
    return alive


class ProcessTree:
    """The root child process, its process group and every descendant seen so far."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._known: dict[int, psutil.Process] = {}
        try:
            self._root: psutil.Process | None = psutil.Process(pid)
        except psutil.Error:
            self._root = None
        try:
            self.pgid: int | None = os.getpgid(pid)
        except OSError:
            self.pgid = None

    def snapshot(self) -> None:
        """Record the root's current descendants.

        Walks only this tree through ``/proc/<pid>/task/<tid>/children`` (a few small
        reads), not every process on the host as ``psutil.Process.children`` does; falls
        back to psutil where the kernel lacks those files.
        """
        if self._root is None or not self._root.is_running():
            return  # gone (or its pid reused): never walk someone else's tree
        pids = _descendants(self.pid)
        if pids is None:
            try:
                children = self._root.children(recursive=True)
            except psutil.Error:
                return
            for child in children:
                self._known.setdefault(child.pid, child)
            return
        for pid in pids:
            if pid not in self._known:
                try:
                    self._known[pid] = psutil.Process(pid)
                except psutil.Error:
                    continue

    @property
    def known_pids(self) -> set[int]:
        return {self.pid, *self._known}

    def survivors(self) -> list[psutil.Process]:
        """Every process of this tree still alive (the root included)."""
        procs = [p for p in (self._root, *self._known.values()) if p is not None]
        return [p for p in procs if _is_alive(p)]

    def signal_group(self, sig: signal.Signals) -> None:
        if self.pgid is not None and self.pgid != os.getpgrp():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pgid, sig)

    def kill_now(self) -> None:
        """SIGKILL the group and every recorded descendant at once."""
        self.snapshot()
        self.signal_group(signal.SIGKILL)
        for proc in self.survivors():
            with contextlib.suppress(psutil.Error):
                proc.kill()

    async def wait_gone(self, timeout: float, interval: float = 0.01) -> bool:
        """Wait up to ``timeout`` seconds until no process of the tree is alive."""
        with anyio.move_on_after(timeout):
            while self.survivors():
                await anyio.sleep(interval)
            return True
        return not self.survivors()

    async def terminate(self, term_grace: float) -> None:
        """SIGTERM the group, wait ``term_grace``, then SIGKILL everything recorded."""
        self.snapshot()
        self.signal_group(signal.SIGTERM)
        for proc in self.survivors():  # also those that left the group with setsid
            with contextlib.suppress(psutil.Error):
                proc.terminate()
        if not await self.wait_gone(term_grace):
            self.kill_now()
            await self.wait_gone(term_grace)
