"""Every live session on the machine: one private folder per session, and the sweep.

Layout (per user; ``CONSOLE_BRIDGE_STATE_DIR`` moves it)::

    <state dir>/sessions/            0700; denied to every cell
        <session id>/                0700; removed by the session's supervisor at its end
            session.json             0600: id, pids, owner, workspace, profile, created, recording
            tmp/                     the session's TMPDIR (a size-capped tmpfs where the host allows)

All sessions' folders sit under one root that every session's sandbox denies, so one
session cannot read another's, whatever order they start in; where the TMPDIR is a
tmpfs it lives in the supervisor's private mount namespace and is not even visible
from the host. ``session.json`` never holds secrets: no arguments, no code, no
environment.

A session whose supervisor and host are both gone is *stale*: :func:`sweep` kills
anything left in its cgroups, removes them and its folder.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import platformdirs
import psutil

from console_bridge._confinement._cgroups import remove_group, stale_groups

__all__ = ["SessionEntry", "entries", "find_entry", "new_session_id", "register", "sessions_root", "sweep"]

_ENV = "CONSOLE_BRIDGE_STATE_DIR"
_ENTRY = "session.json"


def state_dir() -> Path:
    return Path(os.environ.get(_ENV) or platformdirs.user_state_dir("console-bridge")).expanduser().absolute()


def sessions_root() -> Path:
    """The folder holding every live session's private folder (created 0700)."""
    root = state_dir() / "sessions"
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    with contextlib.suppress(OSError):
        os.chmod(root, 0o700)
    return root


def r_hooks_dir() -> Path:
    """Files the sandboxed R worker must read (outside the denied state folder): one per session."""
    folder = Path(os.environ.get("CONSOLE_BRIDGE_CACHE_DIR") or platformdirs.user_cache_dir("console-bridge"))
    folder = folder.expanduser().absolute() / "r-hooks"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def new_session_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S") + "-" + secrets.token_hex(4)


def _start_time(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def _same_process(pid: int | None, started: float | None) -> bool:
    """``pid`` still names the process that started at ``started`` (not a recycled pid)."""
    if not pid:
        return False
    now = _start_time(pid)
    if now is None:
        return False
    try:
        if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return False
    except psutil.Error:
        return False
    return started is None or abs(now - started) < 0.05


@dataclass
class SessionEntry:
    """What the registry knows of one session (never secrets)."""

    id: str
    folder: str
    host_pid: int
    host_started: float | None
    created: float
    owner: str = ""
    workspace: str = ""
    profile: str = ""
    supervisor_pid: int | None = None
    supervisor_started: float | None = None
    server_pid: int | None = None
    recording_base: str = ""
    recording: str | None = None
    cgroups: list[str] = field(default_factory=list)

    @property
    def path(self) -> Path:
        return Path(self.folder)

    @property
    def tmpdir(self) -> Path:
        return self.path / "tmp"

    def alive(self) -> bool:
        """The supervisor runs, or (before it was spawned) the host does."""
        if self.supervisor_pid is not None:
            return _same_process(self.supervisor_pid, self.supervisor_started)
        return _same_process(self.host_pid, self.host_started)

    def host_alive(self) -> bool:
        return _same_process(self.host_pid, self.host_started)

    def save(self) -> None:
        data = json.dumps(asdict(self), indent=1).encode()
        target = self.path / _ENTRY
        temp = self.path / f".{_ENTRY}.{secrets.token_hex(4)}"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        os.replace(temp, target)

    def signal_supervisor(self, sig: signal.Signals) -> bool:
        if self.supervisor_pid is None or not _same_process(self.supervisor_pid, self.supervisor_started):
            return False
        try:
            os.kill(self.supervisor_pid, sig)
        except OSError:
            return False
        return True


def register(*, owner: str, workspace: str, profile: str, recording_base: str) -> SessionEntry:
    """Create a new session's private folder (0700) with its ``tmp/`` and entry (0600)."""
    root = sessions_root()
    sweep(root)
    session_id = new_session_id()
    folder = root / session_id
    folder.mkdir(mode=0o700)
    (folder / "tmp").mkdir(mode=0o700)
    entry = SessionEntry(
        id=session_id,
        folder=str(folder),
        host_pid=os.getpid(),
        host_started=_start_time(os.getpid()),
        created=time.time(),
        owner=owner,
        workspace=workspace,
        profile=profile,
        recording_base=recording_base,
    )
    entry.save()
    return entry


def _load(folder: Path) -> SessionEntry | None:
    try:
        fd = os.open(folder / _ENTRY, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as handle:
            data: Any = json.loads(handle.read(1 << 20))
        return SessionEntry(**data)
    except (OSError, ValueError, TypeError):
        return None


def entries(root: Path | None = None) -> Iterator[SessionEntry | Path]:
    """Each session folder's entry (or the folder, when it has no readable entry)."""
    root = root if root is not None else sessions_root()
    with contextlib.suppress(OSError):
        for folder in sorted(root.iterdir()):
            if folder.is_dir() and not folder.is_symlink():
                yield _load(folder) or folder


def find_entry(session_id: str) -> SessionEntry | None:
    for item in entries():
        if isinstance(item, SessionEntry) and item.id == session_id:
            return item
    return None


def _remove_folder(folder: Path) -> None:
    # A tmpfs TMPDIR lived in the dead supervisor's private mount namespace: here it is a plain folder.
    shutil.rmtree(folder, ignore_errors=True)


def sweep(root: Path | None = None, *, min_age: float = 10.0) -> list[str]:
    """Remove what sessions whose supervisor and host died left behind; return their ids.

    A folder without a readable entry is removed once it is ``min_age`` seconds old (a
    session being created writes its entry first thing).
    """
    root = root if root is not None else sessions_root()
    swept: list[str] = []
    alive: set[str] = set()
    for item in entries(root):
        if isinstance(item, SessionEntry):
            if item.alive():
                alive.add(item.id)
                continue
            for group in item.cgroups:
                remove_group(Path(group))
            _remove_folder(item.path)
            with contextlib.suppress(OSError):
                (r_hooks_dir() / f"{item.id}.Rprofile").unlink()
            swept.append(item.id)
        else:
            with contextlib.suppress(OSError):
                if time.time() - item.stat().st_mtime > min_age:
                    _remove_folder(item)
                    swept.append(item.name)
                else:
                    alive.add(item.name)
    # Groups with no entry here may belong to sessions of another state folder: remove only empty ones.
    for stale in stale_groups(alive):
        remove_group(stale, kill=False, attempts=1)
    return swept
