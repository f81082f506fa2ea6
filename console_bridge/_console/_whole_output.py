"""A cell's whole output, read from its recording past mcp-console's per-poll window.

mcp-console answers each poll with at most about 8 KiB of output: the head and the latest tail,
and between them ``[output omitted: N UTF-8 bytes; raw log: PATH]``. The raw log is the cell's
whole output (both qualified versions write one file a cell: 0.0.6
``capture/sessions/NNN/cell-MMM.txt``, 0.0.5 ``outputs/call-NNNNNN.log``), framed exactly as a
response is (stderr and rich results between the worker's markers). When a cell ends and a poll
said it omitted something, :func:`complete` reads that file, inside the session's own recording and
never through a symlink, and rebuilds the result's text, stderr and segments from it. Past
``max_output`` bytes the head and the tail (half each, on character boundaries) are kept, the
stream in force where the tail starts carried over, and a notice between them says how many bytes
were dropped and where the whole output is. The log's text is rendered as a poll renders it
(:mod:`_escapes`: escape sequences and C1 controls stripped, a carriage return dropping the line's
text before it), so nothing a poll would have stripped reaches the result. Memory on the host stays
within ``max_output`` plus a read buffer, whatever a cell prints.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

from console_bridge._cells._notices import (
    DISPLAY_END,
    DISPLAY_SEP,
    DISPLAY_START,
    STDERR_END,
    STDERR_START,
    Segments,
    join_segments,
    split_streams,
)
from console_bridge._console._escapes import strip_escapes
from console_bridge._hostfs import open_regular
from console_bridge._results import CellResult

__all__ = ["DEFAULT_MAX_OUTPUT", "OMITTED", "complete", "omitted_notice", "raw_log", "stream_at"]

#: Per cell, unless the session says otherwise (``max_output``).
DEFAULT_MAX_OUTPUT = 10 * 1024 * 1024
OMITTED = re.compile(r"\[output omitted: (\d+) UTF-8 bytes; raw log: ([^\]\n]+)\]")
#: A cell's raw output in the recording: 0.0.6, then 0.0.5.
_RAW_NAME = re.compile(r"capture/sessions/\d+/cell-\d+\.txt|outputs/call-\d+\.log")
_BRIDGE_NOTE = "[console-bridge:"
_READ = 1 << 20
_MARKS = {mark.encode(): mark for mark in (STDERR_START, STDERR_END, DISPLAY_START, DISPLAY_SEP, DISPLAY_END)}


def omitted_notice(dropped: int, limit: int, where: str) -> str:
    return (
        f"\n[console-bridge: {dropped} bytes of output omitted here (past max_output={limit} bytes, head and tail "
        f"kept); the whole output is in the recording: {where}]\n"
    )


def raw_log(text: str, recording: Path | None) -> Path | None:
    """The raw log a poll's omission notice names: a cell's raw output file inside the session's own
    recording (the last such notice; a cell that prints a notice of its own names at most another of
    its session's outputs)."""
    if recording is None:
        return None
    root = os.path.realpath(recording)
    for match in reversed(list(OMITTED.finditer(text))):
        path = match.group(2)
        relative = path[len(str(recording)) + 1 :] if path.startswith(f"{recording}/") else ""
        if _RAW_NAME.fullmatch(relative) and os.path.realpath(os.path.dirname(path)).startswith(root + os.sep):
            return Path(path)
    return None


def _boundary(data: bytes, start: int) -> int:
    """``start`` moved forward past UTF-8 continuation bytes (a character is never split)."""
    while start < len(data) and data[start] & 0xC0 == 0x80:
        start += 1
    return start


def _state(fd: int, start: int, end: int) -> str:
    """The stream in force after the bytes ``start..end`` of the log (the last marker among them):
    ``"stdout"``, ``"stderr"`` or ``"display"``; ``"same"`` when there is none."""
    state, position, carry = "same", start, b""
    while position < end:
        block = carry + os.pread(fd, min(_READ, end - position), position)
        if not block:
            break
        position += len(block) - len(carry)
        found = [(block.rfind(raw), mark) for raw, mark in _MARKS.items()]
        index, mark = max(found)
        if index >= 0:
            state = {
                STDERR_START: "stderr",
                STDERR_END: "stdout",
                DISPLAY_START: "stdout",
                DISPLAY_SEP: "display",
                DISPLAY_END: "stdout",
            }[mark]
        carry = block[-2:]  # a marker (3 bytes) cut between two blocks
    return state


def stream_at(fd: int, offset: int) -> str:
    """The stream in force at ``offset`` of a raw log: the last marker before it says (``"stdout"``,
    ``"stderr"`` or ``"display"``), read back a block at a time."""
    end = offset
    while end > 0:
        start = max(0, end - _READ)
        text = os.pread(fd, end - start, start).decode("utf-8", errors="replace")
        for char in reversed(text):
            if char == STDERR_START:
                return "stderr"
            if char in (STDERR_END, DISPLAY_END):
                return "stdout"
            if char == DISPLAY_SEP:
                return "display"
        end = start + 2 if start > 0 else 0  # a marker (3 bytes) cut where the block starts: read again
    return "stdout"


def _lead(state: str) -> str:
    """The marker that opens ``state`` for a part of the log read on its own."""
    return {"stderr": STDERR_START, "display": DISPLAY_START + "-" + DISPLAY_SEP}.get(state, "")


def _read(path: Path, limit: int | None, start: int = 0) -> tuple[Segments, int] | None:
    """The log's segments from ``start`` (where the stream in force there goes on) and the bytes
    dropped past ``limit`` (less what came before ``start``, at least half of it); None when it cannot
    be read safely."""
    opened = open_regular(path)
    if opened is None:
        return None
    fd, info = opened
    try:
        size = info.st_size
        start = min(start, size)
        first = _lead(stream_at(fd, start)) if start else ""
        room = None if limit is None else max(limit - start, limit // 2)
        if room is None or size - start <= room:
            data = os.pread(fd, size - start, start) if size > start else b""
            return split_streams(first + strip_escapes(data.decode("utf-8", errors="replace")))[1], 0
        half = room // 2
        head = os.pread(fd, half + 3, start)
        head_end = _boundary(head, half)
        tail_start = size - half
        tail = os.pread(fd, half + 3, tail_start - 3)
        cut = _boundary(tail, 3)
        tail_start = tail_start - 3 + cut
        state = _state(fd, start + head_end, tail_start)
        if state == "same":  # no marker dropped: the stream where the head ends goes on
            state = stream_at(fd, start + head_end)
        head_segments = split_streams(first + strip_escapes(head[:head_end].decode("utf-8", errors="replace")))[1]
        tail_segments = split_streams(_lead(state) + strip_escapes(tail[cut:].decode("utf-8", errors="replace")))[1]
        dropped = tail_start - start - head_end
        note = (("stdout", omitted_notice(dropped, limit or 0, str(path))),)
        return join_segments([*head_segments, *note, *tail_segments]), dropped
    except OSError:
        return None
    finally:
        os.close(fd)


def complete(
    result: CellResult, recording: Path | None, limit: int | None, *, shown: tuple[Segments, int] | None = None
) -> CellResult:
    """``result`` with its whole output when a poll omitted part of it (else ``result`` itself).

    ``shown`` is what ``run(on_output=...)`` passed on from the polls before the first that omitted
    something, and where in the raw log they ended: the result is that, then the log from there
    (the result is what was streamed: the polls' pieces before, the log's text, rendered as the polls
    render it, from there)."""
    if not result.truncated:
        return result
    path = raw_log(result.text + result.stderr, recording)
    if path is None:
        return result
    before, start = shown if shown is not None else ((), 0)
    read = _read(path, limit, start)
    if read is None:
        return result
    segments, dropped = read
    # what the bridge itself added to the cell's output (a hint, a note) is not in the raw log: kept
    notes = [
        (stream, part)
        for stream, part in result.segments
        if part.lstrip().startswith(_BRIDGE_NOTE) and (stream, part) not in before
    ]
    segments = join_segments([*before, *segments, *notes])
    combined = "".join(part for _, part in segments)
    others = [block for block in result.content if block.get("type") != "text"]
    return dataclasses.replace(
        result,
        text="".join(part for stream, part in segments if stream != "stderr"),
        stderr="".join(part for stream, part in segments if stream == "stderr"),
        segments=segments,
        content=([{"type": "text", "text": combined}] if combined else []) + others,
        truncated=dropped > 0,
        omitted_bytes=dropped,
    )
