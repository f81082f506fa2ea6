"""The processes of one session's tree, found from its root down (not by a walk of every process).

The supervisor (``python -I -S``, no site-packages, a start of a few milliseconds) loads this
module for :func:`descendant_pids`: at import it takes ``os`` alone (no typing, contextlib or
psutil; mypy still sees the annotations), and only :func:`descendants` uses psutil.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    import psutil

__all__ = ["descendant_pids", "descendants"]


def descendant_pids(pid: int) -> list[int]:
    """Every process below ``pid``, from the kernel's per-thread ``children`` lists (empty where
    they are missing, a kernel without CONFIG_PROC_CHILDREN, or when ``pid`` is gone)."""
    found: list[int] = []
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
            found.extend(children)
            stack.extend(children)
    return found


def descendants(pid: int) -> list[psutil.Process] | None:
    """The processes below ``pid``, from the kernel's per-thread ``children`` lists (a walk of the
    session's own tree, a dozen reads); psutil's walk of every process where those lists are not
    there (a kernel without CONFIG_PROC_CHILDREN). None when ``pid`` is gone."""
    import psutil  # (not at import: see the module docstring)

    try:
        root = psutil.Process(pid)
    except psutil.Error:
        return None
    if not os.path.exists(f"/proc/{pid}/task/{pid}/children"):
        try:
            return root.children(recursive=True)
        except psutil.Error:
            return None
    found: list[psutil.Process] = []
    for child in descendant_pids(pid):
        try:
            found.append(psutil.Process(child))
        except psutil.Error:  # ended since it was listed
            continue
    return found
