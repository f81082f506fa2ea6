"""The processes of one session's tree, found from its root down (not by a walk of every process)."""

from __future__ import annotations

import contextlib
import os

import psutil

__all__ = ["descendants"]


def descendants(pid: int) -> list[psutil.Process] | None:
    """The processes below ``pid``, from the kernel's per-thread ``children`` lists (a walk of the
    session's own tree, a dozen reads); psutil's walk of every process where those lists are not
    there (a kernel without CONFIG_PROC_CHILDREN). None when ``pid`` is gone."""
    try:
        root = psutil.Process(pid)
    except psutil.Error:
        return None
    if not os.path.exists(f"/proc/{pid}/task/{pid}/children"):
        with contextlib.suppress(psutil.Error):
            return root.children(recursive=True)
        return None
    found: list[psutil.Process] = []
    stack = [pid]
    while stack:
        parent = stack.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{parent}/task/{task}/children", "rb") as listing:
                    children = [int(child) for child in listing.read().split()]
            except (OSError, ValueError):
                continue
            for child in children:
                with contextlib.suppress(psutil.Error):
                    found.append(psutil.Process(child))
                    stack.append(child)
    return found
