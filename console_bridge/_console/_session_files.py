"""A part of :class:`AsyncConsole`: files in and out of the session's private TMPDIR (``put``,
``get``, ``list``) and the carry of those files to a fresh worker around a restart.

The facade checks the caller and the session's state first; this part does the files, in a
thread, through ``TmpdirFiles`` (never through a symlink), and says what failed as
:class:`NotAllowed`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import anyio

from console_bridge._console._files import check_glob, glob_match
from console_bridge._console._tmpdir_io import MAX_CARRIED, TmpdirFiles
from console_bridge._errors import NotAllowed

__all__ = ["SessionFiles"]


class SessionFiles:
    """The session's TMPDIR files, as its cells see them.

    ``open_root`` gives an fd of the TMPDIR root inside the session's view (None when the session
    is not running), ``tmpdir`` its path as cells see it (asked for at each use: it exists once the
    confinement is prepared). ``private`` is the bridge's own folder in a worker's data folder,
    never listed; ``notices`` is the session's list of notices (a restart that could not carry
    every file says so there).
    """

    def __init__(
        self, open_root: Callable[[], int | None], tmpdir: Callable[[], Path], *, private: str, notices: list[str]
    ) -> None:
        self._open_root = open_root
        self._tmpdir = tmpdir
        self._private = private + "/"
        self._notices = notices

    def _files(self) -> TmpdirFiles:
        return TmpdirFiles(self._open_root, self._tmpdir())

    async def put(self, name: str, data: bytes | bytearray | memoryview) -> str:
        """Write ``data`` to ``name`` in the running worker's data folder; the path a cell opens."""
        if not isinstance(data, bytes | bytearray | memoryview):
            raise NotAllowed("put_file data must be bytes")
        payload = bytes(data)
        try:
            return await anyio.to_thread.run_sync(lambda: self._files().put(name, payload))
        except OSError as exc:
            raise NotAllowed(f"put_file({name!r}) failed: {exc.strerror or exc}; pick a new name") from None

    async def get(self, name: str, max_bytes: int) -> bytes:
        """The bytes of ``name`` in the running worker's data folder, at most ``max_bytes``."""
        try:
            return await anyio.to_thread.run_sync(lambda: self._files().get(name, max_bytes))
        except OSError as exc:
            raise NotAllowed(f"get_file({name!r}) failed: {exc.strerror or exc}; check the name") from None

    async def find(self, pattern: str) -> list[str]:
        """The names (relative, sorted) of the regular files that match the glob ``pattern``; the
        bridge's own folder left out."""
        check_glob(pattern)
        try:
            found = await anyio.to_thread.run_sync(self._files().list)
        except OSError as exc:
            raise NotAllowed(f"list_files({pattern!r}) failed: {exc.strerror or exc}") from None
        return sorted(name for name, _ in found if not name.startswith(self._private) and glob_match(pattern, name))

    @contextlib.asynccontextmanager
    async def kept(self) -> AsyncIterator[None]:
        """Around a restart: the worker's TMPDIR files go to the fresh worker (see ``TmpdirFiles``)."""
        files = self._files()
        left = await anyio.to_thread.run_sync(files.set_aside)
        if left:
            self._notices.append(
                f"a restart could not carry {left} entries of the TMPDIR to the fresh worker (at most "
                f"{MAX_CARRIED} are carried; a folder counts as one); they are gone"
            )
        try:
            yield
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(files.bring_back)
