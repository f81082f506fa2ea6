"""A recording's total, bounded (``"rlimit"``): the server's ``RLIMIT_FSIZE`` is set before each
cell to what is left of the session's total (a raw output file cannot grow past it), and after the
cell the raw output files it added are cut so the recording stays within the limit. The files that
span cells (transcript, events) keep a reserve; past the limit a cell's output is no longer kept in
the recording, and the cell says so.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

import psutil

from console_bridge._confinement._inotify import FolderWatch
from console_bridge._hostfs import open_regular

__all__ = ["RecordingCap"]

#: Where a recording keeps each cell's raw output (0.0.6; 0.0.5): cut when over; the rest spans cells.
_RAW = ("/capture/sessions/", "/outputs/", "/artifacts/")


class _Tree:
    """The sizes of a recording's files, kept up to date cheaply: the names added to a folder come
    from inotify (``FolderWatch``; a folder it cannot watch is listed again when its mtime changed),
    a raw output file is stat'ed when it is new and once more at the next refresh (the server may
    finish it late), and the few files that span cells (transcript, events, session notes) at every
    refresh. About 10 system calls a cell, however many cells the recording holds."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.folders: dict[str, int] = {}  # folder -> mtime_ns when last listed (unwatched folders)
        self.children: dict[str, list[str]] = {}  # folder -> its subfolders
        self.names: dict[str, set[str]] = {}  # folder -> the names already looked at
        self.sizes: dict[str, int] = {}  # file -> size
        self.raw: set[str] = set()  # the files that hold one cell's raw output (cut when over)
        self.spanning: set[str] = set()  # the files that grow with every cell
        self.total = 0
        self._fresh: set[str] = set()  # raw files found at the last refresh: stat'ed once more
        self.watch = FolderWatch()
        self._watched: set[str] = set()

    def set_size(self, path: str, size: int) -> None:
        self.total += size - self.sizes.get(path, 0)
        self.sizes[path] = size

    def close(self) -> None:
        self.watch.close()
        self._watched.clear()

    def _new_names(self, folder: str, added: dict[str, set[str]], relist: bool) -> set[str] | None:
        """The names in ``folder`` not looked at before; None when it is gone."""
        known = self.names.get(folder)
        if known is not None and folder in self._watched and not relist:
            return added.get(folder, set()) - known
        try:
            mtime = os.stat(folder, follow_symlinks=False).st_mtime_ns
        except OSError:
            return None
        if known is None and self.watch.add(folder):  # watched first, then listed: nothing is missed
            self._watched.add(folder)
        elif known is not None and self.folders.get(folder) == mtime and not relist:
            return set()
        self.folders[folder] = mtime
        known = self.names.setdefault(folder, set())
        try:
            return set(os.listdir(folder)).difference(known)
        except OSError:
            return None

    def refresh(self) -> dict[str, int]:
        """Bring the sizes up to date; the raw files that are new or grew since the last refresh,
        each with its size before."""
        recheck, self._fresh = self._fresh, set()
        added = self.watch.drain()
        relist, self.watch.overflowed = self.watch.overflowed, False
        self._watched &= self.watch.watched()  # a watch the kernel dropped: listed from now on
        stack = [self.root]
        while stack:
            folder = stack.pop()
            new = self._new_names(folder, added, relist)
            if new is None:
                continue
            known = self.names.setdefault(folder, set())
            known.update(new)
            subfolders = self.children.setdefault(folder, [])
            stack.extend(subfolders)
            for name in new:
                path = os.path.join(folder, name)
                try:
                    is_dir = stat.S_ISDIR(os.lstat(path).st_mode)
                except OSError:
                    known.discard(name)  # gone again: looked at when it comes back
                    continue
                if is_dir:
                    subfolders.append(path)
                    stack.append(path)
                elif path not in self.sizes:
                    self.sizes[path] = 0
                    if path[len(self.root) :].startswith(_RAW):
                        self.raw.add(path)
                        self._fresh.add(path)
                    else:
                        self.spanning.add(path)
        changed: dict[str, int] = {}
        for path in (*self._fresh, *recheck, *self.spanning):
            try:
                size = os.stat(path, follow_symlinks=False).st_size
            except OSError:
                size = 0
            before = self.sizes[path]
            if path in self.raw and size > before:
                changed[path] = before
            self.set_size(path, size)
        return changed

    @property
    def largest_spanning(self) -> int:
        return max((self.sizes[path] for path in self.spanning), default=0)


class RecordingCap:
    """A recording's total on disk: the server's RLIMIT_FSIZE before a cell, cuts after it."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.reserve = min(32 << 20, max(256 << 10, limit // 8))
        self.low, self.high = limit - self.reserve, limit - self.reserve // 2
        self._slack = min(256 << 10, self.reserve // 4)
        self._tree: _Tree | None = None
        self._server: tuple[int, psutil.Process] | None = None
        self._soft: int | None = None
        self.cut_bytes = 0

    def _tree_of(self, recording: Path) -> _Tree:
        if self._tree is None or self._tree.root != str(recording):
            if self._tree is not None:
                self._tree.close()
            self._tree = _Tree(str(recording))
            self._tree.refresh()
        return self._tree

    def close(self) -> None:
        """Let go of the tree's inotify instance (idempotent)."""
        if self._tree is not None:
            self._tree.close()

    def total(self, recording: Path) -> int:
        tree = self._tree_of(recording)
        tree.refresh()
        return tree.total

    def before_cell(self, recording: Path | None, server_pid: int | None) -> None:
        """Let the server's raw output files grow only as far as the session's total allows (from
        what the last cell's check found: no walk here)."""
        if recording is None:
            return
        tree = self._tree_of(recording)
        if server_pid is None:
            return
        soft = max(self.high - tree.total, tree.largest_spanning + (64 << 10))
        soft = max(1 << 20, min(self.limit, soft))
        if self._soft is not None and abs(soft - self._soft) < self._slack:
            # Not worth two system calls a cell (the transcript and events grow by a few KiB each
            # cell): a soft limit up to the slack above what is left is held by the reserve, and
            # the cut after the cell keeps the total either way.
            return
        with contextlib.suppress(psutil.Error, OSError, ValueError):
            if self._server is None or self._server[0] != server_pid:
                self._server = (server_pid, psutil.Process(server_pid))
            server = self._server[1]
            _, hard = server.rlimit(psutil.RLIMIT_FSIZE)
            if hard != psutil.RLIM_INFINITY:
                soft = min(soft, hard)
            server.rlimit(psutil.RLIMIT_FSIZE, (soft, hard))
            self._soft = soft

    def after_cell(self, recording: Path | None) -> bool:
        """Cut what the cell added past the high-water mark (back to the low one); True when cut."""
        if recording is None:
            return False
        tree = self._tree_of(recording)
        old = tree.refresh()  # what grew since the last cell's check: this cell's raw output
        used = tree.total
        if used <= self.high:
            return False
        over = used - self.low
        for path in sorted(old, key=lambda path: (os.path.dirname(path), path), reverse=True):
            if over <= 0:
                break
            size, keep = tree.sizes[path], old[path]
            cut = min(over, size - keep)
            # text is cut to fit; anything else (an image) would be broken by a cut, so it goes whole
            target = size - cut if path.endswith(".txt") else keep
            if _cut(path, target):
                over -= size - target
                self.cut_bytes += size - target
                tree.set_size(path, target)
        return True


def _cut(path: str, size: int) -> bool:
    """Truncate the regular file ``path`` (never through a symlink) to ``size`` bytes. mcp-console
    makes a cell's raw output read-only once written: the owner lends itself write permission for
    the cut and gives the file its mode back."""
    opened = open_regular(path)
    if opened is None:
        return False
    fd, info = opened
    try:
        mode = stat.S_IMODE(info.st_mode)
        os.fchmod(fd, mode | stat.S_IWUSR)
        try:
            writer = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            try:
                if os.fstat(writer).st_ino != info.st_ino:
                    return False
                os.ftruncate(writer, size)
            finally:
                os.close(writer)
        finally:
            os.fchmod(fd, mode)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
