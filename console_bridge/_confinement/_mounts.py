"""What a session's sandbox can write in memory: its tmpfs mounts, found in a process's ``mountinfo``
and measured on each mount itself, never through a path a cell can replace (see ``_disk``)."""

from __future__ import annotations

import os
from collections.abc import Iterable

__all__ = ["sandbox_tmpfs", "sandbox_tmpfs_used"]


def _unescape(field: str) -> str:
    """A mountinfo path field: spaces, tabs, newlines and backslashes are octal escapes."""
    return field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def sandbox_tmpfs(pid: int, exclude: Iterable[str] = ()) -> list[tuple[str, int]] | None:
    """The tmpfs mounts process ``pid`` can write, other than those at or below ``exclude`` (capped
    ones of the session's own, the TMPDIR): (mount point, device), from its ``mountinfo``. The
    topmost mount of each mount point counts (what is beneath it cannot be reached). None when
    the mountinfo cannot be read."""
    try:
        with open(f"/proc/{pid}/mountinfo", encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    top: dict[str, tuple[str, int, bool]] = {}
    for line in lines:
        head, sep, tail = line.partition(" - ")
        fields, after = head.split(), tail.split()
        if not sep or len(fields) < 6 or not after:
            continue
        major, _colon, minor = fields[2].partition(":")
        try:
            device = os.makedev(int(major), int(minor))
        except ValueError:
            continue
        point = _unescape(fields[4])
        writable = "rw" in fields[5].split(",")
        top[point] = (after[0], device, writable)
    skip = [os.path.normpath(path).rstrip("/") for path in exclude]

    def own(point: str) -> bool:
        return any(point == path or point.startswith(path + "/") for path in skip)

    return [(point, device) for point, (kind, device, rw) in top.items() if kind == "tmpfs" and rw and not own(point)]


def _open_in_root(root: int, path: str) -> int:
    """An ``O_PATH`` fd of the absolute ``path`` under the folder ``root``, no symlink followed on the
    way (each component opened ``O_NOFOLLOW``): a cell that replaces a folder by a link is refused."""
    flags = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_DIRECTORY
    fd = os.open(".", flags, dir_fd=root)
    try:
        for part in [part for part in path.split("/") if part]:
            if part == "..":
                raise OSError(f"{path!r} has a '..'")
            inner = os.open(part, flags, dir_fd=fd)
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def sandbox_tmpfs_used(pid: int, exclude: Iterable[str] = ()) -> tuple[int, list[str], bool] | None:
    """Bytes in use on every tmpfs process ``pid`` can write but ``exclude`` (its sandbox's ``/dev``
    with ``/dev/shm``, any other), each measured on the mount itself: reached from the process's
    root without following a symlink, and only counted when what was reached is that mount's
    device. (bytes, the mount points that could not be reached so: a cell that blinds a path
    cannot hide its bytes, the caller treats them as overdrawn; whether one is full, less than
    1 MiB free: a size the bridge gave it, ``_devcap``). None: no mountinfo."""
    mounts = sandbox_tmpfs(pid, exclude)
    if mounts is None:
        return None
    try:
        root = os.open(f"/proc/{pid}/root", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    total, blind, full = 0, [], False
    try:
        for point, device in mounts:
            try:
                fd = _open_in_root(root, point)
            except OSError:
                blind.append(point)
                continue
            try:
                if os.fstat(fd).st_dev != device:
                    blind.append(point)
                    continue
                info = os.fstatvfs(fd)
            except OSError:
                blind.append(point)
                continue
            finally:
                os.close(fd)
            total += (info.f_blocks - info.f_bfree) * info.f_frsize
            full = full or info.f_bavail * info.f_frsize < 1 << 20
    finally:
        os.close(root)
    return total, blind, full
