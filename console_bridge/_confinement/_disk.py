"""Bounded disk: what a session adds to its writable folders, and its /dev/shm.

No kernel facility caps the bytes one unprivileged session adds to folders of the host's own
file system (quotas need root and a prepared file system; a loop device needs root; a
tmpfs or overlay upper layer would keep every write in memory until it is copied back, and
lose it when the session is killed). So the bridge keeps the books itself and stops the
cells when they overdraw:

* **writes** (``"accounting"``): a watcher thread measures the bytes allocated under the
  session's writable folders (each inode once, symlinks not followed, no other file system
  entered, the recordings left to their own limit) every ``interval`` seconds, more rarely for
  big trees (at most about 10% of one CPU). When the session has added more than the limit
  and the total grew since the last look, the cells' processes are killed (the worker is
  restarted by the next cell; what was written stays, the file being written may be
  partial). A cell that ends between two looks is checked when it ends. Between two walks
  the kernel names what changed (``_inotify.ChangeWatch``: every folder of the trees watched
  for writes and new entries), read every 5 ms while a cell runs and between the entries of a
  walk: a burst is stopped within milliseconds of its bytes, whatever the tree's size (a walk
  of 400,000 files takes seconds). The ``files`` limit counts the entries added the same way.
  A folder that appears is watched and listed at once (what a cell put in it before its watch
  is in the books: ``os.makedirs('a/b/c')`` then a burst in it was blind). Where the kernel's
  changes are incomplete (its watches ran out, its queue overflowed, a big tree was renamed),
  the file systems' net loss since the last walk (a ``statvfs`` each, every 5 ms) stands for
  what the session added until the next walk has watched every folder again: fail closed, what
  the host writes to the same file system meanwhile counts as the session's. Deleting files
  gives budget back: the limit is on the net bytes added, by anyone, while the session runs;
  a file the last walk found at ``KEPT_SIZE`` or more gives its bytes back at once, a smaller
  one at the next walk (a renamed file or a second link counts whole under its new name).
  Measured (``scripts/measure_burst.py``): a burst stops within a few MiB of the limit, the
  stated margin is 256 MiB (what a cell writes in 5 ms and while it is killed, loaded).
* **/dev/shm** (``"accounting"``): the sandbox mcp-console builds for its worker mounts a
  fresh ``/dev`` tmpfs, whose ``shm`` folder (and every other name in it) is only bounded by
  memory; the same watcher measures every tmpfs the worker can write but the session's capped
  TMPDIR, found in the worker's ``mountinfo`` and measured on the mount itself (reached without
  following a symlink, checked to be that mount's device: ``rmdir /dev/shm; ln -s pts
  /dev/shm`` blinds nothing), and stops the cells past the TMPDIR's cap. A mount a cell made
  unreachable counts as past the cap.
* **recording**: ``_recording_cap``.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import psutil

from console_bridge._confinement._inotify import KEPT_SIZE, ChangeWatch
from console_bridge._confinement._mounts import sandbox_tmpfs_used
from console_bridge._confinement._proctree import descendant_pids

__all__ = ["FolderUsage", "WriteWatch", "kill_cells"]

#: Growth below this between two looks is not a cell writing on (metadata, a log line).
_GROWTH = 256 << 10
#: Past the files limit, a look blames the cells only for more new entries than this (what the processes
#: it killed had in flight lands after it; the next cell is not blamed for those).
_NEW_FILES = 16
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class FolderUsage:
    """Bytes allocated under some folders (``st_blocks``), each inode counted once, without
    following symlinks or crossing into another file system, leaving out ``exclude``."""

    def __init__(self, folders: Iterable[Path], exclude: Iterable[Path] = ()) -> None:
        self.folders = [str(folder) for folder in dict.fromkeys(folders)]
        self.exclude = {str(path) for path in exclude}
        self.entries = 0
        #: what changes between two walks, from the kernel (``WriteWatch`` turns it on)
        self.changes: ChangeWatch | None = None

    def measure(self, tick: Callable[[], None] | None = None) -> int:
        """The bytes allocated now; ``tick`` is called every few thousand entries (a walk of a big tree
        takes seconds: the caller keeps an eye on the changes meanwhile)."""
        changes = self.changes
        watch = changes is not None and not changes.complete  # (re)watch every folder: at start, after an overflow
        if changes is not None:
            changes.walked()
            changes.failed = changes.failed and not watch
        total, seen, entries = 0, set(), 0
        #: the bytes the walk counted of each file the kernel names as changed since it began
        tracked, visited = (changes.first if changes is not None else None), {}
        sizes = changes.sizes if changes is not None else {}  # (what a deletion gives back at once)
        for top in self.folders:
            try:
                info = os.lstat(top)
            except OSError:
                continue
            if not stat.S_ISDIR(info.st_mode) or top in self.exclude:
                continue
            device, stack = info.st_dev, [top]
            while stack:
                folder = stack.pop()
                if watch and changes is not None:
                    changes.add(folder)
                try:
                    with os.scandir(folder) as listing:
                        for entry in listing:
                            entries += 1
                            if tick is not None and not entries & 0xFFF:
                                tick()
                            try:
                                st = entry.stat(follow_symlinks=False)
                            except OSError:
                                continue
                            if st.st_dev != device:
                                continue
                            if stat.S_ISDIR(st.st_mode):
                                if entry.path not in self.exclude:
                                    stack.append(entry.path)
                                total += st.st_blocks * 512
                            elif st.st_nlink > 1:
                                key = (st.st_dev, st.st_ino)
                                if key not in seen:
                                    seen.add(key)
                                    total += st.st_blocks * 512
                            else:
                                total += st.st_blocks * 512
                                if st.st_blocks * 512 >= KEPT_SIZE and stat.S_ISREG(st.st_mode):
                                    sizes[entry.path] = st.st_blocks * 512
                            if tracked and entry.path in tracked:
                                visited[entry.path] = st.st_blocks * 512
                except OSError:
                    continue
        self.entries = entries
        if changes is not None:
            changes.rebase(visited)
        if watch and changes is not None:
            changes.complete = changes.fd >= 0 and not changes.failed
        return total


class WriteWatch:
    """The writes limit (and /dev/shm's cap): measure in a thread, call ``stop_cells`` past them.

    ``hits`` counts the times a limit was overdrawn (``"writes"`` or ``"shm"``); the session
    compares it before and after a cell."""

    def __init__(
        self,
        usage: FolderUsage | None,
        limit: int | None,
        *,
        shm_limit: int | None,
        worker_pid: Callable[[], int | None],
        stop_cells: Callable[[bool], None],
        interval: float = 0.25,
        activity: Callable[[], int | None] | None = None,
        own_tmpfs: Iterable[str] = (),
        memory_limit: int | None = None,
        count_tasks: bool = False,
        files_limit: int | None = None,
    ) -> None:
        self.usage, self.limit, self.shm_limit = usage, limit, shm_limit
        self.own_tmpfs = tuple(own_tmpfs)  # the session's capped tmpfs (the TMPDIR): not the sandbox's to count
        self.blinded: list[str] = []  # mount points a cell made unreachable without a symlink (counted as over)
        self._dev_full = False  # the sandbox's capped /dev was full at the last look
        #: memory where no cgroup holds it (``"watched"``): the cells' resident memory plus the sandbox's tmpfs
        self.memory_limit = memory_limit
        self.memory_peak = 0  # the largest sample (bytes)
        #: the sandbox's tasks (threads included) while the cell runs: a fork bomb that catches its own EAGAIN
        #: and reaps its children leaves no trace by the time it ends (RLIMIT_NPROC has no counter of refusals)
        self.count_tasks = count_tasks
        self.tasks_peak = 0
        self._sandbox_init: tuple[int, int] | None = None  # (worker pid, the first process of its pid namespace)
        self.worker_pid, self.stop_cells, self.interval = worker_pid, stop_cells, interval
        #: a counter that moves whenever a process of the session runs (its group's CPU time), None
        #: where none counts it: between cells the looks wait while it stands still (``_idle``)
        self.activity = activity
        self._ran: int | None = None  # the counter at the start of this wake's look
        self._quiet: int | None = None  # ... at the start of the last look between cells that found nothing
        self.files_limit = files_limit
        watched = usage is not None and (limit is not None or files_limit is not None)
        if usage is not None and watched and usage.changes is None:
            usage.changes = ChangeWatch(usage.exclude)  # between two walks, the kernel names what changed
        #: (file system, free bytes, free inodes) before the last walk began (``_fs_lost``)
        self._fs: list[tuple[str, int, int]] = []
        self._fs = self._free_space() if watched else []
        self.baseline = usage.measure() if usage is not None and watched else 0
        self.total = self.baseline
        self.baseline_entries = self.entries = usage.entries if usage is not None and watched else 0
        #: "shm": the cells were stopped past the cap; "shm_full": the kernel held it (a write failed, ``_devcap``)
        self.hits: dict[str, int] = {"writes": 0, "shm": 0, "shm_full": 0, "memory": 0, "files": 0}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._shm_before: tuple[int, int] | None = None  # (worker pid, bytes) at the last look
        #: set by the session while a cell runs: a hit then stops the worker too; between cells only
        #: the processes the cells left behind (an idle worker writes nothing, and a worker killed
        #: between cells would swallow the next cell)
        self.cell_running = False

    def set_running(self, running: bool) -> None:
        """A cell started or ended (under the lock: a look under way finishes first, so a stop it
        decides still sees whether a cell runs)."""
        with self._lock:
            self.cell_running = running
            if running:
                self.tasks_peak = 0
        if running:
            self._wake.set()  # the watcher looks at the cell's pace from now, not at the idle one

    @property
    def added(self) -> int:
        return max(0, self.total - self.baseline)

    def start(self) -> None:
        if self._thread is None and (self._counts or self._samples):
            self._thread = threading.Thread(target=self._run, name="console-bridge-write-watch", daemon=True)
            self._thread.start()

    def close(self) -> None:
        self._closed = True
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)

    def _run(self) -> None:
        # Writes: a statvfs of each folder's file system every tick (a microsecond each) and a walk
        # when one lost space since the last walk, or every ``interval`` anyway -- never more often
        # than ten times what a walk costs (at most about 10% of one CPU, however big the tree).
        # The sandbox's tmpfs (/dev, /dev/shm in it): measured every 20 ms while a cell runs (its
        # mountinfo, a walk to each mount, an fstatvfs: about 0.1 ms; a cell writes to memory at some
        # GB/s, so this bounds the overshoot), every 0.1 s otherwise. Between cells (only what a cell
        # left behind can write) the writes look five times less often, and the sandbox's samples and
        # the walks only when something of the session ran since the last look (``_idle``).
        writes = self._counts
        last_walk = last_shm = spent = 0.0
        while not self._closed:
            slow = 1 if self.cell_running else 5
            now = time.monotonic()
            # With the kernel's changes complete, a file system that lost space needs no walk (the changes
            # say what the session's folders gained); the interval's walk keeps the books exact.
            trusted = self.usage is not None and self.usage.changes is not None and self.usage.changes.complete
            walk = (
                writes
                and now - last_walk >= max(10 * spent, 0.02 * slow)
                and (now - last_walk >= self.interval * slow or (not trusted and self._fs_shrank()))
            )
            # without the kernel's changes a cell is held by the file systems' free space (fail closed: the
            # host's writes count too): the next walk, which watches every folder again, comes sooner
            walk = walk or (writes and not trusted and self.cell_running and now - last_walk >= max(2 * spent, 0.02))
            # 20 ms only for what a kernel does not hold (memory, tasks); the sandbox's /dev has the kernel's cap
            # (_devcap) and is looked at every 0.1 s, as before (a faster loop shifted the server's timing)
            quick = self.memory_limit is not None or self.count_tasks
            shm = self._samples and now - last_shm >= ((0.02 if quick else 0.1) if self.cell_running else 0.5)
            idle = self._idle()
            # Between cells, nothing of the session ran since the last look that found nothing over: the sandbox's
            # tmpfs, memory and tasks are as it found them (the wakes keep their pace: the counter is read at each)
            if idle:
                shm = False
                last_shm = now
                if walk and trusted and self.usage is not None and self.usage.changes is not None:
                    # ... nor is a walk due while the kernel names no change by anyone else (a write through a shared
                    # mapping it does not name needs the writer to run: a process of the session's moves
                    # the counter; one of the host's is not the cells' to answer for)
                    walk = self.usage.changes.changed()
                    last_walk = last_walk if walk else now
            hits = sum(self.hits.values())
            if writes and not walk:  # (idle too: the kernel names the host's writes, and a read drains them)
                self.check(stop=True, writes=False, shm=False, fast=True)  # a read of the kernel's events
            if walk or shm:
                self.check(stop=True, writes=walk, shm=shm)
                if walk:
                    spent, last_walk = time.monotonic() - now, time.monotonic()
                if shm:
                    last_shm = now
            if not idle and sum(self.hits.values()) == hits and (shm or not self._samples):
                self._quiet = self._ran  # a look that found nothing over: the counter it started from
            # the kernel's changes are a read of one descriptor: every 5 ms while a cell runs (a cell writes
            # to the page cache at some GB/s: this bounds the overshoot)
            pace = 0.02 * slow if writes or self.cell_running else 0.1 * slow
            if writes and self.cell_running:  # (without the kernel's changes, a statvfs each: as cheap)
                pace = 0.005
            self._wake.wait(pace)
            if not self._closed:
                self._wake.clear()

    def _idle(self) -> bool:
        """Between cells: has nothing of the session run since the start of the last look that found
        nothing over? Then nothing could have written since (a write, to a file or to memory, is work
        of the writing process, counted in the session's CPU time: a background process a cell left
        moves the counter the moment it runs, and the next wake looks), and the look can wait. The
        counter is read before each look (``check``): what runs during a look shows at the next
        wake. Any cell start, a look that found something over, or no counter at all: not idle."""
        if self.cell_running or self.activity is None:
            self._quiet = None
            return False
        try:
            ran = self.activity()
        except Exception:
            ran = None
        if ran is None or ran != self._quiet:
            self._quiet = None
            self._ran = ran
            return False
        return True

    def _tick(self) -> None:
        """During a walk (under the lock): the changes since it began overdraw a limit, the cells stop now."""
        hit = self._fast_hit(during_walk=True)
        if hit is not None:
            self.hits[hit] += 1
            with contextlib.suppress(Exception):
                self.stop_cells(self.cell_running)

    def _fast_hit(self, *, during_walk: bool = False) -> str | None:
        """The limit the changes since the last walk overdraw (``ChangeWatch``: the bytes the changed
        files grew by, the entries created), else None; the cells are blamed only for growth since."""
        changes = self.usage.changes if self.usage is not None else None
        if changes is None:
            return None
        if not changes.complete:
            hit = self._blind_hit()
            if hit is not None or not during_walk:
                return hit
        changes.drain()
        # (what deleted files of a known size gave back since counts at once; a cell is blamed only for growth)
        net = self.added + changes.grown - changes.freed
        if self.limit is not None and changes.grown > _GROWTH and net > self.limit:
            return "writes"
        created = changes.created
        if self.files_limit is not None and created > _NEW_FILES and self.files_added + created > self.files_limit:
            return "files"
        return None

    def check(
        self,
        *,
        stop: bool = False,
        only_if_grown: bool = False,
        writes: bool = True,
        shm: bool = True,
        fast: bool = False,
    ) -> str | None:
        """One look (at the writes, at /dev/shm); the limit overdrawn now, else None. ``stop``: kill
        the cells' processes when so (the watcher; not at the end of a cell, which is only reported).
        ``only_if_grown``: walk the folders only when their file systems lost free space since the
        last look (a ``statvfs`` each), as at the end of every cell. ``fast``: the changes the kernel
        reported since the last walk (no walk)."""
        with self._lock:
            hit = self._fast_hit() if fast else None
            # (files removed since the last walk: the walk counts what the small ones gave back, before the next cell)
            removed = self.usage is not None and self.usage.changes is not None and self.usage.changes.removed > 0
            if (
                writes
                and self.usage is not None
                and self._counts
                and (not only_if_grown or removed or self._fs_shrank())
            ):
                fs = self._free_space()  # (before: what lands during the walk is counted, maybe twice, never not)
                before, self.total = self.total, self.usage.measure(self._tick if stop else None)
                entries_before, self.entries = self.entries, self.usage.entries
                self._fs = fs
                if self.limit is not None and self.added > self.limit and self.total > before + _GROWTH:
                    hit = "writes"
                elif (
                    self.files_limit is not None
                    and self.files_added > self.files_limit
                    and self.entries > entries_before + _NEW_FILES
                ):
                    hit = "files"
            pid = self.worker_pid() if shm and self._samples else None
            used = self._tmpfs_used(pid) if pid is not None else None
            if pid is not None and (self.memory_limit is not None or self.count_tasks):
                found = self._sandbox_sample(pid)
                if found is not None:
                    resident, tasks = found
                    if self.cell_running:
                        self.tasks_peak = max(self.tasks_peak, tasks)
                    sample = resident + (used or 0)
                    self.memory_peak = max(self.memory_peak, sample)
                    if self.memory_limit is not None and sample > self.memory_limit:
                        hit = hit or "memory"
            if pid is not None and self.shm_limit is not None:
                # a worker's first look is its baseline (a new one may find what the last one left)
                last = self._shm_before
                baseline = last[1] if last is not None and last[0] == pid else None
                if used is not None and baseline is not None and used > self.shm_limit and used > baseline + _GROWTH:
                    hit = hit or "shm"
                self._shm_before = (pid, used) if used is not None else None
            if hit is not None:
                self.hits[hit] += 1
                if stop:
                    with contextlib.suppress(Exception):
                        self.stop_cells(self.cell_running)
                    # what the killed processes had in flight lands now: the next look starts from here
                    time.sleep(0.05)
                    if self.usage is not None and self._counts:
                        fs = self._free_space()
                        self.total = self.usage.measure()
                        self.entries = self.usage.entries
                        self._fs = fs
                    if pid is not None:
                        after = self._tmpfs_used(pid)
                        self._shm_before = (pid, after) if after is not None else None
            return hit

    @property
    def _counts(self) -> bool:
        """Does the watch keep the writable folders' books (bytes or files added)?"""
        return self.usage is not None and (self.limit is not None or self.files_limit is not None)

    def _blind_hit(self) -> str | None:
        """The limit overdrawn while the kernel's changes are incomplete (its watches ran out, its queue
        overflowed, a big tree was renamed), until the next walk: the file systems' net loss since the
        last walk stands for what the session added. Fail closed: what the host writes to the same file
        systems meanwhile (the recording's files too) is counted as the session's."""
        lost, inodes = self._fs_lost()
        if self.limit is not None and lost > _GROWTH and self.added + lost > self.limit:
            return "writes"
        if self.files_limit is not None and inodes > _NEW_FILES and self.files_added + inodes > self.files_limit:
            return "files"
        return None

    @property
    def files_added(self) -> int:
        return max(0, self.entries - self.baseline_entries)

    @property
    def _samples(self) -> bool:
        """Does the watch look at the sandbox itself (its tmpfs, its memory, its tasks)?"""
        return self.shm_limit is not None or self.memory_limit is not None or self.count_tasks

    def _sandbox_sample(self, worker: int) -> tuple[int, int] | None:
        """(resident bytes, tasks) of every process of the worker's sandbox (its pid namespace's first
        process and all below it: the worker, what cells started, their orphans), from ``statm`` and
        the ``task`` folders; None when the worker is gone."""
        init = self._sandbox_init[1] if self._sandbox_init is not None and self._sandbox_init[0] == worker else None
        if init is None:
            try:
                relay = psutil.Process(worker).parent()
                first = relay.parent() if relay is not None else None
            except psutil.Error:
                return None
            init = first.pid if first is not None else worker
            self._sandbox_init = (worker, init)
        total = tasks = 0
        for pid in (init, *descendant_pids(init)):
            try:
                with open(f"/proc/{pid}/statm", "rb") as handle:
                    total += int(handle.read().split()[1]) * _PAGE
                tasks += len(os.listdir(f"/proc/{pid}/task")) if self.count_tasks else 0
            except (OSError, ValueError, IndexError):
                continue
        return total, tasks

    def _tmpfs_used(self, pid: int) -> int | None:
        """Bytes on the sandbox's own tmpfs mounts (its ``/dev``, ``/dev/shm`` in it), measured on each
        mount; a mount a cell made unreachable counts as past the cap (``blinded`` names it)."""
        found = sandbox_tmpfs_used(pid, self.own_tmpfs)
        if found is None:
            return None
        used, self.blinded, full = found
        if full and not self._dev_full:  # a cap the kernel holds (``_devcap``): the writes failed, nothing to stop
            self.hits["shm_full"] += 1
        self._dev_full = full
        return used + ((self.shm_limit or 0) + 2 * _GROWTH if self.blinded else 0)

    def _free_space(self) -> list[tuple[str, int, int]]:
        """(folder, free bytes, free inodes) of each writable folder's file system, once each."""
        out, seen = [], set()
        for folder in self.usage.folders if self.usage is not None else []:
            with contextlib.suppress(OSError):
                device = os.stat(folder).st_dev
                if device not in seen:
                    seen.add(device)
                    info = os.statvfs(folder)
                    out.append((folder, info.f_bavail * info.f_frsize, info.f_ffree))
        return out

    def _fs_lost(self) -> tuple[int, int]:
        """(bytes, inodes) the writable folders' file systems lost since before the last walk, net (a
        ``statvfs`` each); one that cannot be looked at any more counts as having lost everything."""
        lost = inodes = 0
        for folder, free, files in self._fs:
            try:
                info = os.statvfs(folder)
            except OSError:
                return 1 << 62, 1 << 62
            lost += free - info.f_bavail * info.f_frsize
            inodes += files - info.f_ffree
        return lost, inodes

    def _fs_shrank(self) -> bool:
        """Did a writable folder's file system lose free blocks or inodes since the last walk (a file
        created, even an empty one)?"""
        if not self._fs:
            return True
        for folder, free, inodes in self._fs:
            try:
                info = os.statvfs(folder)
            except OSError:
                return True
            if info.f_bavail * info.f_frsize < free or info.f_ffree < inodes:
                return True
        return False


def kill_cells(worker: psutil.Process, *, with_worker: bool = True) -> None:
    """Kill what the cells run: every process of the worker's sandbox (its pid namespace) but the
    namespace's first process and mcp-console's relay, and the worker itself ``with_worker`` (the
    server sees a worker that died, as after a memory kill, and the next cell gets a new one).
    Orphans of the cells reparent to that first process, so they are among its descendants."""
    try:
        namespace = os.readlink(f"/proc/{worker.pid}/ns/pid")
        relay = worker.parent()
        init = relay.parent() if relay is not None else None
    except (OSError, psutil.Error):
        return
    targets = [worker] if with_worker else []
    if relay is not None and init is not None:
        with contextlib.suppress(psutil.Error):
            for proc in init.children(recursive=True):
                with contextlib.suppress(OSError, psutil.Error):
                    if proc.pid in (relay.pid, worker.pid):
                        continue
                    if os.readlink(f"/proc/{proc.pid}/ns/pid") == namespace:
                        targets.append(proc)
    for proc in targets:
        with contextlib.suppress(psutil.Error):
            proc.kill()
