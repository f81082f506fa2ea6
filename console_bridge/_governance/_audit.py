"""The audit log: append-only JSON Lines, one complete line per event, flushed per record.

Record shape (every record)::

    {"ts": "2025-06-01T12:00:00.123456+00:00", "event": "...", "owner": "agent-1/conv-7",
     "agent_id": "agent-1", "session_id": "conv-7", "server": "files", "connection": "3f9c...", ...}

Events written by connections:

=============  ===============================================================================
``lifecycle``  ``action``: ``connect_start``, ``connect``, ``close``, ``cancel``, ``timeout``,
               ``crash``, ``desynchronized`` (with ``pid``, ``server_info`` or ``reason``)
``schema``     a tool pinned: ``tool``, ``sha256`` (pin fingerprint), ``flags`` (matched
               injection patterns, ``"<where>: <pattern>"``), ``exposed``, ``requires_approval``
``refusal``    refused before anything was sent: ``target``, ``tool``, ``reason``
``approval``   the gate asked: ``tool``, ``call``, ``args_sha256``, ``approved``, ``reason``,
               ``flags``, ``error`` (exception or timeout), ``gate`` (false: no callable)
``call_start`` ``tool``, ``call``, ``args_sha256``, ``args_bytes`` (+ ``arguments``)
``call_end``   ``tool``, ``call``, ``outcome`` (``ok``, ``tool_error``,
               ``output_schema_violation`` or an error class name), ``result_sha256``,
               ``result_bytes``, ``truncated``, ``duration_ms``, ``reason`` (+ ``result``)
``drift``      a pinned tool was revoked: ``tool``, ``reason``
=============  ===============================================================================

``call`` joins a call's ``approval``, ``call_start`` and ``call_end`` records;
``connection`` tells apart two connections of one owner to one server. Raw
``arguments`` and ``result`` appear only with ``include_content=True``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from console_bridge._errors import BridgeError, InvalidArgument

__all__ = ["AuditLog", "sha256_json"]

_LOCKS: dict[Path, threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()


def _lock_for(path: Path) -> threading.Lock:
    with _LOCKS_GUARD:
        return _LOCKS.setdefault(path, threading.Lock())


def sha256_json(value: Any) -> str:
    """SHA-256 (hex) of the canonical JSON of ``value`` (sorted keys, compact, UTF-8)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class AuditLog:
    """Append-only JSON Lines audit log, safe for many threads, connections and processes.

    Each record is one ``write`` of one whole line, made under a per-file thread lock
    and an exclusive ``flock``, straight to the file (nothing is buffered): readers
    see whole lines, and writers never interleave within a line.

    ``include_content=True`` adds the raw ``arguments`` and ``result`` of calls;
    without it only their SHA-256 and sizes are written. ``max_file_bytes`` turns on
    rotation: a record that would take the file past it first moves ``path`` to
    ``path.1`` (``path.1`` to ``path.2``, ..., keeping ``backups`` old files).

    Example::

        log = AuditLog("audit.jsonl", include_content=True, max_file_bytes=50_000_000, backups=5)
        conn = McpConnection(cfg, "files", owner=owner, tools=["read_file"], policy=Policy(audit=log))
        for record in log.records(rotated=True):
            print(record["ts"], record["event"], record.get("tool"), record.get("outcome"))

    Raises :class:`BridgeError` when the file cannot be created or written.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        include_content: bool = False,
        max_file_bytes: int | None = None,
        backups: int = 3,
    ) -> None:
        if max_file_bytes is not None and (
            isinstance(max_file_bytes, bool) or not isinstance(max_file_bytes, int) or max_file_bytes < 1
        ):
            raise InvalidArgument(f"AuditLog max_file_bytes must be a positive int or None, not {max_file_bytes!r}")
        if isinstance(backups, bool) or not isinstance(backups, int) or backups < 0:
            raise InvalidArgument(f"AuditLog backups must be an int >= 0, not {backups!r}")
        self.path = Path(path).expanduser().absolute()
        self.include_content = bool(include_content)
        self.max_file_bytes = max_file_bytes
        self.backups = backups
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            os.close(os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600))
        except OSError as exc:
            raise BridgeError(f"cannot open audit log {str(self.path)!r}: {exc}; choose a writable path") from None

    def __repr__(self) -> str:
        return f"AuditLog({str(self.path)!r}, include_content={self.include_content})"

    def write(self, event: str, **fields: Any) -> dict[str, Any]:
        """Append one record and return it. ``content_<name>`` fields are kept (as ``<name>``)
        only with ``include_content``; ``None`` values are left out."""
        record: dict[str, Any] = {"ts": dt.datetime.now(dt.UTC).isoformat(timespec="microseconds"), "event": event}
        for key, value in fields.items():
            if key.startswith("content_"):
                if self.include_content:
                    record[key.removeprefix("content_")] = value
            elif value is not None:
                record[key] = value
        line = (json.dumps(record, ensure_ascii=False, default=str) + "\n").encode("utf-8", "surrogatepass")
        try:
            with _lock_for(self.path):
                self._append(line)
        except OSError as exc:  # an audit failure must be visible, never silent
            raise BridgeError(f"could not write the audit log {str(self.path)!r}: {exc}") from None
        return record

    def _open_current(self) -> int:
        """An fd of the file now at ``path``, exclusively locked (re-opened if rotated meanwhile)."""
        while True:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                import fcntl  # Unix only: imported here so that `import console_bridge` works on Windows too

                fcntl.flock(fd, fcntl.LOCK_EX)
                held = os.fstat(fd)
                try:
                    now = os.stat(self.path)
                except FileNotFoundError:
                    now = None
                if now is not None and (now.st_ino, now.st_dev) == (held.st_ino, held.st_dev):
                    return fd
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)  # another process rotated the file between open and lock

    def _append(self, line: bytes) -> None:
        while True:
            fd = self._open_current()
            try:
                size = os.fstat(fd).st_size
                if self.max_file_bytes is not None and size > 0 and size + len(line) > self.max_file_bytes:
                    self._rotate()
                    continue  # others may fill the new file before we lock it: check again
                view = memoryview(line)
                while view:
                    written = os.write(fd, view)
                    view = view[written:]
                return
            finally:
                os.close(fd)

    def _rotate(self) -> None:
        """Shift ``path.N`` up by one and move ``path`` to ``path.1`` (caller holds the lock)."""
        if self.backups == 0:
            self.path.unlink(missing_ok=True)
            return
        for index in range(self.backups - 1, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{index}")
            if older.exists():
                older.replace(self.path.with_name(f"{self.path.name}.{index + 1}"))
        self.path.replace(self.path.with_name(f"{self.path.name}.1"))

    def files(self) -> list[Path]:
        """The rotated files that exist, oldest first, then the current file."""
        backups = [self.path.with_name(f"{self.path.name}.{i}") for i in range(self.backups, 0, -1)]
        return [*(path for path in backups if path.exists()), self.path]

    def records(self, *, rotated: bool = False) -> Iterator[dict[str, Any]]:
        """Every record of the current file (and, with ``rotated``, of the backups first), oldest first."""
        for path in self.files() if rotated else [self.path]:
            try:
                lines = path.read_text(encoding="utf-8").splitlines()
            except FileNotFoundError:
                continue
            for line in lines:
                if line.strip():
                    yield json.loads(line)
