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

__all__ = ["TmpdirFiles"]


class TmpdirFiles:
    """``put``/``get``/``list`` for the cell's data folder: ``<TMPDIR>/sandbox-XXXX/data`` (mcp-console
    gives each worker one; the newest is the running worker's). Blocking: run in a thread."""

    def __init__(self, open_root: Callable[[], int | None], tmpdir: Path) -> None:
        self.open_root, self.tmpdir = open_root, tmpdir

    def _data_dir(self) -> tuple[int, str]:
        """(fd of the cell's data folder, the path cells use for it)."""
        root = self.open_root()
        if root is None:
            raise NotAllowed("the session's TMPDIR is not available (the console is not running)")
        try:
            candidates = []
            for name in os.listdir(root):
                if not name.startswith("sandbox-"):
                    continue
                with contextlib.suppress(OSError):
                    info = os.stat(name, dir_fd=root, follow_symlinks=False)
                    if stat.S_ISDIR(info.st_mode):
                        candidates.append((info.st_mtime, name))
            if not candidates:
                raise NotAllowed("the session's worker has not started yet; run a cell first")
            name = max(candidates)[1]
            sandbox = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=root)
            try:
                data = os.open("data", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=sandbox)
            finally:
                os.close(sandbox)
        finally:
            os.close(root)
        return data, str(self.tmpdir / name / "data")

    def put(self, name: str, data: bytes) -> str:
        fd, cell_path = self._data_dir()
        try:
            write_file(fd, name, data)
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
