"""mcp-console session recordings: finding, listing, pruning and exporting them (0.0.5 and 0.0.6 layouts)."""

from __future__ import annotations

import builtins
import contextlib
import datetime as dt
import errno
import json
import os
import re
import stat
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import platformdirs
import psutil

from console_bridge._errors import BridgeError, NotAllowed
from console_bridge._hostfs import open_dir, open_file, remove_tree, walk_tree

__all__ = ["Recording", "Recordings", "default_recordings_root", "find_recording", "sidecar_path", "write_sidecar"]

FINISHED = "## Recording finished"
#: A session's id, as ``console-bridge ps`` lists it (its recording's sidecar keeps it as ``session_id``).
_SESSION_ID = re.compile(r"\A\d{8}T\d{6}-[0-9a-f]{8}\Z")
_RUN_ID = re.compile(r"\A(?P<ts>\d{8}T\d{6})(?:\.(?P<frac>\d+))?Z-(?P<pid>\d{10})\Z")
_TRANSCRIPTS = ("transcript.md", "transcript.qmd")
_EVENTS = ("capture/events.jsonl", "internal/events.jsonl")


SIDECAR_SUFFIX = ".console-bridge.json"
_SIDECAR_MAX = 64 * 1024


def sidecar_path(recording_path: Path) -> Path:
    """Where the bridge notes a recording's workspace, profile and owner: next to its folder."""
    return recording_path.parent / f"{recording_path.name}{SIDECAR_SUFFIX}"


def write_sidecar(recording_path: Path, info: dict[str, Any]) -> Path:
    """Write the sidecar (0600, created new, never through a symlink). It holds no secrets:
    workspace, profile, owner, the OS user and versions."""
    path = sidecar_path(recording_path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(info, handle, indent=2, sort_keys=True)
        handle.write("\n")
    return path


def _read_sidecar(recording_path: Path) -> dict[str, Any]:
    path = sidecar_path(recording_path)
    try:  # (non-blocking: a FIFO planted there must not hang a listing; only a regular file is read)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return {}
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return {}
        data = os.read(fd, _SIDECAR_MAX)
    except OSError:
        return {}
    finally:
        os.close(fd)
    try:
        value = json.loads(data.decode("utf-8", "replace"))
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def default_recordings_root() -> Path:
    """Where sessions record by default (a platformdirs user-data folder)."""
    return Path(platformdirs.user_data_dir("console-bridge")) / "recordings"


@dataclass(frozen=True, slots=True)
class Recording:
    """One session's recording folder (read-only view; state is read from disk on each access)."""

    run_id: str
    path: Path

    @property
    def pid(self) -> int | None:
        match = _RUN_ID.match(self.run_id)
        return int(match.group("pid")) if match else None

    @property
    def started_at(self) -> dt.datetime | None:
        match = _RUN_ID.match(self.run_id)
        if not match:
            return None
        stamp = dt.datetime.strptime(match.group("ts"), "%Y%m%dT%H%M%S").replace(tzinfo=dt.UTC)
        micros = int((match.group("frac") or "0")[:6].ljust(6, "0"))
        return stamp.replace(microsecond=micros)

    @property
    def info(self) -> dict[str, Any]:
        """What console-bridge noted about the session (workspace, profile, owner, user); {} if nothing."""
        return _read_sidecar(self.path)

    @property
    def workspace(self) -> str | None:
        value = self.info.get("workspace")
        return str(value) if value is not None else None

    @property
    def profile(self) -> str | None:
        value = self.info.get("profile")
        return str(value) if value is not None else None

    @property
    def owner(self) -> str | None:
        value = self.info.get("owner")
        return str(value) if value is not None else None

    @property
    def transcript(self) -> Path | None:
        for name in _TRANSCRIPTS:
            candidate = self.path / name
            if candidate.is_file():
                return candidate
        return None

    @property
    def layout(self) -> str:
        """``"0.0.6"`` (transcript.md, capture/) or ``"0.0.5"`` (transcript.qmd, internal/)."""
        return "0.0.5" if (self.path / "internal").is_dir() else "0.0.6"

    @property
    def finalized(self) -> bool:
        """True once the server shut down cleanly and closed the recording."""
        transcript = self.transcript
        if transcript is None:
            return False
        if self.layout == "0.0.5":
            # 0.0.5 writes no end marker: its recording is complete once its server is gone.
            return not self._server_running()
        try:  # the tail only, never through a symlink (a forged recording may point anywhere)
            fd = open_file(self.path, transcript.name)
        except (OSError, BridgeError):
            return False
        try:
            size = os.fstat(fd).st_size
            tail = os.pread(fd, 4096, max(0, size - 4096))
        except OSError:
            return False
        finally:
            os.close(fd)
        return tail.decode("utf-8", errors="replace").rstrip().endswith(FINISHED)

    def _server_running(self) -> bool:
        pid = self.pid
        if pid is None:
            return False
        try:
            proc = psutil.Process(pid)
            return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE and "mcp-console" in proc.name()
        except psutil.Error:
            return False

    @property
    def live(self) -> bool:
        """The server that writes it still runs and it is not finalized."""
        return self._server_running() and not self.finalized

    @property
    def size_bytes(self) -> int:
        total = 0
        for root, _dirs, files in os.walk(self.path):
            for name in files:
                try:
                    total += (Path(root) / name).lstat().st_size
                except OSError:
                    continue
        return total

    def events(self) -> Iterator[dict[str, Any]]:
        """The recorded events (JSON Lines), oldest first."""
        for name in _EVENTS:
            candidate = self.path / name
            if candidate.is_file():
                try:  # never through a symlink
                    fd = open_file(self.path, name)
                except (OSError, BridgeError):
                    return
                with open(fd, encoding="utf-8", errors="replace") as handle:
                    for line in handle:
                        if line.strip():
                            try:
                                yield json.loads(line)
                            except json.JSONDecodeError:
                                continue
                return


def find_recording(base: Path, pid: int) -> Recording | None:
    """The recording of the server with ``pid`` under ``base``, via the run-id's PID suffix."""
    sessions = base / "sessions"
    suffix = f"-{pid:010d}"
    try:
        matches = sorted(p for p in sessions.iterdir() if p.is_dir() and p.name.endswith(suffix))
    except OSError:
        return None
    return Recording(matches[-1].name, matches[-1]) if matches else None


def _remove(root: Path, run_id: str) -> None:
    """Delete ``root/sessions/run_id`` and its sidecar without following any symlink (a cell may have planted some)."""
    with contextlib.suppress(OSError):
        sidecar_path(root / "sessions" / run_id).unlink()
    with contextlib.suppress(OSError):
        (root / "sessions" / f"{run_id}.console-bridge-cells.jsonl").unlink()  # the cell log (see _notebook)
    remove_tree(root, f"sessions/{run_id}")


def _write_notebook(recording: Recording, target: Path, text: str) -> Path:
    from console_bridge._cells._notebook import cells_from_events, notebook, read_cells
    from console_bridge._hostfs import read_file, write_file

    cells = read_cells(recording.path)
    note = ""
    if cells is None:  # made without console-bridge, or before it kept the log: the server's events

        def image(path: str) -> bytes | None:
            try:  # inside the recording, never through a symlink
                return read_file(recording.path, path, 50 * 1024 * 1024)
            except (OSError, BridgeError):
                return None

        cells = cells_from_events(recording.events(), image)
        note = (
            "Rebuilt from the server's recording (no console-bridge cell log): outputs are text and images; "
            "rich results and failures are not marked."
        )
        if not cells and not any((recording.path / name).is_file() for name in _EVENTS):
            raise NotAllowed(
                f"recording {recording.run_id} has neither a cell log nor the server's events, so it cannot become "
                "a notebook; export it as an archive instead (format='archive')"
            )
    if target.is_dir() or text.endswith(os.sep) or target.suffix != ".ipynb":
        target.mkdir(parents=True, exist_ok=True)
        target = target / f"{recording.run_id}.ipynb"
    target.parent.mkdir(parents=True, exist_ok=True)
    document = notebook(cells, title=recording.run_id, info=recording.info, note=note)
    data = (json.dumps(document, indent=1, ensure_ascii=False) + "\n").encode("utf-8")
    write_file(target.parent, target.name, data, replace=True, mode=0o600)  # (private, as the recording store)
    return target


def _tar_tree(root: Path, run_id: str, target: Path) -> None:
    """Write ``root/sessions/run_id`` as ``target`` (.tar.gz): folders and regular files only, never through a
    symlink; the archive itself is never written through a symlink either."""
    parent = open_dir(target.parent)
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(target.name, flags, 0o600, dir_fd=parent)  # (private, as the recording store)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise NotAllowed(
                    f"the export target {str(target)!r} is a symlink; nothing was written through it. Remove it "
                    "or pick another file name"
                ) from None
            raise
    finally:
        os.close(parent)
    with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz") as archive:
        top = tarfile.TarInfo(run_id)
        top.type, top.mode = tarfile.DIRTYPE, 0o755
        archive.addfile(top)
        for entry in walk_tree(root, f"sessions/{run_id}"):
            info = tarfile.TarInfo(f"{run_id}/{entry.name}")
            info.mtime = int(entry.info.st_mtime)
            if entry.is_dir:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                archive.addfile(info)
                continue
            info.size, info.mode = entry.info.st_size, 0o644
            with open(entry.fd, "rb", closefd=False) as handle:
                archive.addfile(info, handle)


class Recordings:
    """The recordings under one root (default: console-bridge's user-data folder).

    Example::

        recs = Recordings()
        for rec in recs.list()[:5]:
            print(rec.run_id, rec.finalized, rec.size_bytes)
        recs.prune(keep_last=20)
    """

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(root).expanduser().absolute() if root is not None else default_recordings_root()

    def __repr__(self) -> str:
        return f"Recordings({str(self.root)!r})"

    def list(self, *, workspace: str | os.PathLike[str] | None = None) -> list[Recording]:
        """Every recording, newest first; with ``workspace``, only those console-bridge made for it."""
        sessions = self.root / "sessions"
        if not sessions.is_dir():
            return []
        found = [
            Recording(p.name, p)
            for p in sessions.iterdir()
            if _RUN_ID.match(p.name) and p.is_dir() and not p.is_symlink()  # a symlink is no recording
        ]
        if workspace is not None:
            wanted = str(Path(workspace).expanduser().resolve())
            found = [rec for rec in found if rec.workspace == wanted]
        return sorted(found, key=lambda rec: rec.run_id, reverse=True)

    def get(self, run_id: str) -> Recording:
        """The recording ``run_id``, or the one of the session ``console-bridge ps`` listed by that id."""
        if isinstance(run_id, str) and _SESSION_ID.match(run_id):
            found = [rec for rec in self.list() if rec.info.get("session_id") == run_id]
            if not found:
                raise BridgeError(
                    f"no recording of session {run_id!r} under {str(self.root)!r}; see Recordings().list()"
                )
            run_id = found[0].run_id
        if not isinstance(run_id, str) or not _RUN_ID.match(run_id):
            raise NotAllowed(
                f"{run_id!r} is not a recording run-id (like 20261129T181911.868300580Z-0000007855) nor a session id "
                "of `console-bridge ps` (like 20261129T181911-1a2b3c4d)"
            )
        path = self.root / "sessions" / run_id
        if path.is_symlink():
            raise NotAllowed(
                f"{str(path)!r} is a symlink, not a recording (code that could write the recordings folder may have "
                "planted it); remove the link by hand and keep recordings where sandboxed code cannot write"
            )
        if not path.is_dir():
            raise BridgeError(f"no recording {run_id!r} under {str(self.root)!r}; see Recordings().list()")
        return Recording(run_id, path)

    def delete(self, run_id: str) -> Recording:
        """Delete one recording; a live one (its server still runs) is refused."""
        recording = self.get(run_id)
        if recording.live:
            raise NotAllowed(f"recording {run_id!r} is live (its server pid {recording.pid} runs); close it first")
        _remove(self.root, run_id)
        return recording

    def prune(
        self,
        *,
        older_than: dt.timedelta | None = None,
        keep_last: int | None = None,
        max_total_bytes: int | None = None,
        dry_run: bool = False,
        workspace: str | os.PathLike[str] | None = None,
    ) -> builtins.list[Recording]:
        """Delete recordings by age, count and total size; never a live one. Returns what went.

        With ``workspace`` the rules apply to that workspace's recordings only (as ``list`` gives them).
        """
        if keep_last is not None and keep_last < 0:
            raise NotAllowed("keep_last must be >= 0")
        recordings = self.list(workspace=workspace)
        now = dt.datetime.now(dt.UTC)
        doomed: dict[str, Recording] = {}
        for index, rec in enumerate(recordings):
            if keep_last is not None and index >= keep_last:
                doomed[rec.run_id] = rec
            started = rec.started_at
            if older_than is not None and started is not None and now - started > older_than:
                doomed[rec.run_id] = rec
        if max_total_bytes is not None:
            total = 0
            for rec in recordings:
                if rec.run_id in doomed:
                    continue
                total += rec.size_bytes
                if total > max_total_bytes:
                    doomed[rec.run_id] = rec
        removed = []
        for rec in recordings:
            if rec.run_id in doomed and not rec.live:
                if not dry_run:
                    _remove(self.root, rec.run_id)
                removed.append(rec)
        return removed

    def export(self, run_id: str, dest: str | os.PathLike[str], *, format: str = "archive") -> Path:
        """Write one recording as a single ``.tar.gz`` archive (``format="archive"``) or as a Jupyter
        notebook (``format="ipynb"``); returns its path.

        ``dest`` is the file's path when it ends in ``.tar.gz``/``.tgz`` (``.ipynb``), else a folder
        (created when missing) that receives ``<run_id>.tar.gz`` (``<run_id>.ipynb``). The notebook
        holds the session's cells in order, each a ``%%console`` cell of its language with its
        outputs (streams, rich results, images, the failure as an error output); nbformat validates
        it. It needs the cell log a console-bridge session keeps next to its recording: a recording
        without one raises :class:`NotAllowed`. Nothing is written through a symlink.
        """
        if format not in ("archive", "ipynb"):
            raise NotAllowed(f"format must be 'archive' or 'ipynb', not {format!r}")
        recording = self.get(run_id)
        text = os.fspath(dest)
        target = Path(text).expanduser()
        if format == "ipynb":
            return _write_notebook(recording, target, text)
        archive_name = target.name.endswith((".tar.gz", ".tgz"))
        if target.is_dir() or text.endswith(os.sep) or not archive_name:
            target.mkdir(parents=True, exist_ok=True)
            target = target / f"{recording.run_id}.tar.gz"
        target.parent.mkdir(parents=True, exist_ok=True)
        _tar_tree(self.root, recording.run_id, target)
        return target
