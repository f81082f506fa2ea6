"""What the server recorded about each call: the protocol-level signal for "the cell ended".

A cell can print ``[running; poll with an empty send]`` or ``[input requested: "..."]``
itself; the response text alone cannot tell its output from the server's notices.
The server's recording can: it logs ``cell_ended`` (0.0.6) and ``cell_output`` (both
versions) when a cell finishes, before the ``tool_result`` of the call that saw it
finish. The recording lives outside the sandbox's writable locations, so a cell
cannot write it. :class:`EventTail` follows ``events.jsonl`` incrementally.

An end counts only for a cell the bridge has not already seen finish: the server can log the
end of a killed cell late, after the call that reported the worker's death, and that end must
not make the next cell look finished while it still runs. Cells are named by
``owner.session_id``/``owner.cell_id`` (0.0.6; a new worker is a new session) or by the
``call_id`` that started them (0.0.5).
"""

from __future__ import annotations

import calendar
import contextlib
import datetime as dt
import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["CallEvents", "EventTail", "events_file"]

_NL_ENDED = (b'\n{"event":"cell_ended"', b'\n{"event":"cell_output"')
_END_LINE = re.compile(rb'\n\{"event":"cell_(?:ended|output)"[^\n]*')
_OWNER = re.compile(rb'"owner":\{"session_id":(\d+),"cell_id":(\d+)')
_CALL_ID = re.compile(rb'"call_id":(\d+)')
_NL_STARTED = b'\n{"event":"cell_started"'
_NL_RESULT = b'\n{"event":"tool_result"'
_CONTENT = b'"result":{"content":[{"type":"text","text":"'
_MAX_READ = 8 * 1024 * 1024
_COMPARE = 512
_AT = re.compile(rb'"at":"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?Z"')


@dataclass(frozen=True, slots=True)
class CallEvents:
    """What the recording says about one call: ``ended`` is true when a cell finished during it;
    ``started_at`` is the server's wall-clock time (epoch seconds) of a cell start seen during it."""

    ended: bool
    started_at: float | None = None


def events_file(recording_path: Path) -> Path | None:
    """The events log of a recording folder (0.0.6 ``capture/``, 0.0.5 ``internal/``)."""
    for name in ("capture/events.jsonl", "internal/events.jsonl"):
        candidate = recording_path / name
        if candidate.is_file():
            return candidate
    return None


def _result_text(entry: dict[str, Any]) -> str:
    result = entry.get("result")
    content = result.get("content") if isinstance(result, dict) else None
    if not isinstance(content, list):
        return ""
    return "\n".join(
        str(block.get("text", "")) for block in content if isinstance(block, dict) and block.get("type") == "text"
    )


class EventTail:
    """Reads a recording's events.jsonl from where it left off, one call at a time."""

    def __init__(self) -> None:
        self.path: Path | None = None
        self._offset = 0
        self._partial = b""
        self._ended = False
        self._started_at: float | None = None
        # Complete lines read but not yet consumed, each preceded by b"\n" (so a line start is
        # found with one bytes.find; the events a call waits for are few lines among many).
        self._buffer = b"\n"
        self._fd: int | None = None
        # The cells already seen to finish (ends of these are stale) and the latest seen to start.
        self._closed_cell: tuple[int, int] = (-1, -1)
        self._closed_call = -1
        self._latest_cell: tuple[int, int] = (-1, -1)
        self._latest_call = -1
        self._ended_key: tuple[str, tuple[int, int]] | None = None

    def attach(self, path: Path) -> None:
        if self.path != path:
            self.close()
            self.path, self._offset, self._partial, self._ended, self._buffer = path, 0, b"", False, b"\n"
            self._closed_cell = self._latest_cell = (-1, -1)
            self._closed_call = self._latest_call = -1
            self._ended_key = None

    def close(self) -> None:
        """Close the kept file (the tail can be attached again)."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def _read(self) -> bytes:
        """The complete lines appended since the last read. The file stays open (the server only
        appends to it, and cells cannot write the recording): a size check and a pread per call."""
        if self.path is None:
            return b""
        if self._fd is None:
            try:
                fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError:
                return b""
            try:
                regular = stat.S_ISREG(os.fstat(fd).st_mode)
            except OSError:
                regular = False
            if not regular:
                os.close(fd)
                return b""
            self._fd = fd
        try:
            size = os.fstat(self._fd).st_size
            if size <= self._offset:
                return b""
            data = os.pread(self._fd, min(size - self._offset, _MAX_READ), self._offset)
        except OSError:
            self.close()
            return b""
        self._offset += len(data)
        end = data.rfind(b"\n")
        if end < 0:
            self._partial += data
            return b""
        complete, self._partial = self._partial + data[: end + 1], data[end + 1 :]
        return complete

    def _note(self, buffer: bytes, start: int, end: int) -> None:
        """Note the cell ends and starts among the lines of ``buffer[start:end]``."""
        if buffer.find(_NL_ENDED[0], start, end) >= 0 or buffer.find(_NL_ENDED[1], start, end) >= 0:
            for match in _END_LINE.finditer(buffer, start, end):
                key = _cell_key(match.group())
                if not self._stale(key):
                    self._ended = True
                    self._ended_key = key
        at = buffer.rfind(_NL_STARTED, start, end)
        if at >= 0:
            line = buffer[at + 1 : buffer.find(b"\n", at + 1)]
            self._started_at = _timestamp(line)
            key = _cell_key(line)
            if key is not None and key[0] == "cell":
                self._latest_cell = max(self._latest_cell, key[1])

    def _stale(self, key: tuple[str, tuple[int, int]] | None) -> bool:
        """Whether an end names a cell already seen to finish (an unnamed end always counts)."""
        if key is None:
            return False
        kind, name = key
        return name <= self._closed_cell if kind == "cell" else name[0] <= self._closed_call

    def _close(self, key: tuple[str, tuple[int, int]] | None) -> None:
        if key is not None:
            kind, name = key
            if kind == "cell":
                self._closed_cell = max(self._closed_cell, name)
            else:
                self._closed_call = max(self._closed_call, name[0])

    def finished(self) -> None:
        """The call just returned by :meth:`next_call` saw its cell finish, whatever the recording
        says (the worker died, or the server reported the end some other way): any end of that
        cell, or of an earlier one, logged from now on is late and belongs to no later call."""
        self._closed_cell = max(self._closed_cell, self._latest_cell)
        self._closed_call = max(self._closed_call, self._latest_call)

    def next_call(self, text: str) -> CallEvents | None:
        """The events up to the ``tool_result`` whose text is ``text``; None when not (yet) recorded.

        Results of other calls met on the way (an abandoned poll) close their own window.
        """
        want = text[:_COMPARE]
        buffer = self._buffer + self._read()
        position = 0  # at the b"\n" before the next unconsumed line
        while (hit := buffer.find(_NL_RESULT, position)) >= 0:
            self._note(buffer, position, hit)
            line_end = buffer.find(b"\n", hit + 1)  # every line in the buffer is complete
            line = buffer[hit + 1 : line_end]
            position = line_end
            call = _CALL_ID.search(line, 0, 64)
            if call is not None:
                self._latest_call = max(self._latest_call, int(call.group(1)))
            ended, self._ended = self._ended, False
            if ended:
                self._close(self._ended_key)
            self._ended_key = None
            started, self._started_at = self._started_at, None
            if _same_text(line, want, whole=len(text) <= _COMPARE):
                self._buffer = buffer[position:]
                return CallEvents(ended=ended, started_at=started)
        self._note(buffer, position, len(buffer))
        self._buffer = b"\n"
        return None


def _cell_key(line: bytes) -> tuple[str, tuple[int, int]] | None:
    """The cell an event line names: ``("cell", (session_id, cell_id))`` (0.0.6), else
    ``("call", (call_id, 0))`` (0.0.5: the call that started it), else None."""
    owner = _OWNER.search(line)
    if owner is not None:
        return "cell", (int(owner.group(1)), int(owner.group(2)))
    call = _CALL_ID.search(line)
    if call is not None:
        return "call", (int(call.group(1)), 0)
    return None


def _same_text(line: bytes, want: str, *, whole: bool) -> bool:
    """Whether the ``tool_result`` event ``line`` carries a result whose text starts with ``want``
    (is ``want``, when ``whole``). The server writes the result as ``"content":[{"type":"text",
    "text":"..."``, escaped as JSON: that exact form is looked for first; anything else is parsed."""
    encoded = json.dumps(want, ensure_ascii=False)[1:-1].encode("utf-8", "surrogatepass")
    if _CONTENT + encoded + (b'"}]' if whole else b"") in line:
        return True
    try:
        entry = json.loads(line)
    except ValueError:
        return False
    return isinstance(entry, dict) and _result_text(entry)[:_COMPARE] == want


def _timestamp(line: bytes) -> float | None:
    """The ``at`` field (RFC 3339 with nanoseconds, UTC) of an event line as epoch seconds.

    Read once per cell: the server writes ``at`` as the line's last key, so a strict pattern that
    ends the line is read without parsing it (any other line is parsed)."""
    text = line.rstrip()
    match = _AT.search(text, max(0, len(text) - 48))
    if match is not None and match.end() == len(text) - 1 and text.endswith(b"}"):  # the top level's last key
        year, month, day, hour, minute, second, frac = match.groups()
        try:
            base = calendar.timegm((int(year), int(month), int(day), int(hour), int(minute), int(second)))
        except (ValueError, OverflowError):
            return None
        return base + (int(frac) / 10 ** len(frac) if frac else 0.0)
    try:
        entry = json.loads(line)
        stamp = str(entry["at"]).rstrip("Z")
        whole, _, frac_text = stamp.partition(".")
        moment = dt.datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=dt.UTC)
        return moment.timestamp() + float(f"0.{frac_text or '0'}")
    except (ValueError, KeyError, TypeError):
        return None
