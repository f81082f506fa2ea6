"""doctor's "capacity" line: how many sessions this user can hold at once, and which kernel setting
stops them first (issue 35).

A session costs some of the kernel's per-user allowances (measured on mcp-console 0.0.6, the
workspace profile, 2026-12-04): the remasker's watches (about 8, the folders on the way to its
hidden names; /etc's folders, about 160 here, are watched once per host process), three
user namespaces (the bridge's view and mcp-console's two sandboxes) and about 40 tasks (15
processes and their threads). Inotify instances are not counted per session any more: a host
process holds two whatever its sessions (``_inotify``'s hub and the shared remasker, ``_remaskd``),
so ``fs.inotify.max_user_instances`` bounds host processes, not sessions. The lowest of the walls
is named with the setting that raises it; nothing is changed.
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Wall", "capacity_text", "capacity_walls"]

#: Inotify instances a host process holds, however many sessions it runs.
INOTIFY_INSTANCES_PER_PROCESS = 2
USER_NAMESPACES = 3
TASKS = 40


@dataclass(frozen=True, slots=True)
class Wall:
    """One per-user allowance: its setting, its value, what a session takes, the sessions it allows."""

    setting: str
    value: int
    per_session: int
    sessions: int
    how: str  # how to raise it


def _read_int(path: str) -> int | None:
    try:
        return int(Path(path).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _etc_folders() -> int:
    """The folders of /etc (the remasker watches each), not following links."""
    count = 0
    for _, folders, _ in os.walk("/etc", onerror=lambda _: None):
        count += 1
        folders[:] = [name for name in folders if not os.path.islink(os.path.join("/etc", name))]
    return count


def capacity_walls() -> list[Wall]:
    """The per-user allowances that bound how many sessions run at once, lowest first."""
    walls = []
    watches = _read_int("/proc/sys/fs/inotify/max_user_watches")
    if watches is not None:
        # /etc's folders are watched once per host process (shared by its sessions); the folders on the
        # way to a session's hidden names (about 8: its workspace's) are its own
        etc = _etc_folders()
        how = "sysctl fs.inotify.max_user_watches=N"
        walls.append(Wall("fs.inotify.max_user_watches", watches, 8, max(0, watches - etc) // 8, how))
    namespaces = _read_int("/proc/sys/user/max_user_namespaces")
    if namespaces is not None:
        how = "sysctl user.max_user_namespaces=N"
        walls.append(Wall("user.max_user_namespaces", namespaces, USER_NAMESPACES, namespaces // USER_NAMESPACES, how))
    soft, _ = resource.getrlimit(resource.RLIMIT_NPROC)
    if soft != resource.RLIM_INFINITY and os.geteuid() != 0:
        how = "ulimit -u N, or LimitNPROC= / nproc in /etc/security/limits.conf"
        walls.append(Wall("RLIMIT_NPROC (tasks per user)", soft, TASKS, soft // TASKS, how))
    pid_max = _read_int("/proc/sys/kernel/pid_max")
    if pid_max is not None:
        walls.append(
            Wall("kernel.pid_max (tasks on the host)", pid_max, TASKS, pid_max // TASKS, "sysctl kernel.pid_max=N")
        )
    return sorted(walls, key=lambda wall: wall.sessions)


def capacity_text(walls: list[Wall]) -> str:
    """One sentence: the first wall and its fix, then the others."""
    if not walls:
        return "no per-user allowance could be read"
    first, rest = walls[0], walls[1:]
    others = "; ".join(f"{w.setting} {w.value} ({w.sessions})" for w in rest)
    text = (
        f"about {first.sessions} sessions at once: {first.setting} is {first.value} and a session takes "
        f"{first.per_session}; raise it with {first.how}. Then: {others}"
    )
    instances = _read_int("/proc/sys/fs/inotify/max_user_instances")
    if instances is not None:
        processes = instances // INOTIFY_INSTANCES_PER_PROCESS
        text += (
            f". fs.inotify.max_user_instances {instances} bounds host processes, not sessions: each holds "
            f"{INOTIFY_INSTANCES_PER_PROCESS} whatever its sessions (about {processes} processes)"
        )
    return text
