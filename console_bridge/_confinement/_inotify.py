"""Names added to some folders, from the kernel (inotify), so a folder that gains a file a cell
is not listed again each cell. Linux only; where inotify is unavailable or its watches run out,
``FolderWatch.add`` says so and the caller lists the folder instead."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import struct
import weakref

__all__ = ["FolderWatch"]

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
        while True:
            try:
                data = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return added
            except OSError:
                self.overflowed = True
                return added
            offset = 0
            while offset + _EVENT.size <= len(data):
                wd, mask, _, length = _EVENT.unpack_from(data, offset)
                name = data[offset + _EVENT.size : offset + _EVENT.size + length].rstrip(b"\0")
                offset += _EVENT.size + length
                if mask & _IN_Q_OVERFLOW:
                    self.overflowed = True
                elif mask & _IN_IGNORED:
                    self._folders.pop(wd, None)  # the folder is gone (or was unmounted)
                elif name and wd in self._folders:
                    added.setdefault(self._folders[wd], set()).add(os.fsdecode(name))

    def close(self) -> None:
        if self.fd >= 0:
            self._finalizer()
            self.fd = -1
            self._folders.clear()
