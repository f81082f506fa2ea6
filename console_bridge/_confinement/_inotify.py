"""Names added to some folders, from the kernel (inotify), so a folder that gains a file a cell
is not listed again each cell. Linux only; where inotify is unavailable or its watches run out,
``FolderWatch.add`` says so and the caller lists the folder instead.

Every watch of a process shares one inotify instance (``_Hub``): the kernel allows a user 128
instances by default (``fs.inotify.max_user_instances``), and two per session (the recording's cap,
the writes' changes) stopped a host at 64 sessions. The hub reads the one queue and hands each
watch the events of the folders it added, with the events it asked for.
"""

from __future__ import annotations

import collections
import ctypes
import ctypes.util
import os
import select
import stat
import struct
import threading
import weakref
from collections.abc import Iterable, Iterator

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
            _libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
        except (OSError, AttributeError):
            return None
    return _libc


_IN_MASK_ADD = 0x20000000
#: Events one watch may have waiting before they are dropped for a queue overflow (a watch that is not drained).
_MAX_WAITING = 65_536
Event = tuple[int, int, bytes]


class _Hub:
    """The process's one inotify instance, shared by every watch (``owner``: a token per watch).

    A folder two watches add is one kernel watch (``IN_MASK_ADD``: the union of their masks); each
    event goes to the watches of its folder whose mask asks for it, a queue overflow to all. The kernel
    watch is removed when the last watch that added it lets go. Made again in a forked child (the
    parent's queue is the parent's)."""

    def __init__(self) -> None:
        lib = _lib()
        self.pid = os.getpid()
        self.fd = lib.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC) if lib is not None else -1
        self.lock = threading.Lock()
        self.owners: dict[int, dict[int, int]] = {}  # kernel watch -> {owner: the events it asked for}
        self.waiting: dict[int, list[Event]] = {}  # owner -> its events not yet taken
        #: owners let go of by the garbage collector: it may run a finalizer in a thread that holds
        #: ``lock`` (inside ``_route``), so a finalizer only queues the owner here (no lock taken)
        self.dropped: collections.deque[int] = collections.deque()

    def add(self, owner: int, folder: str, mask: int) -> int:
        """Watch ``folder`` for ``owner`` (never through a symlink); the watch's number, -1 when it cannot."""
        lib = _lib()
        if self.fd < 0 or lib is None:
            return -1
        with self.lock:
            self._forget_dropped()
            self._route()  # what is queued now belongs to the owners before this one
            wd = int(lib.inotify_add_watch(self.fd, os.fsencode(folder), mask | _IN_MASK_ADD | _IN_ONLYDIR))
            if wd >= 0:
                self.owners.setdefault(wd, {})[owner] = mask
                self.waiting.setdefault(owner, [])
            return wd

    def take(self, owner: int) -> list[Event]:
        """The events for ``owner`` since it last took them."""
        if self.fd < 0:
            return []
        with self.lock:
            self._forget_dropped()
            self._route()
            events = self.waiting.get(owner)
            if not events:
                return []
            self.waiting[owner] = []
            return events

    def release(self, owner: int) -> None:
        """``owner`` is done: its events dropped, the kernel watches no other owner holds removed."""
        with self.lock:
            self._forget_dropped()
            self._forget(owner)

    def drop(self, owner: int) -> None:
        """``release`` for a finalizer: queued, applied by the next call that holds the lock."""
        self.dropped.append(owner)

    def _forget_dropped(self) -> None:
        while self.dropped:
            self._forget(self.dropped.popleft())

    def _forget(self, owner: int) -> None:
        lib = _lib()
        self.waiting.pop(owner, None)
        for wd in [wd for wd, held in self.owners.items() if owner in held]:
            held = self.owners[wd]
            del held[owner]
            if not held:
                del self.owners[wd]
                if lib is not None and self.fd >= 0 and os.getpid() == self.pid:
                    lib.inotify_rm_watch(self.fd, wd)

    def _route(self) -> None:
        for wd, mask, name in _events(self.fd):
            if mask & _IN_Q_OVERFLOW:
                targets = list(self.waiting)
            else:
                held = self.owners.get(wd, {})
                targets = [o for o, wanted in held.items() if mask & (wanted | _IN_IGNORED)]
                if mask & _IN_IGNORED:  # the folder is gone: the kernel dropped its watch
                    self.owners.pop(wd, None)
            for owner in targets:
                queue = self.waiting.get(owner)
                if queue is None:
                    continue
                if len(queue) >= _MAX_WAITING:
                    self.waiting[owner] = [(-1, _IN_Q_OVERFLOW, b"")]
                else:
                    queue.append((wd, mask, name))


_hub_lock = threading.Lock()
_the_hub: _Hub | None = None
_owners = iter(range(1, 1 << 62))


def _hub() -> _Hub:
    """This process's hub (made again after a fork, or when the last try got no instance)."""
    global _the_hub
    with _hub_lock:
        if _the_hub is None or _the_hub.pid != os.getpid() or _the_hub.fd < 0:
            _the_hub = _Hub()
        return _the_hub


class _Watch:
    """A watch on the process's hub: ``add`` folders, ``_take`` their events, ``close`` (or garbage
    collection) lets go of them."""

    def __init__(self, mask: int) -> None:
        self._mask = mask
        self._hub = _hub()
        self._owner = next(_owners)
        self.fd = self._hub.fd  # -1: no inotify here (the callers count without it)
        if self.fd >= 0:  # garbage collected unclosed: let go at the hub's next call (see _Hub.dropped)
            self._finalizer = weakref.finalize(self, self._hub.drop, self._owner)

    def _add(self, folder: str) -> int:
        return self._hub.add(self._owner, folder, self._mask | _IN_DONT_FOLLOW) if self.fd >= 0 else -1

    def _take(self) -> list[Event]:
        return self._hub.take(self._owner) if self.fd >= 0 else []

    def _close(self) -> None:
        if self.fd >= 0:
            self._finalizer.detach()
            self._hub.release(self._owner)
            self.fd = -1


class FolderWatch(_Watch):
    """Folders added to it report the names created or moved into them."""

    def __init__(self) -> None:
        super().__init__(_IN_CREATE | _IN_MOVED_TO)
        self._folders: dict[int, str] = {}
        self.overflowed = False

    @property
    def available(self) -> bool:
        return self.fd >= 0

    def add(self, folder: str) -> bool:
        """Watch ``folder`` (never through a symlink); False when it cannot be watched."""
        wd = self._add(folder)
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
        for wd, mask, name in self._take():
            if mask & _IN_Q_OVERFLOW:
                self.overflowed = True
            elif mask & _IN_IGNORED:
                self._folders.pop(wd, None)  # the folder is gone (or was unmounted)
            elif name and wd in self._folders:
                added.setdefault(self._folders[wd], set()).add(os.fsdecode(name))
        return added

    def close(self) -> None:
        self._close()
        self._folders.clear()


_IN_MODIFY = 0x2
_IN_CLOSE_WRITE = 0x8
_IN_MOVED_FROM = 0x40
_IN_DELETE = 0x200
_IN_ISDIR = 0x40000000
#: Files changed between two walks kept track of, at most (then only the walks count, until the next).
_MAX_CHANGED = 200_000
#: A walk keeps the size of each file of at least this many bytes (one link only), so that deleting it gives
#: its bytes back at once; a smaller file's bytes come back at the next walk.
KEPT_SIZE = 256 << 10
#: Entries of new folders listed in one read of the kernel's events, at most (then the books are incomplete
#: until the next walk: a rename of a big tree costs one walk, not one each).
_MAX_LISTED = 20_000
_CHANGES = _IN_MODIFY | _IN_CLOSE_WRITE | _IN_MOVED_FROM | _IN_MOVED_TO | _IN_CREATE | _IN_DELETE


class ChangeWatch(_Watch):
    """What changed under some trees between two walks of them, from the kernel: the bytes files
    grew by and the entries created, however many files the trees hold (a walk of 400,000 files
    takes seconds; this costs a ``stat`` per changed file). Every folder of the trees is watched
    (``add``, from the walk; a folder that appears, when its creation is read, and listed then);
    ``complete`` is False when one could not be (the watches ran out), the kernel's queue
    overflowed or a new folder held too much to list, until the next walk has run."""

    def __init__(self, exclude: Iterable[str] = ()) -> None:
        super().__init__(_CHANGES)
        self.exclude = frozenset(exclude)  # folders left out of the books (the recordings)
        self.folders: dict[int, str] = {}
        self.complete = False  # every folder watched, nothing lost since (set by the walk that watched them)
        self.failed = False  # a folder could not be watched
        self.first: dict[str, int] = {}  # a file seen changing since the last walk: its bytes then
        self.now: dict[str, int] = {}  # and now
        self.created = 0  # entries created (minus removed) since the last walk
        self.grown = 0  # bytes the changed files grew by since the last walk
        self.removed = 0  # files deleted or moved away since the last walk
        #: the bytes of each file of at least ``KEPT_SIZE`` as the last walk found it (set by the walk)
        self.sizes: dict[str, int] = {}
        self.freed = 0  # bytes given back since the last walk: files in ``sizes`` deleted or moved away

    def add(self, folder: str) -> bool:
        """Watch ``folder``; False when it was watched already (under this name or another: a folder
        renamed keeps its watch, which takes the new name). A folder that cannot be watched makes the
        books incomplete; one that is gone is nothing to watch (a folder made and removed at once turns
        nothing off)."""
        if self.fd < 0 or folder in self.exclude:
            return False
        wd = self._add(folder)
        if wd < 0:
            try:
                gone = not stat.S_ISDIR(os.lstat(folder).st_mode)
            except OSError:
                gone = True
            if not gone:
                self.complete, self.failed = False, True
            return not gone
        new = wd not in self.folders
        self.folders[wd] = folder
        return new

    def _list(self, top: str, budget: int, changed: set[str], *, moved: bool) -> int:
        """A folder that appeared (made, or moved in): what it held before its watch, which the kernel
        did not report, put in the books -- each file (a made one from zero bytes, a moved one or a
        second link from its bytes now) to be measured with the changed files, each folder watched and
        listed in turn. Past ``budget`` entries the books are incomplete (until the next walk); what
        is left of the budget is returned."""
        stack = [top] if top not in self.exclude else []
        while stack:
            try:
                with os.scandir(stack.pop()) as listing:
                    for entry in listing:
                        budget -= 1
                        if budget < 0:
                            self.complete = False
                            return budget
                        try:
                            st = entry.stat(follow_symlinks=False)
                        except OSError:
                            continue
                        if stat.S_ISDIR(st.st_mode):
                            if self.add(entry.path) and not moved:
                                self.created += 1
                            if entry.path not in self.exclude:
                                stack.append(entry.path)
                        elif entry.path not in self.first:
                            self.created += 0 if moved else 1
                            self.first[entry.path] = st.st_blocks * 512 if moved or st.st_nlink > 1 else 0
                            changed.add(entry.path)
            except OSError:
                continue
        return budget

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
        self.created = self.grown = self.removed = self.freed = 0
        self.sizes = {}

    def rebase(self, visited: dict[str, int]) -> None:
        """A walk ended, having counted ``visited`` (the bytes of files changed since it began, as it
        found them): their growth counts from there, not twice (a file written during a walk was in its
        total and in ``grown``, and a writer under the limit was stopped early)."""
        for path, size in visited.items():
            if path in self.first:
                self.first[path] = size
        self.grown = sum(max(0, self.now.get(path, first) - first) for path, first in self.first.items())

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
        budget = _MAX_LISTED
        for wd, mask, name in self._take():
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
                if mask & _IN_CREATE:
                    if self.add(path):  # (not already found by the listing of a new folder)
                        self.created += 1
                    budget = self._list(path, budget, changed, moved=False)
                elif mask & _IN_MOVED_TO:
                    self.created += 1
                    self.add(path)
                    budget = self._list(path, budget, changed, moved=True)
                elif mask & (_IN_DELETE | _IN_MOVED_FROM):
                    self.created -= 1
                continue
            if mask & (_IN_CREATE | _IN_MOVED_TO):
                # a new name: not the file the walk measured there (its size is no credit), and all its bytes are
                # new (a file moved in, or a second link, counts whole: what a move or unlink of the old name
                # gave back is taken again)
                self.sizes.pop(path, None)
                if path not in self.first or mask & _IN_MOVED_TO:  # (not already found by a new folder's listing)
                    self.created += 1
                    self._set(path, None)
                    self.first[path] = 0
            elif mask & (_IN_DELETE | _IN_MOVED_FROM):
                self.created -= 1
                self.removed += 1
                self.freed += self.sizes.pop(path, 0)
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
        self._close()
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
