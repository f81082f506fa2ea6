"""Files in and out of a running session's TMPDIR, as its cells see it (through the server's view).

``open_root`` gives an fd of the TMPDIR inside the session's view (``SessionConfinement.open_tmp_root``);
every access goes through ``dir_fd`` without following symlinks (see ``_hostfs``).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable
from pathlib import Path

from console_bridge._errors import NotAllowed
from console_bridge._hostfs import read_file, walk_root, write_file

__all__ = ["MAX_CARRIED", "TmpdirFiles"]

#: Where a restart keeps the worker's files: in the TMPDIR root, beside the workers' folders.
_KEPT = ".console-bridge-kept"
#: The bridge's own entries in a data folder (the outcome hooks' folder): each worker makes its own.
_OWN = ".console-bridge-"
#: At most this many entries of a data folder are carried over a restart (a folder counts as one).
MAX_CARRIED = 10_000


def _move_all(source: int, target: int) -> tuple[int, int]:
    """Rename the entries of folder ``source`` into folder ``target`` (both fds); the bridge's own
    entries and names ``target`` already has stay. (How many moved, how many of the others stayed.)"""
    moved = 0
    names = [name for name in sorted(os.listdir(source)) if not name.startswith(_OWN)]
    for name in names[:MAX_CARRIED]:
        try:
            os.stat(name, dir_fd=target, follow_symlinks=False)
        except FileNotFoundError:
            pass
        else:
            continue  # the target has it: never replaced
        with contextlib.suppress(OSError):
            os.rename(name, name, src_dir_fd=source, dst_dir_fd=target)
            moved += 1
    return moved, len(names) - moved


class TmpdirFiles:
    """``put``/``get``/``list`` for the cell's data folder: ``<TMPDIR>/sandbox-XXXX/data`` (mcp-console
    gives each worker one; the newest is the running worker's). Blocking: run in a thread."""

    def __init__(self, open_root: Callable[[], int | None], tmpdir: Path) -> None:
        self.open_root, self.tmpdir = open_root, tmpdir

    def _newest_sandbox(self, root: int) -> str | None:
        """The running worker's folder in the TMPDIR root ``root``: of the ``sandbox-*`` folders, the
        newest whose data folder has the bridge's own entry (the worker's startup code made it; a
        cell can set its folder's mtime, not plant that in another), else the newest."""
        candidates = []
        for name in os.listdir(root):
            if not name.startswith("sandbox-"):
                continue
            with contextlib.suppress(OSError):
                info = os.stat(name, dir_fd=root, follow_symlinks=False)
                if stat.S_ISDIR(info.st_mode):
                    candidates.append((self._booted(root, name), info.st_mtime, name))
        return max(candidates)[2] if candidates else None

    def _booted(self, root: int, sandbox: str) -> bool:
        try:
            data = self._open_data(root, sandbox)
        except OSError:
            return False
        try:
            return any(name.startswith(_OWN) for name in os.listdir(data))
        finally:
            os.close(data)

    def _open_data(self, root: int, sandbox: str) -> int:
        fd = os.open(sandbox, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=root)
        try:
            return os.open("data", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
        finally:
            os.close(fd)

    def _data_dir(self) -> tuple[int, str]:
        """(fd of the cell's data folder, the path cells use for it)."""
        root = self.open_root()
        if root is None:
            raise NotAllowed("the session's TMPDIR is not available (the console is not running)")
        try:
            name = self._newest_sandbox(root)
            if name is None:
                raise NotAllowed("the session's worker has not started yet; run a cell first")
            data = self._open_data(root, name)
        finally:
            os.close(root)
        return data, str(self.tmpdir / name / "data")

    # mcp-console gives a fresh worker a fresh, empty folder and removes the old one. Around a
    # restart the files are moved aside, into a folder of the TMPDIR root that no worker's sandbox
    # shows, and back into the new worker's folder: renames on the same tmpfs, no copy, nothing
    # followed (every name is taken relative to an fd opened without following links). A worker
    # that dies (a limit, a crash) takes its files with it: mcp-console removes the folder before
    # the bridge hears of it.
    def set_aside(self) -> int:
        """Before a restart: move the worker's files aside; how many entries could not be (past
        ``MAX_CARRIED``, or a rename refused): the restart removes those. Blocking."""
        return self._carry(aside=True)[1]

    def bring_back(self) -> int:
        """After a restart: move the files set aside into the running worker's folder (a name it
        already has is left aside); how many were moved. Blocking."""
        return self._carry(aside=False)[0]

    def _carry(self, *, aside: bool) -> tuple[int, int]:
        """Move between the running worker's data folder and the kept folder (made when setting
        aside); ``_move_all``'s (moved, stayed), or (0, 0) when either folder is not there."""
        root = self.open_root()
        if root is None:
            return 0, 0
        try:
            if aside:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(_KEPT, 0o700, dir_fd=root)
            kept = os.open(_KEPT, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=root)
            try:
                sandbox = self._newest_sandbox(root)
                if sandbox is None:
                    return 0, 0
                data = self._open_data(root, sandbox)
                try:
                    return _move_all(data, kept) if aside else _move_all(kept, data)
                finally:
                    os.close(data)
            finally:
                os.close(kept)
        except OSError:  # (no kept folder to bring back from, a folder replaced by a link, ...)
            return 0, 0
        finally:
            os.close(root)

    def put(self, name: str, data: bytes) -> str:
        fd, cell_path = self._data_dir()
        try:
            write_file(fd, name, data, inherit_owner=True)  # root's sessions: the cells' own ids
        finally:
            os.close(fd)
        return f"{cell_path}/{name}"

    def get(self, name: str, max_bytes: int) -> bytes:
        fd, _ = self._data_dir()
        try:
            return read_file(fd, name, max_bytes)
        finally:
            os.close(fd)

    def list(self) -> list[tuple[str, int]]:
        """(name, size) of each regular file, names relative to the data folder; symlinks and
        special files are left out."""
        fd, _ = self._data_dir()
        try:
            return [(entry.name, entry.info.st_size) for entry in walk_root(fd) if not entry.is_dir]
        finally:
            os.close(fd)
