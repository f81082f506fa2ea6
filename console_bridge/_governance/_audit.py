"""The audit log: append-only JSON Lines, one complete line per event, flushed per record."""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import hashlib
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from console_bridge._errors import BridgeError

__all__ = ["AuditLog", "sha256_json"]

_LOCKS: dict[Path, threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()


def _lock_for(path: Path) -> threading.Lock:
    with _LOCKS_GUARD:
        return _LOCKS.setdefault(path, threading.Lock())


def sha256_json(value: Any) -> str:
    """SHA-256 of the canonical JSON of ``value``."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class AuditLog:
    """Append-only JSON Lines audit log.

    Every record carries ``ts`` (UTC ISO 8601), ``event``, ``owner``, ``server`` and
    what the event is about: ``tool``, ``args_sha256``/``result_sha256``, sizes,
    ``duration_ms``, ``outcome``, ``reason``. Raw arguments and results are written
    only with ``include_content=True``. Each record is one ``write`` of one whole
    line under a lock (threads) and ``flock`` (processes), so writers never
    interleave within a line.

    Example::

        log = AuditLog("audit.jsonl")
        conn = McpConnection(cfg, "files", owner=owner, policy=Policy(audit=log))
        for record in log.records():
            print(record["event"], record.get("tool"), record.get("outcome"))
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        include_content: bool = False,
        max_file_bytes: int | None = None,
        backups: int = 3,
    ) -> None:
        self.path = Path(path).expanduser().absolute()
        self.include_content = include_content
        self.max_file_bytes = max_file_bytes
        self.backups = backups
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8"):
                pass
        except OSError as exc:
            raise BridgeError(f"cannot open audit log {str(self.path)!r}: {exc}; choose a writable path") from None

    def __repr__(self) -> str:
        return f"AuditLog({str(self.path)!r}, include_content={self.include_content})"

    def write(self, event: str, **fields: Any) -> None:
        """Append one record. ``content_*`` fields are kept only with ``include_content``."""
        record: dict[str, Any] = {"ts": dt.datetime.now(dt.UTC).isoformat(timespec="microseconds"), "event": event}
        for key, value in fields.items():
            if key.startswith("content_"):
                if self.include_content:
                    record[key.removeprefix("content_")] = value
            elif value is not None:
                record[key] = value
        line = (json.dumps(record, ensure_ascii=False, default=str) + "\n").encode("utf-8")
        with _lock_for(self.path):
            self._rotate_if_needed(len(line))
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                os.write(fd, line)
            finally:
                os.close(fd)

    def _rotate_if_needed(self, incoming: int) -> None:
        if not self.max_file_bytes:
            return
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return
        if size + incoming <= self.max_file_bytes:
            return
        for index in range(self.backups - 1, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{index}")
            if older.exists():
                older.replace(self.path.with_name(f"{self.path.name}.{index + 1}"))
        if self.backups > 0:
            self.path.replace(self.path.with_name(f"{self.path.name}.1"))
        else:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()

    def records(self) -> Iterator[dict[str, Any]]:
        """Every record of the current file, oldest first."""
        with open(self.path, encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    yield json.loads(line)
