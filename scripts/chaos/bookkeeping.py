"""What the soak keeps: each bounded call's outcome (``Step``), each session and the processes seen
in its tree (``Session``), the run's counts and findings (``Stats``), and the process helpers.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from console_bridge import AsyncConsole


@dataclass
class Step:
    """The outcome of one bounded library call."""

    ok: bool
    value: Any = None
    error: BaseException | None = None
    hung: bool = False
    elapsed: float = 0.0


@dataclass
class Session:
    sid: int
    console: AsyncConsole
    workspace: Path
    recordings: Path
    poll_window: float
    procs: dict[int, psutil.Process] = field(default_factory=dict)
    pid: int | None = None
    tmpdir: Path | None = None
    sent: bool = False  # any cell submitted (the recording exists from the first send)
    worker_up: bool = False  # a cell ran to completion since the last worker (re)start
    closed: bool = False
    exempt: str | None = None  # why a close of this session need not finalize its recording
    tainted: bool = False  # a call hung; the session was cancelled

    def label(self) -> str:
        return f"s{self.sid}(pid {self.pid})"

    def snapshot(self, children: dict[int, list[psutil.Process]] | None = None) -> None:
        """Record the server and its current descendants (pid + create time)."""
        if self.pid is None or self.closed:
            return
        root = self.procs.get(self.pid)
        if root is None or not _alive(root):
            return
        children = process_children() if children is None else children
        todo = [self.pid]
        while todo:
            for child in children.get(todo.pop(), ()):
                if self.procs.setdefault(child.pid, child) == child:
                    todo.append(child.pid)


@dataclass
class Stats:
    cycles: int = 0
    ops: Counter[str] = field(default_factory=Counter)
    variants: Counter[str] = field(default_factory=Counter)
    typed_errors: Counter[str] = field(default_factory=Counter)
    survivors: list[dict[str, Any]] = field(default_factory=list)
    leaks: list[dict[str, Any]] = field(default_factory=list)
    untyped: list[dict[str, Any]] = field(default_factory=list)
    hangs: list[dict[str, Any]] = field(default_factory=list)
    unfinalized: list[dict[str, Any]] = field(default_factory=list)
    anomalies: list[dict[str, Any]] = field(default_factory=list)
    slowest: dict[str, float] = field(default_factory=dict)
    sessions_opened: int = 0
    clean_closes: int = 0
    finalized_checked: int = 0
    max_concurrent: int = 0
    processes_tracked: int = 0
    killed_recordings: Counter[str] = field(default_factory=Counter)


def _short(text: str, limit: int = 300) -> str:
    text = str(text)
    return text if len(text) <= limit else text[:limit] + "..."


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _describe(proc: psutil.Process) -> dict[str, Any]:
    info: dict[str, Any] = {"pid": proc.pid}
    with contextlib.suppress(psutil.Error):
        info["name"] = proc.name()
        info["status"] = proc.status()
        info["cmdline"] = _short(" ".join(proc.cmdline()), 200)
    return info


def process_children() -> dict[int, list[psutil.Process]]:
    """Every process by parent pid, from one pass over /proc (cheaper than one walk per session)."""
    children: dict[int, list[psutil.Process]] = {}
    for proc in psutil.process_iter(["ppid"]):
        ppid = proc.info.get("ppid")
        if ppid is not None:
            children.setdefault(ppid, []).append(proc)
    return children


def remove_tree(path: Path) -> None:
    """Remove ``path`` even where finalized recordings made files and folders read-only."""
    if not path.exists():
        return
    for root, dirs, _files in os.walk(path):
        for name in dirs:
            with contextlib.suppress(OSError):
                os.chmod(os.path.join(root, name), stat.S_IRWXU)

    def retry(func: Callable[[str], Any], target: str, _exc: Any) -> None:
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(target), stat.S_IRWXU)
        with contextlib.suppress(OSError):
            os.chmod(target, stat.S_IRWXU)
        func(target)

    shutil.rmtree(path, onerror=retry)  # onexc needs Python 3.12
