"""The names mcp-console mounts over in a writable folder, kept in place while any session uses it.

mcp-console keeps a writable workspace's ``.git``, ``.agents``, ``.codex`` and ``.aws`` (and, from
0.0.6, ``.claude``; for 0.0.5 the bridge names it read-only) out of the cells' reach by mounting
over them in its sandbox; 0.0.5 does the same in writable roots, 0.0.6 does not. When a name is
missing it makes an empty folder (or file) to mount over, and removes it when its server ends.
Removing a name that is a mount point in *another* mount namespace detaches that mount there: on
a workspace two sessions share (a manager's pool, two notebooks), one session's close would strip
the other's protection, and its next cell could write ``.git/config`` or
``.agents/console/config.yaml`` on the host (``tests/confinement/test_shared_roots.py``).

So the bridge makes the missing names itself before the server starts, and removes them only when
no session of this user uses the folder any more:

- each writable folder has a lock file in the state folder (named by a hash of its path); every
  session holds it shared (``flock``) from before it makes the names until its supervisor, the
  last process of its tree, has ended: the host holds one descriptor, the supervisor another
  (taken in its own setup, so a host that dies does not free the folder while its cells live);
- the names the bridge made are listed beside the lock (one line each, appended);
- a session that ends takes the lock exclusively without waiting; if it gets it, no session uses
  the folder: it removes the listed names that are still empty (a folder the host filled, a file
  it wrote, stays), the list, and the lock file.

mcp-console never makes or removes these names then. Sessions of different users on one folder do
not see each other's locks: give them folders of their own (README, "What a cell can read").
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

__all__ = ["FOLDERS", "WORKSPACE", "Names", "RootHold", "protected_roots"]


Names = tuple[tuple[str, bool], ...]  # (name, is a folder)

#: What mcp-console mounts over in a writable folder, read from its bubblewrap arguments
#: (``test_shared_roots`` checks it makes nothing else). 0.0.6 keeps an empty read-only file at
#: ``.claude`` (so no ``.claude`` folder can be made); 0.0.5 does not, and the bridge's profile for
#: it names this file read-only in the workspace (``_vetting._profiles``).
FOLDERS: Names = ((".git", True), (".agents", True), (".codex", True), (".aws", True))
WORKSPACE: Names = (*FOLDERS, (".claude", False))


def protected_roots(version: Version, workspace: Path | None, others: Sequence[Path]) -> list[tuple[Path, Names]]:
    """Each writable folder of a session and the names mcp-console ``version`` mounts over in it:
    the workspace (``None`` when it is read-only) always; writable roots and the profile's
    ``read_write`` folders only for 0.0.5 (0.0.6 mounts over nothing in them)."""
    roots: list[tuple[Path, Names]] = [(workspace, WORKSPACE)] if workspace is not None else []
    if version < Version("0.0.6"):
        roots += [(root, FOLDERS) for root in others]
    return roots


@dataclass(frozen=True)
class _Held:
    root: Path
    lock: Path
    fd: int


class RootHold:
    """This session's shared hold on its writable folders (see the module's docstring)."""

    def __init__(self, folder: Path) -> None:
        self._folder = folder
        self._held: list[_Held] = []

    @property
    def locks(self) -> list[str]:
        """The lock files the supervisor holds too, for as long as it lives."""
        return [str(held.lock) for held in self._held]

    def acquire(self, roots: Sequence[tuple[Path, Names]]) -> None:
        """Hold each writable folder and make its missing names (blocking; a closing session's
        exclusive hold lasts as long as its removal of a few empty names)."""
        self._folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        for given, names in roots:
            root = Path(os.path.realpath(given))
            if any(held.root == root for held in self._held):
                continue
            lock = self._folder / hashlib.sha256(os.fsencode(root)).hexdigest()[:32]
            self._held.append(_Held(root, lock, _lock_shared(lock)))
            made = [name for name, folder in names if _make(root, name, folder=folder)]
            if made:
                fd = os.open(f"{lock}.made", os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
                try:
                    os.write(fd, "".join(f"{name}\n" for name in made).encode())
                finally:
                    os.close(fd)

    def release(self) -> None:
        """After the session's tree has ended: give each folder up; the last session out removes the
        names the bridge made that are still empty. Idempotent; never raises."""
        held, self._held = self._held, []
        for item in held:
            os.close(item.fd)
            with contextlib.suppress(OSError):
                _tidy_if_last(item)


def _lock_shared(lock: Path) -> int:
    """A shared hold on ``lock``, on the file its name still names (a last session removes it while
    it holds it exclusively)."""
    import fcntl  # (not at import: the package imports where there is no fcntl, to refuse there)

    while True:
        fd = os.open(lock, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            held = os.fstat(fd)
            named = os.stat(lock, follow_symlinks=False)
        except FileNotFoundError:
            os.close(fd)
            continue
        except BaseException:
            os.close(fd)
            raise
        if (held.st_dev, held.st_ino) == (named.st_dev, named.st_ino):
            return fd
        os.close(fd)


def _make(root: Path, name: str, *, folder: bool) -> bool:
    """Make ``root/name`` (an empty folder, or an empty read-only file) unless something is there;
    whether it was made."""
    try:
        dir_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return False  # mcp-console says what is wrong with the folder
    try:
        if folder:
            os.mkdir(name, 0o755, dir_fd=dir_fd)
        else:
            os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o444, dir_fd=dir_fd))
    except OSError:
        return False  # there already (the user's own, or a symlink: left as it is), or not writable
    finally:
        os.close(dir_fd)
    return True


def _tidy_if_last(item: _Held) -> None:
    import fcntl

    fd = os.open(item.lock, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return  # another session uses the folder: the last one tidies
        made = Path(f"{item.lock}.made")
        with contextlib.suppress(FileNotFoundError):
            names = dict.fromkeys(made.read_text().split())
            dir_fd = os.open(item.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                for name in names:
                    _remove_if_empty(dir_fd, name)
            finally:
                os.close(dir_fd)
            made.unlink()
        item.lock.unlink()
    finally:
        os.close(fd)


def _remove_if_empty(dir_fd: int, name: str) -> None:
    if "/" in name or name in ("", ".", ".."):
        return
    with contextlib.suppress(OSError):
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISDIR(info.st_mode):
            os.rmdir(name, dir_fd=dir_fd)  # only an empty folder goes
        elif stat.S_ISREG(info.st_mode) and info.st_size == 0:
            os.unlink(name, dir_fd=dir_fd)
