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

The registry proves an entry before anything acts on it (:func:`verify`), because any
process of the user can write a ``session.json``: the folder is a real folder (no symlink)
directly under the sessions root, owned by this user and named by the entry's id; the
entry's ``folder`` is that folder; every cgroup listed is the session's own
``console-bridge-<id>`` group (or its ``cells`` child) directly beneath one of this
process's own cgroups; and a live ``supervisor_pid`` is a process of this user that started
when the entry says and whose command line is ``python -I -S .../_confinement/_supervisor.py
CONFIG`` with the session's id in CONFIG. An entry that fails any of these is *refused*:
``kill``, ``ps`` and the sweep report it and leave it, its folder, its processes and its
groups alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import stat
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import platformdirs
import psutil

from console_bridge._confinement._cgroups import (
    _V1,
    CGROUP_PREFIX,
    _mount_root,
    _own_groups,
    remove_group,
    stale_groups,
)

__all__ = [
    "SessionEntry",
    "SweepReport",
    "Verdict",
    "entries",
    "find_entry",
    "new_session_id",
    "register",
    "sessions_root",
    "sweep",
    "sweep_report",
    "verify",
]

_ENV = "CONSOLE_BRIDGE_STATE_DIR"
_ENTRY = "session.json"
_ID = re.compile(r"\d{8}T\d{6}-[0-9a-f]{8}")
_SUPERVISOR_SCRIPT = ("_confinement", "_supervisor.py")
_START_SLACK = 0.05  # seconds: psutil's create_time is rounded to the clock tick


def state_dir() -> Path:
    return Path(os.environ.get(_ENV) or platformdirs.user_state_dir("console-bridge")).expanduser().absolute()


def sessions_root() -> Path:
    """The folder holding every live session's private folder (created 0700)."""
    root = state_dir() / "sessions"
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    with contextlib.suppress(OSError):
        os.chmod(root, 0o700)
    return root


def bridge_cache_dir() -> Path:
    """console-bridge's cache folder (``CONSOLE_BRIDGE_CACHE_DIR``, else the user's cache folder)."""
    folder = Path(os.environ.get("CONSOLE_BRIDGE_CACHE_DIR") or platformdirs.user_cache_dir("console-bridge"))
    return folder.expanduser().absolute()


def r_hooks_dir() -> Path:
    """Files the sandboxed R worker must read (outside the denied state folder): one per session."""
    folder = bridge_cache_dir() / "r-hooks"
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
    limits: dict[str, str | None] = field(default_factory=dict)  # limit -> what holds it ("userns-rlimit", ...)

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
        """Send ``sig`` to the supervisor, only when it is proven to be this session's (see :func:`verify`)."""
        process = _supervisor_process(self)
        if isinstance(process, str) or process is None:
            return False
        try:
            process.send_signal(sig)  # psutil checks the pid still names that process (no reuse)
        except psutil.Error:
            return False
        return True


#: When this process last swept each sessions root (``time.monotonic()``), for ``register``.
_swept_at: dict[Path, float] = {}
_swept_lock = threading.Lock()


def register(
    *, owner: str, workspace: str, profile: str, recording_base: str, sweep_every: float = 60.0
) -> SessionEntry:
    """Create a new session's private folder (0700) with its ``tmp/`` and entry (0600).

    The sessions root is swept first (:func:`sweep`: what sessions of dead hosts left) by the first
    start in this process, then at most once every ``sweep_every`` seconds: a sweep proves every
    entry (its ``session.json``, its supervisor, its groups: about 0.4 ms a live session), which at
    every start made a start cost grow with the sessions live. Only a session whose supervisor died
    with its host needs a sweep (a supervisor ends the tree and removes the folder and groups itself
    when its host goes): one that dies later is swept by the first start ``sweep_every`` seconds after
    the last sweep, or by ``console-bridge ps`` at once."""
    root = sessions_root()
    now = time.monotonic()
    with _swept_lock:
        last = _swept_at.get(root)
        due = last is None or now - last >= sweep_every
        if due:
            _swept_at[root] = now
    if due:
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


# ---------------------------------------------------------------- proofs
@dataclass(frozen=True)
class Verdict:
    """What :func:`verify` concluded about one folder under the sessions root.

    ``live``: the supervisor is proven to be this session's; ``starting``: no supervisor yet and
    the host runs; ``stale``: supervisor and host are gone (the sweep may clean up); ``orphan``:
    a folder of ours without a readable entry; ``refused``: not provably ours, left alone.
    """

    folder: Path
    state: Literal["live", "starting", "stale", "orphan", "refused"]
    entry: SessionEntry | None = None
    reason: str = ""


def _folder_problem(folder: Path, root: Path) -> str | None:
    try:
        info = os.lstat(folder)
    except OSError as exc:
        return f"cannot be examined ({exc.strerror or exc})"
    if stat.S_ISLNK(info.st_mode):
        return "is a symlink"
    if not stat.S_ISDIR(info.st_mode):
        return "is not a folder"
    if info.st_uid != os.geteuid():
        return f"belongs to uid {info.st_uid}, not to this user ({os.geteuid()})"
    if folder.parent != root:
        return f"is not directly under the sessions folder {str(root)!r}"
    if not _ID.fullmatch(folder.name):
        return "is not named like a session id"
    return None


def own_cgroup_bases() -> set[Path]:
    """The cgroups this process belongs to, in every hierarchy: the only places session groups may be."""
    root, bases = _mount_root(), set()
    for controller, path in _own_groups().items():
        if controller in (*_V1, "cpuacct"):
            bases.add(root / controller / path.lstrip("/"))
        elif controller == "":
            bases.update({root / path.lstrip("/"), root / "unified" / path.lstrip("/")})
    return bases


def cgroup_problem(group: str, session_id: str, bases: set[Path]) -> str | None:
    """Why ``group`` is not the session's own group beneath one of ``bases`` (None when it is)."""
    path = Path(group)
    if not path.is_absolute() or any(part in ("..", ".") for part in path.parts) or os.path.normpath(group) != group:
        return f"cgroup {group!r} is not a plain absolute path"
    own = CGROUP_PREFIX + session_id
    if path.name == "cells":
        path = path.parent
    if path.name != own or path.parent not in bases:
        return f"cgroup {group!r} is not {own!r} beneath this process's own cgroups"
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISLNK(os.lstat(path).st_mode):
            return f"cgroup {group!r} is a symlink"
    return None


def _entry_problem(entry: SessionEntry, folder: Path, bases: set[Path]) -> str | None:
    if entry.id != folder.name:
        return f"its entry names session {entry.id!r}, not the folder's {folder.name!r}"
    if os.path.realpath(entry.folder) != os.path.realpath(folder):  # only `folder` is ever acted on
        return f"its entry names the folder {entry.folder!r}, not {str(folder)!r}"
    for group in entry.cgroups:
        why = cgroup_problem(str(group), entry.id, bases)
        if why is not None:
            return why
    return None


def _supervisor_process(entry: SessionEntry) -> psutil.Process | str | None:
    """The entry's supervisor when it runs and is proven this session's; a reason when the pid
    runs but is not; None when no process of that pid and start time runs (it ended)."""
    pid = entry.supervisor_pid
    if not pid:
        return None
    try:
        process = psutil.Process(pid)
        started = process.create_time()
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
        if entry.supervisor_started is not None and abs(started - entry.supervisor_started) >= _START_SLACK:
            return None  # the pid was reused: the supervisor ended
        uid = process.uids().real
        cmdline = process.cmdline()
    except psutil.NoSuchProcess:
        return None
    except psutil.Error as exc:
        return f"its supervisor pid {pid} cannot be examined ({exc})"
    if entry.supervisor_started is None:
        return f"pid {pid} runs but the entry records no start time to prove it is the supervisor"
    if uid != os.getuid():
        return f"pid {pid} belongs to uid {uid}, not to this user"
    script = Path(cmdline[3]) if len(cmdline) >= 5 else None
    if (
        script is None
        or cmdline[1:3] != ["-I", "-S"]
        or script.parts[-2:] != _SUPERVISOR_SCRIPT
        or entry.id not in cmdline[-1]
    ):
        shown = " ".join(cmdline)[:200]
        return f"pid {pid} is not the console-bridge supervisor of session {entry.id} (it runs {shown!r})"
    return process


def verify(folder: Path, root: Path | None = None, *, bases: set[Path] | None = None) -> Verdict:
    """Prove what ``folder`` (a child of the sessions root) is, before anything acts on it."""
    root = root if root is not None else sessions_root()
    why = _folder_problem(folder, root)
    if why is not None:
        return Verdict(folder, "refused", reason=f"the folder {why}")
    entry = _load(folder)
    if entry is None:
        return Verdict(folder, "orphan")
    why = _entry_problem(entry, folder, bases if bases is not None else own_cgroup_bases())
    if why is not None:
        return Verdict(folder, "refused", entry, why)
    if entry.supervisor_pid:
        process = _supervisor_process(entry)
        if isinstance(process, str):
            return Verdict(folder, "refused", entry, process)
        return Verdict(folder, "live" if process is not None else "stale", entry)
    if entry.host_started is not None and _same_process(entry.host_pid, entry.host_started):
        return Verdict(folder, "starting", entry)
    return Verdict(folder, "stale", entry)


def verdicts(root: Path | None = None) -> list[Verdict]:
    """:func:`verify` for every folder under the sessions root."""
    root = root if root is not None else sessions_root()
    bases = own_cgroup_bases()
    found: list[Verdict] = []
    with contextlib.suppress(OSError):
        for folder in sorted(root.iterdir()):
            found.append(verify(folder, root, bases=bases))
    return found


def entries(root: Path | None = None) -> Iterator[SessionEntry | Path]:
    """Each session folder's entry (or the folder, when it has no readable entry)."""
    root = root if root is not None else sessions_root()
    with contextlib.suppress(OSError):
        for folder in sorted(root.iterdir()):
            if folder.is_dir() and not folder.is_symlink():
                yield _load(folder) or folder


def find_entry(session_id: str) -> SessionEntry | None:
    """The proven entry (live, starting or stale) of ``session_id``; None for a refused or missing one."""
    for verdict in verdicts():
        if verdict.entry is not None and verdict.state != "refused" and verdict.entry.id == session_id:
            return verdict.entry
    return None


def _remove_folder(folder: Path, attempts: int = 20) -> None:
    # A tmpfs TMPDIR lived in the dead session's private mount namespace: here it is a plain folder.
    # A process of the tree that is still being reaped may add a file while it goes: try again.
    for _ in range(attempts):
        shutil.rmtree(folder, ignore_errors=True)
        if not os.path.lexists(folder):
            return
        time.sleep(0.05)


@dataclass
class SweepReport:
    """What one sweep did: the sessions it cleaned up, and the folders it refused to touch."""

    swept: list[str] = field(default_factory=list)
    refused: list[Verdict] = field(default_factory=list)


def sweep_report(root: Path | None = None, *, min_age: float = 10.0) -> SweepReport:
    """Remove what sessions whose supervisor and host died left behind, for proven entries only.

    A folder of ours without a readable entry is removed once it is ``min_age`` seconds old
    (a session being created writes its entry first thing). A refused entry (:func:`verify`)
    is reported and left alone: its folder, its processes and its groups.
    """
    root = root if root is not None else sessions_root()
    report = SweepReport()
    alive: set[str] = set()
    for verdict in verdicts(root):
        folder, entry = verdict.folder, verdict.entry
        if verdict.state == "refused":
            report.refused.append(verdict)
            alive.add(folder.name)  # its groups are left alone too
        elif verdict.state in ("live", "starting"):
            alive.add(folder.name)
        elif verdict.state == "stale" and entry is not None:
            for group in entry.cgroups:  # each proven the session's own (verify)
                remove_group(Path(group))
            _remove_folder(folder)
            with contextlib.suppress(OSError):
                (r_hooks_dir() / f"{entry.id}.Rprofile").unlink()
            report.swept.append(entry.id)
        else:
            with contextlib.suppress(OSError):
                if time.time() - folder.lstat().st_mtime > min_age:
                    _remove_folder(folder)
                    report.swept.append(folder.name)
                else:
                    alive.add(folder.name)
    # Groups with no entry here may belong to sessions of another state folder: remove only empty ones.
    for stale in stale_groups(alive):
        remove_group(stale, kill=False, attempts=1)
    return report


def sweep(root: Path | None = None, *, min_age: float = 10.0) -> list[str]:
    """:func:`sweep_report`, returning the ids of the sessions it cleaned up."""
    return sweep_report(root, min_age=min_age).swept
