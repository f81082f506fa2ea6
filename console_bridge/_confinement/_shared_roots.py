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
no session uses the folder any more:

- every session holds the folder itself locked, shared (``flock`` on the folder's own inode, so one
  folder reached by two paths, bind mounts, other state folders and other users all see one lock),
  from before it makes the names until its supervisor, the last process of its tree, has ended:
  the host holds one descriptor, the supervisor another (taken in its own setup, so a host that
  dies does not free the folder while its cells live). A cell cannot take the lock exclusively:
  its own session holds it shared (a session whose workspace is read-only holds it too);
- the names the bridge made are listed in the state folder (by the folder's device and inode);
- a session that ends takes the lock exclusively without waiting; if it gets it, no session uses
  the folder: it removes the listed names that are still empty (a folder the host filled, a file
  it wrote, stays) and the list. Names another state folder listed stay until one of its sessions
  is the last out;
- a folder whose file system cannot lock it (some network file systems) gets its names made and
  never removed, which is safe.

mcp-console never makes or removes these names then.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from console_bridge._errors import LaunchRefused

__all__ = ["FOLDERS", "WORKSPACE", "Names", "RootHold", "protected_roots"]


Names = tuple[tuple[str, bool], ...]  # (name, is a folder)

#: What mcp-console mounts over in a writable folder, read from its bubblewrap arguments
#: (``test_shared_roots`` checks it makes nothing else). 0.0.6 keeps an empty read-only file at
#: ``.claude`` (so no ``.claude`` folder can be made); 0.0.5 does not, and the bridge's profile for
#: it names this file read-only in the workspace (``_vetting._profiles``).
FOLDERS: Names = ((".git", True), (".agents", True), (".codex", True), (".aws", True))
WORKSPACE: Names = (*FOLDERS, (".claude", False))


def protected_roots(
    version: Version, workspace: Path, others: Sequence[Path], *, workspace_writable: bool
) -> list[tuple[Path, Names]]:
    """Each folder a session holds and the names mcp-console ``version`` mounts over in it: the
    workspace always (held with no names when it is read-only, so that no cell of this session can
    lock it exclusively and stall the starts of sessions that write there); writable roots and the
    profile's ``read_write`` folders only for 0.0.5 (0.0.6 mounts over nothing in them)."""
    roots: list[tuple[Path, Names]] = [(workspace, WORKSPACE if workspace_writable else ())]
    if version < Version("0.0.6"):
        roots += [(root, FOLDERS) for root in others]
    return roots


@dataclass(frozen=True)
class _Held:
    root: Path
    made: Path  # the list of names the bridge made there
    fd: int  # the folder, locked shared
    inode: tuple[int, int]  # the folder's (device, inode), which names the list


class RootHold:
    """This session's shared hold on its writable folders (see the module's docstring)."""

    def __init__(self, folder: Path, *, wait: float = 10.0) -> None:
        self._folder = folder
        self._wait = wait
        self._held: list[_Held] = []

    @property
    def locks(self) -> list[str]:
        """The folders the supervisor locks too, for as long as it lives."""
        return [str(held.root) for held in self._held]

    def acquire(self, roots: Sequence[tuple[Path, Names]]) -> None:
        """Hold each writable folder and make its missing names (blocking: a closing session holds a
        folder exclusively for as long as it removes a few empty names). Raises LaunchRefused when a
        folder stays locked exclusively for ``wait`` seconds; what it holds by then is released."""
        self._folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            for given, names in roots:
                root = Path(os.path.realpath(given))
                if any(held.root == root for held in self._held):
                    continue
                opened = self._lock_shared(root)
                if opened is None:
                    continue  # mcp-console says what is wrong with the folder
                fd, locked = opened
                info = os.fstat(fd)
                made_list = self._folder / f"{info.st_dev:x}-{info.st_ino:x}.made"
                if locked:
                    self._held.append(_Held(root, made_list, fd, (info.st_dev, info.st_ino)))
                made = [name for name, folder in names if _make(fd, name, folder=folder)]
                if not locked:
                    os.close(fd)  # this file system cannot lock it: the names are made and left in place
                elif made:
                    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
                    out = os.open(made_list, flags, 0o600)
                    try:
                        os.write(out, "".join(f"{name}\n" for name in made).encode())
                    finally:
                        os.close(out)
        except BaseException:
            self.release()
            raise

    def _lock_shared(self, root: Path) -> tuple[int, bool] | None:
        """(the folder's descriptor, whether it is locked shared); None when it cannot be opened."""
        import fcntl  # (not at import: the package imports where there is no fcntl, to refuse there)

        try:
            fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return None
        deadline = time.monotonic() + self._wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                return fd, True
            except BlockingIOError:
                if time.monotonic() < deadline:
                    time.sleep(0.01)
                    continue
                os.close(fd)
                raise LaunchRefused(
                    f"the writable folder {root} stayed locked exclusively for {self._wait:g} s (a closing session "
                    "holds it for milliseconds; another process holds it now). Nothing was started; find the "
                    f"process with `fuser -v {root}` or start again."
                ) from None
            except OSError:
                return fd, False

    def release(self) -> None:
        """After the session's tree has ended: give each folder up; the last session out removes the
        names the bridge made that are still empty. Idempotent; never raises."""
        held, self._held = self._held, []
        for item in held:
            os.close(item.fd)
            with contextlib.suppress(OSError):
                _tidy_if_last(item)


def _make(dir_fd: int, name: str, *, folder: bool) -> bool:
    """Make ``name`` in the folder (an empty folder, or an empty read-only file) unless something is
    there; whether it was made."""
    try:
        if folder:
            os.mkdir(name, 0o755, dir_fd=dir_fd)
        else:
            os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o444, dir_fd=dir_fd))
    except OSError:
        return False  # there already (the user's own, or a symlink: left as it is), or not writable
    return True


def _tidy_if_last(item: _Held) -> None:
    import fcntl

    fd = os.open(item.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return  # another session uses the folder: the last one tidies
        info = os.fstat(fd)
        if (info.st_dev, info.st_ino) != item.inode:
            return  # the path names another folder now
        with contextlib.suppress(FileNotFoundError):
            names = dict.fromkeys(item.made.read_text().split())
            for name in names:
                _remove_if_empty(fd, name)
            item.made.unlink()
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
