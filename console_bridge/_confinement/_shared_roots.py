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

**Hidden names, held.** The same hold keeps a hidden name (a credential store, a ``deny_read`` entry)
that is missing at start in a writable folder: otherwise a cell could make it, keep it open, and read
what the host writes there later (a mount over the name does not revoke an open file; issue 42). The
bridge makes the first missing step of its way itself before the server starts (``placeholders``:
an empty file for the name, 0600, so the host can write it; an empty folder, 0700, for a folder on the
way or a store that is a folder), and the view masks it from the start, so no cell ever holds an
inode under that name. Removed, like the names above, by the last session out while still empty.
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

__all__ = ["FOLDERS", "WORKSPACE", "Held", "Names", "RootHold", "placeholders", "protected_roots"]


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


#: A placeholder: (the writable folder, the missing step's path below it, whether it is a folder).
Held = tuple[Path, str, bool]


def placeholders(hidden: Sequence[str], writable: Sequence[Path], folders: Sequence[str] = ()) -> list[Held]:
    """For each name in ``hidden`` missing below a folder of ``writable``: the first missing step of its
    way, a folder when it is on the way or the name is in ``folders``, else a file. A step past a
    symlink or a file is left alone (the name is elsewhere, shown or hidden by its own rules)."""
    out: dict[tuple[Path, str], bool] = {}
    for name in hidden:
        inside = [Path(root) for root in writable if _below(name, str(root))]
        if not inside:
            continue
        root = max(inside, key=lambda path: len(str(path)))
        parts = Path(name).relative_to(root).parts
        for index in range(len(parts)):
            step = root.joinpath(*parts[: index + 1])
            try:
                info = step.lstat()
            except FileNotFoundError:
                last = index == len(parts) - 1
                out.setdefault((root, "/".join(parts[: index + 1])), not last or name in folders)
                break
            except OSError:
                break
            if not stat.S_ISDIR(info.st_mode):
                break
    return [(root, step, folder) for (root, step), folder in out.items()]


def _below(path: str, root: str) -> bool:
    return path != root and path.startswith(root.rstrip("/") + "/")


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

    def acquire(self, roots: Sequence[tuple[Path, Names]], held: Sequence[Held] = ()) -> None:
        """Hold each writable folder and make its missing names, and the placeholders of ``held``
        (blocking: a closing session holds a folder exclusively for as long as it removes a few empty
        names). Raises LaunchRefused when a folder stays locked exclusively for ``wait`` seconds;
        what it holds by then is released."""
        self._folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        wanted: dict[Path, list[tuple[str, bool, bool]]] = {}
        for given, names in roots:
            wanted.setdefault(Path(os.path.realpath(given)), []).extend((name, folder, False) for name, folder in names)
        for given, step, folder in held:
            wanted.setdefault(Path(os.path.realpath(given)), []).append((step, folder, True))
        try:
            for root, steps in wanted.items():
                known = next((item for item in self._held if item.root == root), None)
                if known is not None:
                    fd, locked, made_list = known.fd, True, known.made
                else:
                    opened = self._lock_shared(root)
                    if opened is None:
                        continue  # mcp-console says what is wrong with the folder
                    fd, locked = opened
                    info = os.fstat(fd)
                    made_list = self._folder / f"{info.st_dev:x}-{info.st_ino:x}.made"
                    if locked:
                        self._held.append(_Held(root, made_list, fd, (info.st_dev, info.st_ino)))
                made = [name for name, folder, writable in steps if _make(fd, name, folder=folder, writable=writable)]
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


def _parent(dir_fd: int, name: str) -> tuple[int, str] | None:
    """The folder holding ``name`` (a path below ``dir_fd``, no symlink followed on the way), opened,
    and the last step; None when the way is not plain folders."""
    parts = name.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return None
    fd = os.dup(dir_fd)
    try:
        for part in parts[:-1]:
            below = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = below
    except OSError:
        os.close(fd)
        return None
    return fd, parts[-1]


def _make(dir_fd: int, name: str, *, folder: bool, writable: bool = False) -> bool:
    """Make ``name`` below the folder (an empty folder, or an empty file: read-only for mcp-console's
    names, the owner's to write for a held hidden name) unless something is there; whether it was made."""
    found = _parent(dir_fd, name)
    if found is None:
        return False
    fd, last = found
    try:
        if folder:
            os.mkdir(last, 0o700 if writable else 0o755, dir_fd=fd)
        else:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
            os.close(os.open(last, flags, 0o600 if writable else 0o444, dir_fd=fd))
    except OSError:
        return False  # there already (the user's own, or a symlink: left as it is), or not writable
    finally:
        os.close(fd)
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
            names = dict.fromkeys(line for line in item.made.read_text().splitlines() if line)
            for name in names:
                _remove_if_empty(fd, name)
            item.made.unlink()
    finally:
        os.close(fd)


def _remove_if_empty(dir_fd: int, name: str) -> None:
    found = _parent(dir_fd, name)
    if found is None:
        return
    fd, last = found
    with contextlib.suppress(OSError):
        info = os.stat(last, dir_fd=fd, follow_symlinks=False)
        if stat.S_ISDIR(info.st_mode):
            os.rmdir(last, dir_fd=fd)  # only an empty folder goes
        elif stat.S_ISREG(info.st_mode) and info.st_size == 0:
            os.unlink(last, dir_fd=fd)
    os.close(fd)
