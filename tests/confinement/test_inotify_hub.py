"""Issue 35: every watch of the host process shares one inotify instance (``_inotify._Hub``).

Two instances per session (the recording's cap, the writes' changes) spent the kernel's per-user
default of 128 at 64 sessions (``scripts/bench.py --density 100`` stopped there). The hub keeps what
each watch saw before: its folders' events only, the events it asked for, overflows, and a kernel
watch that lives while any watch holds its folder.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from console_bridge._confinement import _inotify
from console_bridge._confinement._inotify import ChangeWatch, FolderWatch


def _instances() -> list[int]:
    """This process's inotify descriptors."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}") == "anon_inode:inotify":
                found.append(int(name))
        except OSError:
            continue
    return found


def _kernel_watches(fd: int) -> int:
    with open(f"/proc/self/fdinfo/{fd}") as info:
        return sum(1 for line in info if line.startswith("inotify wd:"))


def test_many_watches_hold_one_instance_and_see_their_own_folders(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    a, b, changes = FolderWatch(), FolderWatch(), ChangeWatch()
    try:
        assert a.fd == b.fd == changes.fd >= 0
        assert a.fd in _instances() and len(_instances()) == 1
        assert a.add(str(one)) and b.add(str(two))
        (one / "x").write_text("1")
        (two / "y").write_text("2")
        assert a.drain() == {str(one): {"x"}}
        assert b.drain() == {str(two): {"y"}}
        assert a.drain() == {} and b.drain() == {}  # taken once
    finally:
        a.close()
        b.close()
        changes.close()


def test_a_folder_two_watches_hold_stays_watched_until_both_let_go(tmp_path: Path) -> None:
    a, b = FolderWatch(), FolderWatch()
    fd = a.fd
    before = _kernel_watches(fd)
    assert a.add(str(tmp_path)) and b.add(str(tmp_path))
    assert _kernel_watches(fd) == before + 1  # one kernel watch for both
    (tmp_path / "first").write_text("")
    assert a.drain() == b.drain() == {str(tmp_path): {"first"}}
    a.close()
    (tmp_path / "second").write_text("")
    assert b.drain() == {str(tmp_path): {"second"}}
    assert _kernel_watches(fd) == before + 1
    b.close()
    assert _kernel_watches(fd) == before  # removed with the last watch that held it


def test_each_watch_gets_the_events_it_asked_for(tmp_path: Path) -> None:
    """A folder watched for names (FolderWatch) and for changes (ChangeWatch): writes to a file go to
    the changes only; the new name to both."""
    target = tmp_path / "data.bin"
    names, changes = FolderWatch(), ChangeWatch()
    try:
        assert names.add(str(tmp_path))
        changes.add(str(tmp_path))
        changes.walked()
        target.write_bytes(b"x" * 100_000)
        assert names.drain() == {str(tmp_path): {"data.bin"}}
        changes.drain()
        assert changes.created == 1 and changes.grown >= 100_000
        with target.open("ab") as more:
            more.write(b"y" * 100_000)
        assert names.drain() == {}  # a write is no new name
        changes.drain()
        assert changes.grown >= 200_000
    finally:
        names.close()
        changes.close()


def test_a_watch_that_falls_behind_is_told_it_lost_events(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_inotify, "_MAX_WAITING", 5)
    slow, other = FolderWatch(), FolderWatch()
    try:
        assert slow.add(str(tmp_path)) and other.add(str(tmp_path))
        for i in range(20):
            (tmp_path / f"f{i}").write_text("")
        other.drain()  # reads the queue for everyone: slow's share overflows
        slow.drain()
        assert slow.overflowed
    finally:
        slow.close()
        other.close()


def test_a_forked_child_gets_a_hub_of_its_own(tmp_path: Path) -> None:
    parent = FolderWatch()
    try:
        pid = os.fork()
        if pid == 0:  # the child: its watches must not read the parent's queue
            child = FolderWatch()
            os._exit(0 if child.fd >= 0 and child.fd != parent.fd else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        parent.close()


def test_a_watch_collected_while_the_hub_is_busy_does_not_deadlock(tmp_path: Path) -> None:
    """The garbage collector may run a watch's finalizer in a thread that holds the hub's lock (inside
    its routing): a finalizer that took the lock hung the full suite's two workers. It only queues now."""
    import gc
    import threading

    hub = _inotify._hub()
    done = threading.Event()

    def collect_while_busy() -> None:
        watch = FolderWatch()
        watch.add(str(tmp_path))
        watch.cycle = watch  # type: ignore[attr-defined]  # only the collector frees it
        del watch
        with hub.lock:
            gc.collect()  # the finalizer runs here, under the lock
        done.set()

    worker = threading.Thread(target=collect_while_busy, daemon=True)
    worker.start()
    worker.join(10)
    assert done.is_set(), "the finalizer deadlocked on the hub's lock"
    other = FolderWatch()
    try:
        other.drain()  # the next call forgets the collected watch
        assert not hub.dropped
    finally:
        other.close()
