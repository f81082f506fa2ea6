"""The process trees of sessions: tracking them, and waiting until they are gone."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterable
from pathlib import Path

import psutil


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def tree_of(pid: int) -> list[psutil.Process]:
    """``pid`` and every live descendant (psutil reads /proc; sandboxed ones are included)."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def child_pids() -> set[int]:
    return {p.pid for p in psutil.Process().children()}


class Tracker:
    """Every process any session ever had, keyed by (pid, create time) so a reused pid never counts."""

    def __init__(self) -> None:
        self.procs: dict[tuple[int, float], psutil.Process] = {}

    def add(self, procs: Iterable[psutil.Process]) -> list[psutil.Process]:
        kept = []
        for proc in procs:
            try:
                key = (proc.pid, proc.create_time())
            except psutil.Error:
                continue
            self.procs.setdefault(key, proc)
            kept.append(proc)
        return kept

    def survivors(self) -> list[psutil.Process]:
        return [p for p in self.procs.values() if _alive(p)]


def describe(proc: psutil.Process) -> str:
    try:
        return f"{proc.pid} {proc.name()} {' '.join(proc.cmdline())[:160]}"
    except psutil.Error:
        return f"{proc.pid} (gone)"


async def wait_gone(procs: list[psutil.Process], limit: float) -> float | None:
    """Seconds until none of ``procs`` is alive (polled every 2 ms), or None past ``limit``."""
    start = time.perf_counter()
    while any(_alive(p) for p in procs):
        if time.perf_counter() - start > limit:
            return None
        await asyncio.sleep(0.002)
    return time.perf_counter() - start


def shared_remasker() -> dict[str, float] | None:
    """PSS (with its spare child's) and inotify instances and watches of this process's shared
    remasker (``_confinement/_remaskd.py``, one for all its sessions; None when there is none)."""
    from console_bridge._confinement._remask_host import current

    helper = current()
    if helper is None:
        return None
    pid = helper.pid
    instances = watches = 0
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            if os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:inotify":
                instances += 1
                text = Path(f"/proc/{pid}/fdinfo/{fd}").read_text(encoding="ascii", errors="replace")
                watches += sum(1 for line in text.splitlines() if line.startswith("inotify wd:"))
        helper_proc = psutil.Process(pid)  # its spare child (forked ahead for the next job) counted with it
        pss = sum(p.memory_full_info().pss for p in [helper_proc, *helper_proc.children()])
    except (OSError, psutil.Error):
        return None
    return {"pss_mib": round(pss / 2**20, 2), "inotify_instances": instances, "inotify_watches": watches}
