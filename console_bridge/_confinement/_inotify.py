"""Names added to some folders, from the kernel (inotify), so a folder that gains a file a cell
is not listed again each cell. Linux only; where inotify is unavailable or its watches run out,
``FolderWatch.add`` says so and the caller lists the folder instead."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import select
import struct
import weakref
from collections.abc import Iterator

__all__ = ["ChangeWatch", "FolderWatch"]

_IN_CREATE = 0x100
_IN_MOVED_TO = 0x80
_IN_IGNORED = 0x8000
_IN_Q_OVERFLOW = 0x4000
_IN_ONLYDIR = 0x01000000
_IN_DONT_FOLLOW = 0x02000000
_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = os.O_CLOEXEC
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of name (NUL padded)

_libc: ctypes.CDLL | None = None


def _lib() -> ctypes.CDLL | None:
    global _libc
    if _libc is None:
        try:
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            _libc.inotify_init1.argtypes = [ctypes.c_int]
            _libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        except (OSError, AttributeError):
            return None
    return _libc


class FolderWatch:
    """One inotify instance: the folders added to it report the names created or moved into them."""

    def __init__(self) -> None:
        lib = _lib()
        self.fd = lib.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC) if lib is not None else -1
        self._folders: dict[int, str] = {}
        self.overflowed = False
        if self.fd >= 0:
            self._finalizer = weakref.finalize(self, os.close, self.fd)

    @property
    def available(self) -> bool:
        return self.fd >= 0

    def add(self, folder: str) -> bool:
        """Watch ``folder`` (never through a symlink); False when it cannot be watched."""
        lib = _lib()
        if self.fd < 0 or lib is None:
            return False
        wd = lib.inotify_add_watch(
            self.fd, os.fsencode(folder), _IN_CREATE | _IN_MOVED_TO | _IN_ONLYDIR | _IN_DONT_FOLLOW
        )
        if wd < 0:
            return False
        self._folders[wd] = folder
        return True

    def watched(self) -> set[str]:
        return set(self._folders.values())

    def drain(self) -> dict[str, set[str]]:
        """The names added to each watched folder since the last drain. After a queue overflow
        ``overflowed`` is True: some names were lost, and the caller lists every folder again."""
        added: dict[str, set[str]] = {}
        if self.fd < 0:
            return added
        for wd, mask, name in _events(self.fd):
            if mask & _IN_Q_OVERFLOW:
                self.overflowed = True
            elif mask & _IN_IGNORED:
                self._folders.pop(wd, None)  # the folder is gone (or was unmounted)
            elif name and wd in self._folders:
                added.setdefault(self._folders[wd], set()).add(os.fsdecode(name))
        return added

    def close(self) -> None:
        if self.fd >= 0:
            self._finalizer()
            self.fd = -1
            self._folders.clear()


_IN_MODIFY = 0x2
_IN_CLOSE_WRITE = 0x8
_IN_MOVED_FROM = 0x40
_IN_DELETE = 0x200
_IN_ISDIR = 0x40000000
#: Files changed between two walks kept track of, at most (then only the walks count, until the next).
_MAX_CHANGED = 200_000
_CHANGES = _IN_MODIFY | _IN_CLOSE_WRITE | _IN_MOVED_FROM | _IN_MOVED_TO | _IN_CREATE | _IN_DELETE


class ChangeWatch:
    """What changed under some trees between two walks of them, from the kernel: the bytes files
    grew by and the entries created, however many files the trees hold (a walk of 400,000 files
    takes seconds; this costs a ``stat`` per changed file). Every folder of the trees is watched
    (``add``, from the walk); ``complete`` is False when one could not be (the watches ran out) or
    the kernel's queue overflowed, and only the walks count until the next one has run."""

    def __init__(self) -> None:
        lib = _lib()
        self.fd = lib.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC) if lib is not None else -1
        self.folders: dict[int, str] = {}
        self.complete = False  # every folder watched, nothing lost since (set by the walk that watched them)
        self.failed = False  # a folder could not be watched
        self.first: dict[str, int] = {}  # a file seen changing since the last walk: its bytes then
        self.now: dict[str, int] = {}  # and now
        self.created = 0  # entries created (minus removed) since the last walk
        self.grown = 0  # bytes the changed files grew by since the last walk
        if self.fd >= 0:
            self._finalizer = weakref.finalize(self, os.close, self.fd)

    def add(self, folder: str) -> None:
        lib = _lib()
        if self.fd < 0 or lib is None:
            return
        wd = lib.inotify_add_watch(self.fd, os.fsencode(folder), _CHANGES | _IN_ONLYDIR | _IN_DONT_FOLLOW)
        if wd < 0:
            self.complete, self.failed = False, True
        else:
            self.folders[wd] = folder

    def changed(self) -> bool:
        """Did anything change since the last walk (a change counted or one still queued)? A select of
        the descriptor, nothing read: with ``complete``, False means the trees are as the walk found them
        but for writes through a shared mapping, which the kernel does not name."""
        if self.grown or self.created or self.fd < 0:
            return True
        try:
            return bool(select.select([self.fd], [], [], 0)[0])
        except (OSError, ValueError):
            return True

    def walked(self) -> None:
        """A walk just counted everything: growth counts from here (what changed during the walk is
        in it, within one ``stat`` of each file)."""
        self._read()
        self.first = {path: _bytes(path) for path in self.now}
        self.now = dict(self.first)
        self.created = self.grown = 0

    def _set(self, path: str, size: int | None) -> None:
        """The bytes of ``path`` now (None: gone), ``grown`` kept as the sum over the changed files."""
        first = self.first.get(path, 0)
        self.grown -= max(0, self.now.get(path, first) - first)
        if size is None:
            self.now.pop(path, None)
            self.first.pop(path, None)
        else:
            self.now[path] = size
            self.grown += max(0, size - first)

    def drain(self) -> None:
        """Bring ``grown`` (the bytes the changed files grew by since the last walk; a file that
        shrank gives nothing back here, the next walk does) and ``created`` up to date."""
        for path in self._read():
            if path in self.first:
                self._set(path, _bytes(path))

    def _read(self) -> set[str]:
        changed: set[str] = set()
        if self.fd < 0:
            return changed
        for wd, mask, name in _events(self.fd):
            if mask & _IN_Q_OVERFLOW:
                self.complete = False
                continue
            if mask & _IN_IGNORED:
                self.folders.pop(wd, None)
                continue
            folder = self.folders.get(wd)
            if folder is None or not name:
                continue
            path = os.path.join(folder, os.fsdecode(name))
            if mask & _IN_ISDIR:
                if mask & (_IN_CREATE | _IN_MOVED_TO):
                    self.created += 1
                    self.add(path)  # (what is already in it when it is watched: the next walk)
                elif mask & (_IN_DELETE | _IN_MOVED_FROM):
                    self.created -= 1
                continue
            if mask & _IN_CREATE:
                self.created += 1
                self.first.setdefault(path, 0)
            elif mask & (_IN_DELETE | _IN_MOVED_FROM):
                self.created -= 1
                self._set(path, None)
                changed.discard(path)
                continue
            elif path not in self.first:
                if len(self.first) >= _MAX_CHANGED:  # books too big to keep: the walks count until the next
                    self.complete = False
                    continue
                self.first[path] = _bytes(path)  # first seen changing: from its size now
            changed.add(path)
        return changed

    def close(self) -> None:
        if self.fd >= 0:
            self._finalizer()
            self.fd = -1
            self.folders.clear()


def _events(fd: int) -> Iterator[tuple[int, int, bytes]]:
    """Every event queued on ``fd`` (non-blocking) as (watch, mask, name); a read that fails ends them
    with a made-up queue overflow, which both watches take as "something was lost"."""
    while True:
        try:
            data = os.read(fd, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            yield -1, _IN_Q_OVERFLOW, b""
            return
        offset = 0
        while offset + _EVENT.size <= len(data):
            wd, mask, _, length = _EVENT.unpack_from(data, offset)
            name = data[offset + _EVENT.size : offset + _EVENT.size + length].rstrip(b"\0")
            offset += _EVENT.size + length
            yield wd, mask, name


def _bytes(path: str) -> int:
    """Bytes allocated to ``path`` (not followed); 0 when it is gone."""
    try:
        return os.lstat(path).st_blocks * 512
    except OSError:
        return 0
