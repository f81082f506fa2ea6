"""Processes a test checks for: which are alive (a zombie is not), and a process's tree."""

from __future__ import annotations

import psutil

__all__ = ["alive", "tree_of"]


def alive(pids: set[int] | list[int]) -> list[int]:
    """The pids still running and not zombies."""
    out = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.Error:
            continue
    return out


def tree_of(pid: int) -> set[int]:
    """``pid`` and every descendant of it now."""
    try:
        return {pid, *(child.pid for child in psutil.Process(pid).children(recursive=True))}
    except psutil.Error:
        return {pid}
