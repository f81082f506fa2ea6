"""The outcome log: where the hooks write (``outcomes.jsonl``, ``outputs.jsonl`` in a private folder of
the session's TMPDIR), reading it safely (never through a symlink, bounded), and parsing what was appended
into failures, notices and rich outputs. See ``_outcome`` for how the hooks learn a cell failed."""

from __future__ import annotations

import contextlib
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from console_bridge._hostfs import open_regular
from console_bridge._results import CellFailure, Output, output_from_record

__all__ = [
    "OUTCOMES_FILE",
    "OUTPUTS_FILE",
    "OutcomeLog",
    "Records",
    "limit_failure",
    "lost_failure",
    "outcome_dir_name",
    "parse_records",
    "tampered_failure",
    "worker_exited_failure",
]

OUTCOMES_FILE = "outcomes.jsonl"
OUTPUTS_FILE = "outputs.jsonl"
_MAX_READ = 4 * 1024 * 1024
_MAX_TEXT = 20_000


def outcome_dir_name(nonce: str) -> str:
    """The private folder (inside the worker's TMPDIR) the hooks write to."""
    return f".console-bridge-{nonce}"


@dataclass(frozen=True, slots=True)
class Records:
    """What the hooks appended: failures (oldest first) and notices about the worker."""

    failures: tuple[CellFailure, ...] = ()
    notices: tuple[tuple[str, str], ...] = ()
    ready_at: float | None = None  # when the startup code finished (epoch seconds): the first cell starts
    tampered: str | None = None  # what happened to the log, when it can no longer be trusted


def parse_records(data: bytes) -> Records:
    """Parse appended JSON lines; malformed lines are skipped (a partial last line included)."""
    failures: list[CellFailure] = []
    notices: list[tuple[str, str]] = []
    ready_at: float | None = None
    for raw in data.split(b"\n"):
        if not raw.strip():
            continue
        try:
            entry: Any = json.loads(raw.decode("utf-8", "replace"))
        except ValueError:
            continue
        if not isinstance(entry, dict):
            continue
        if entry.get("type") == "failure":
            kind = entry.get("kind")
            origin, running = entry.get("origin"), entry.get("cell")
            if entry.get("where") and isinstance(origin, str) and isinstance(running, str) and origin != running:
                # a thread an earlier cell started failed while a later one ran: that cell's, not this one's
                notices.append(
                    (
                        "thread",
                        f"a background thread ({str(entry.get('where'))[:100]}) started by an earlier cell raised "
                        f"{str(entry.get('name') or 'Error')[:200]}: {str(entry.get('message') or '')[:500]}",
                    )
                )
                continue
            failures.append(
                CellFailure(
                    language=str(entry.get("language") or ""),
                    name=str(entry.get("name") or "Error")[:200],
                    message=str(entry.get("message") or "")[:_MAX_TEXT],
                    traceback=str(entry.get("traceback") or "")[-_MAX_TEXT:],
                    kind=kind if kind in ("exception", "limit", "worker_exited") else "exception",
                )
            )
        elif entry.get("type") == "ready" and isinstance(entry.get("at"), int | float):
            ready_at = float(entry["at"])
        elif entry.get("type") == "notice":
            notices.append((str(entry.get("topic") or ""), str(entry.get("message") or "")[:2000]))
    return Records(tuple(failures), tuple(notices), ready_at)


def limit_failure(limit: str, language: str, detail: str = "") -> CellFailure:
    """The failure of a cell killed at a resource limit (``limit``: "memory", "processes", "tmpdir", ...).

    The hook for the confinement layer: it reads the cgroup counters and builds this.
    """
    message = detail or f"the cell was stopped at the session's {limit} limit"
    return CellFailure(language=language, name=limit, message=message, traceback="", kind="limit")


def tampered_failure(language: str, what: str, *, earlier: bool = False) -> CellFailure:
    """The failure of a cell whose outcome cannot be known: the outcome log was tampered with
    (``what`` says how), in this cell or, with ``earlier``, before it (until ``restart()``)."""
    when = "before this cell" if earlier else "during this cell"
    message = (
        f"the session's outcome log was tampered with {when} ({what}), so whether this cell's code failed cannot "
        "be known and it counts as failed; every cell does until restart() starts a fresh worker with a fresh log"
    )
    return CellFailure(language=language, name="OutcomeLogTampered", message=message, traceback="", kind="tampered")


def lost_failure(language: str = "") -> CellFailure:
    """The failure of a cell whose worker could not record what failed (the outcome log could not be
    written and the record that came through the output instead could not be read)."""
    message = (
        "the worker could not write this cell's failure to the session's outcome log (is its TMPDIR full? free "
        "space there, or restart()), so the cell counts as failed"
    )
    return CellFailure(language=language, name="OutcomeLost", message=message, traceback="", kind="tampered")


def worker_exited_failure(language: str, status: int | None) -> CellFailure:
    """The failure of a cell whose worker process ended (``sys.exit``, ``os._exit``, a crash)."""
    if status is not None and status < 0:
        how = (
            f"the worker was killed by signal {-status} (a limit, the kernel's OOM killer or another "
            "process); its in-memory state and the files in its TMPDIR are lost, and a cell sent to the dead "
            "worker did not run"
        )
    else:
        how = (
            f"the worker exited with status {'unknown' if status is None else status}; its in-memory state and the "
            "files in its TMPDIR are lost"
        )
    return CellFailure(
        language=language,
        name="WorkerExited",
        message=how,
        traceback="",
        kind="worker_exited",
    )


class OutcomeLog:
    """The hooks' ``outcomes.jsonl``, found under the session's private TMPDIR and read safely.

    The folder is writable by cells, so it is never trusted for paths: every open uses
    ``O_NOFOLLOW``, only a regular file is read, and reads are bounded. Once found, the
    folder is kept open and its files are opened relative to it (read before and after every
    cell: no walk through the server's root, no pathlib, no symlinked folder on the way); a
    file that is gone or no longer regular is looked for again.
    """

    def __init__(self, root: Path, nonce: str) -> None:
        self.root = root
        self.dir_name = outcome_dir_name(nonce)
        self._path: Path | None = None
        self._dir_fd: int | None = None  # the folder of self._path, opened O_DIRECTORY | O_NOFOLLOW
        # The log as first found for the running worker: its sandbox folder (name, inode), the log's
        # (device, inode) and the largest size seen. While that folder lives (the worker does), the
        # same log must stay there, a regular writable file that only grows (see tampering()).
        self._sandbox: tuple[str, int] | None = None
        self._ident: tuple[int, int] | None = None
        self._size = 0

    def close(self) -> None:
        if self._dir_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._dir_fd)
            self._dir_fd = None
        self._path = None

    def _locate(self) -> tuple[Path, int] | None:
        """The log and its size now, or None when there is none (yet).

        Only ``<root>/sandbox-*/data/<dir_name>`` counts, where the worker's startup code makes it:
        a copy a cell made deeper down (``cp -r $TMPDIR backup``, carried over a restart too) is
        never taken for it. Of two (a restart under way), the more recently written one."""
        if self._path is not None:
            size = _regular_size(OUTCOMES_FILE, self._dir_fd)
            if size is not None:
                return self._path, size
        self.close()
        best: tuple[float, Path, int, int] | None = None
        try:
            sandboxes = [entry for entry in os.scandir(self.root) if entry.name.startswith("sandbox-")]
        except OSError:
            return None
        for entry in sandboxes:
            fd = _open_folder(entry.path, "data", self.dir_name)
            if fd is None:
                continue
            try:
                info = os.stat(OUTCOMES_FILE, dir_fd=fd, follow_symlinks=False)
            except OSError:
                os.close(fd)
                continue
            if not stat.S_ISREG(info.st_mode) or (best is not None and info.st_mtime <= best[0]):
                os.close(fd)
                continue
            if best is not None:
                os.close(best[3])
            best = (info.st_mtime, Path(entry.path) / "data" / self.dir_name / OUTCOMES_FILE, info.st_size, fd)
        if best is None:
            return None
        _, self._path, size, self._dir_fd = best
        self._watch(self._path)
        return self._path, size

    def _watch(self, path: Path) -> None:
        """Remember the log just found, when it is a new worker's (see ``tampering``)."""
        sandbox = path.parent.parent.parent
        try:
            folder = os.stat(sandbox, follow_symlinks=False)
            info = os.stat(path, follow_symlinks=False)
        except OSError:
            return
        if self._sandbox == (sandbox.name, folder.st_ino):
            return  # the same worker's log, found again: tampering() judges it
        self._sandbox = (sandbox.name, folder.st_ino)
        self._ident = (info.st_dev, info.st_ino)
        self._size = info.st_size

    def tampering(self) -> str | None:
        """What a cell did to the log since it was found, or None: while the worker's sandbox folder
        lives, its log must be the same regular, owner-writable file in the same place, never
        shorter than before. (A folder gone is a worker replaced: its successor's log is looked for.)"""
        if self._sandbox is None or self._ident is None:
            return None
        name, inode = self._sandbox
        try:
            if os.stat(self.root / name, follow_symlinks=False).st_ino != inode:
                raise FileNotFoundError
        except OSError:
            self._sandbox = self._ident = None  # the worker was replaced; its successor's log is new
            self.close()
            return None
        folder = self.root / name / "data" / self.dir_name
        try:
            where = os.stat(folder, follow_symlinks=False)
        except OSError:
            return "its folder was removed"
        if not stat.S_ISDIR(where.st_mode):
            return "its folder was replaced by something that is not a folder"
        if where.st_mode & 0o700 != 0o700:
            return f"its folder's permissions were changed to {stat.filemode(where.st_mode)}"
        try:
            info = os.stat(folder / OUTCOMES_FILE, follow_symlinks=False)
        except FileNotFoundError:
            return "it was removed"
        except OSError as exc:
            return f"it cannot be read ({exc.strerror})"
        if not stat.S_ISREG(info.st_mode):
            return f"it was replaced by a {_kind(info.st_mode)}"
        if (info.st_dev, info.st_ino) != self._ident:
            return "it was replaced by another file"
        if info.st_size < self._size:
            return f"it was truncated from {self._size} to {info.st_size} bytes"
        if not info.st_mode & 0o200:
            return f"it was made read-only ({stat.filemode(info.st_mode)})"
        self._size = info.st_size
        return None

    def mark(self) -> tuple[Path | None, int]:
        """Where the log ends now (taken before a cell is submitted)."""
        found = self._locate()
        return (None, 0) if found is None else found

    def _tail(self, name: str, offset: int, limit: int) -> bytes | None:
        """The bytes of the regular file ``name`` (in the kept folder) after ``offset`` (at most
        ``limit``); None when it cannot be opened without following a link or is not regular."""
        if self._dir_fd is None:
            return None
        opened = open_regular(name, dir_fd=self._dir_fd)
        if opened is None:
            return None
        fd, info = opened
        try:
            if info.st_size <= offset:
                return b""
            return os.pread(fd, min(info.st_size - offset, limit), offset)
        finally:
            os.close(fd)

    def read_since(self, mark: tuple[Path | None, int]) -> Records:
        """The records appended after ``mark``, and what the cells did to the log (``tampered``)."""
        tampered = self.tampering()
        if tampered is not None:
            return Records(tampered=tampered)
        records = self._records_since(mark)
        tampered = self.tampering()  # (a change between the two looks)
        return records if tampered is None else Records(tampered=tampered)

    def _records_since(self, mark: tuple[Path | None, int]) -> Records:
        data = None
        if self._path is not None:  # the file found before: opened as is (O_NOFOLLOW, regular only)
            data = self._tail(OUTCOMES_FILE, mark[1] if mark[0] == self._path else 0, _MAX_READ)
        if data is None:
            found = self._locate()
            if found is None:
                return Records()
            path = found[0]
            data = self._tail(OUTCOMES_FILE, mark[1] if mark[0] == path else 0, _MAX_READ)
        return parse_records(data) if data else Records()

    def read_outputs(self, offset: int, *, max_bytes: int = 64 * 1024 * 1024) -> tuple[int, dict[str, Output]]:
        """The rich results the worker appended to ``outputs.jsonl`` (beside the outcomes) after
        ``offset``: the new offset (complete lines only) and the outputs by id."""
        if self._path is None and self._locate() is None:
            return offset, {}
        data = self._tail(OUTPUTS_FILE, offset, max_bytes)
        if not data:
            return offset, {}
        end = data.rfind(b"\n")
        if end < 0:
            return offset, {}
        found: dict[str, Output] = {}
        for raw in data[: end + 1].split(b"\n"):
            try:
                entry: Any = json.loads(raw.decode("utf-8", "replace")) if raw.strip() else None
            except ValueError:
                continue
            if isinstance(entry, dict) and isinstance(entry.get("id"), str):
                output = output_from_record(entry.get("kind"), entry.get("data"), entry.get("table"))
                if output is not None:
                    found[entry["id"]] = output
        return offset + end + 1, found


def _open_folder(top: str, *names: str) -> int | None:
    """An fd of ``top/names...``, each step a real folder (``O_NOFOLLOW``), or None."""
    try:
        fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    for name in names:
        try:
            inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
        except OSError:
            os.close(fd)
            return None
        os.close(fd)
        fd = inner
    return fd


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "folder"), (stat.S_ISLNK, "symlink"), (stat.S_ISFIFO, "FIFO")):
        if test(mode):
            return name
    return "special file"


def _regular_size(name: str, dir_fd: int | None) -> int | None:
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return None
    return info.st_size if stat.S_ISREG(info.st_mode) else None
