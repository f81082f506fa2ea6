"""A running cell's whole output for ``run(on_output=...)``, read from the raw log past a poll's window.

Each poll answers with the output since the previous one (the worker's frames kept, escape sequences
and carriage-return overwrites rendered away), at most about 8 KiB: past that the head, then
``\\n[output omitted: N UTF-8 bytes; raw log: PATH]\\n``, then the latest tail, where ``N`` counts the
raw log's bytes between them. While no poll omitted anything the polls' own pieces are passed on,
and the bytes they held say where the cell's output stands in its raw log. From the first poll that
omitted something on, the pieces come from the raw log (found as :mod:`_whole_output` finds it:
inside the session's own recording, never through a symlink), from where the earlier polls ended
up to the log's size at each poll: the frames are read as they go (a marker or a character cut
between two reads waits for its rest, the stream in force carries over, a rich result is passed on
whole with its bundle). Past ``max_output`` bytes in the cell the middle is no longer streamed,
once said in a piece; the cell's result keeps its head and tail (:func:`_whole_output.complete`).
Memory stays within a read block and one rich result's text.

The raw log keeps what the polls render away (escape sequences, overwritten progress lines): the
earlier polls' end is found by the omitting poll's head, searched from the bytes they held on, and
the log's text is rendered as the polls render it (:mod:`_escapes`, its state carried from one read
to the next, so a sequence cut between two reads never leaks).
"""

from __future__ import annotations

import codecs
import dataclasses
import os
import re
from collections.abc import Iterator
from pathlib import Path

from console_bridge._cells._notices import (
    DISPLAY_END,
    DISPLAY_SEP,
    DISPLAY_START,
    STDERR_END,
    STDERR_START,
    Segments,
    join_segments,
)
from console_bridge._cells._observe import CellObserver, split_chunk
from console_bridge._console._escapes import EscapeFilter
from console_bridge._console._whole_output import OMITTED, raw_log, stream_at
from console_bridge._hostfs import open_regular
from console_bridge._results import CellResult

__all__ = ["Frames", "LiveOutput"]

_READ = 1 << 20
#: How far past the bytes the earlier polls held their end may lie (what they rendered away).
_SEARCH = 4 << 20
_PROBE = 256
_BRIDGE_NOTE = "[console-bridge:"
_NUMBER = re.compile(r"\d+")


class Frames:
    """The worker's frames (see ``_cells.split_streams``) read a piece at a time: ``feed`` returns
    ``(stream, text, display_id)`` segments, a rich result's once its frame closed (or the cell ended)."""

    def __init__(self) -> None:
        self.stream = self.outside = "stdout"
        self.ident: list[str] | None = None  # reading a rich result's id
        self.display: tuple[str, list[str]] | None = None  # a rich result's id and text so far

    def feed(self, text: str, *, final: bool = False) -> list[tuple[str, str, str | None]]:
        out: list[tuple[str, str, str | None]] = []
        start = 0
        for index, char in enumerate(text):
            if char not in _MARKER_CHARS:
                continue
            self._text(text[start:index], out)
            start = index + 1
            if char == STDERR_START and self.display is None:
                self.stream = self.outside = "stderr"
            elif char == STDERR_END and self.display is None:
                self.stream = self.outside = "stdout"
            elif char == DISPLAY_START:
                self.ident = []
            elif char == DISPLAY_SEP and self.ident is not None:
                self.display, self.ident = ("".join(self.ident), []), None
            elif char == DISPLAY_END and self.display is not None:
                out.append(("display", "".join(self.display[1]), self.display[0]))
                self.display, self.stream = None, self.outside
        self._text(text[start:], out)
        if final:
            if self.display is not None:  # a frame the cell never closed
                out.append(("display", "".join(self.display[1]), self.display[0]))
            self.display = self.ident = None
        return out

    def _text(self, piece: str, out: list[tuple[str, str, str | None]]) -> None:
        if not piece:
            return
        if self.ident is not None:
            self.ident.append(piece)
        elif self.display is not None:
            self.display[1].append(piece)
        elif out and out[-1][0] == self.stream:
            out[-1] = (self.stream, out[-1][1] + piece, None)
        else:
            out.append((self.stream, piece, None))


_MARKER_CHARS = frozenset((STDERR_START, STDERR_END, DISPLAY_START, DISPLAY_SEP, DISPLAY_END))


class LiveOutput:
    """The pieces ``run(on_output=...)`` passes on for one cell, poll by poll (see the module).

    Made before the cell is submitted, from the session's ``observer`` (what each response held)
    and ``limit`` (``max_output``)."""

    def __init__(self, observer: CellObserver, limit: int | None) -> None:
        self.observer = observer
        self.limit = limit
        self.bundle = observer.display_reader()
        self._start = self._seen = observer.output_bytes
        self.path: Path | None = None
        self.offset = self._switched_at = 0  # the raw log's bytes passed on; where the polls' ended
        self.stopped = False  # past the limit: the middle is no longer streamed
        self._failed = False  # the raw log could not be read: the polls' pieces, as before
        self._before: list[tuple[str, str]] = []  # what the polls' own pieces carried
        self._frames = Frames()
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._escapes = EscapeFilter()  # what the polls strip, stripped from the log's text

    def pieces(self, chunk: CellResult, recording: Path | None) -> Iterator[CellResult]:
        """The pieces of one poll's ``chunk`` (``recording``: the session's recording folder)."""
        before, self._seen = self._seen, self.observer.output_bytes
        if self.path is None and not self._failed and chunk.truncated:
            self._switch(chunk, before - self._start, recording)
        if self.path is None:
            if chunk.text or chunk.stderr or chunk.images or not chunk.running:
                for piece in split_chunk(chunk):
                    self._before.extend(piece.segments)
                    yield piece
            return
        yield from self._from_log(chunk)

    @property
    def shown(self) -> tuple[Segments, int] | None:
        """Once the pieces come from the raw log: what the polls' own pieces carried before, and
        where in the log they ended (for ``complete``: the result is what was streamed)."""
        return (join_segments(self._before), self._switched_at) if self.path is not None else None

    def _switch(self, chunk: CellResult, earlier: int, recording: Path | None) -> None:
        """Find the raw log a poll named, where in it the earlier polls ended and the stream there."""
        path = raw_log(chunk.text + chunk.stderr, recording)
        if path is None or not _newest(path):  # a notice the cell printed (naming its own or an earlier log)
            return
        opened = open_regular(path)
        if opened is None:
            self._failed = True
            return
        fd, info = opened
        try:
            framed = self.observer.last_framed
            match = OMITTED.search(framed)
            head = framed[: match.start()].removesuffix("\n") if match is not None else ""
            self.offset = _find(fd, info.st_size, earlier, head.encode())
            stream = stream_at(fd, self.offset)
        except OSError:
            self._failed = True
            return
        finally:
            os.close(fd)
        self.path, self._switched_at = path, self.offset
        if stream == "display":
            self._frames.display = ("", [])
        else:
            self._frames.stream = self._frames.outside = stream

    def _from_log(self, chunk: CellResult) -> Iterator[CellResult]:
        segments = [] if self.stopped else list(self._read(final=not chunk.running))
        notes = [(stream, part, None) for stream, part in chunk.segments if part.lstrip().startswith(_BRIDGE_NOTE)]
        segments.extend(notes)
        if not segments and chunk.running and not chunk.images:
            return
        plots = chunk.outputs[sum(1 for stream, _ in chunk.segments if stream == "display") :]
        others = [block for block in chunk.content if block.get("type") != "text"]
        if not segments:
            yield dataclasses.replace(
                chunk, text="", stderr="", segments=(), outputs=plots, content=others, stream="stdout", truncated=False
            )
            return
        for index, (stream, part, ident) in enumerate(segments):
            last = index == len(segments) - 1
            piece = dataclasses.replace(
                chunk,
                text=part if stream != "stderr" else "",
                stderr=part if stream == "stderr" else "",
                segments=((stream, part),),
                outputs=([self.bundle(ident, part)] if ident is not None else []) + (plots if last else []),
                stream="stdout" if stream == "display" else stream,  # (the segment still says "display")
                content=[{"type": "text", "text": part}] + (others if last else []),
                images=chunk.images if last else [],
                truncated=False,
            )
            if not last:
                piece = dataclasses.replace(piece, running=True, error=None, is_error=False, waiting_for_input=False)
            yield piece

    def _read(self, *, final: bool) -> Iterator[tuple[str, str, str | None]]:
        """The raw log's segments from ``offset`` to its size now, a block at a time; past ``limit``
        bytes of log (where the result keeps head and tail) the stream stops, saying so."""
        assert self.path is not None
        opened = open_regular(self.path)
        if opened is None:
            return
        fd, info = opened
        try:
            end = info.st_size
            while self.offset < end:
                size = min(_READ, end - self.offset)
                over = self.limit is not None and self.offset + size > self.limit
                if over:
                    size = max((self.limit or 0) - self.offset, 0)
                block = os.pread(fd, size, self.offset) if size else b""
                self.offset += len(block)
                if over:
                    self.stopped = True
                    yield from self._frames.feed(self._text(block, final=True), final=True)
                    yield ("stdout", _stopped_notice(self.limit or 0, str(self.path)), None)
                    return
                if not block:
                    break
                yield from self._frames.feed(self._text(block))
        except OSError:
            return
        finally:
            os.close(fd)
        if final:
            yield from self._frames.feed(self._text(b"", final=True), final=True)

    def _text(self, block: bytes, *, final: bool = False) -> str:
        """A block of the log as text, rendered as a poll renders it (a character or a sequence cut at
        the block's end waits for its rest)."""
        return self._escapes.feed(self._decoder.decode(block, final=final), final=final)


def _stopped_notice(limit: int, where: str) -> str:
    return (
        f"\n[console-bridge: the output passed max_output={limit} bytes; the rest is not streamed (the result "
        f"keeps the head and the tail); the whole output is in the recording: {where}]\n"
    )


def _newest(path: Path) -> bool:
    """Is ``path`` the newest raw log of its folder (the running cell's: both versions number them
    in order)?"""
    try:
        names = os.listdir(path.parent)
    except OSError:
        return False
    numbers = [int(match.group()) for name in names if (match := _NUMBER.search(name)) and name.endswith(path.suffix)]
    own = _NUMBER.search(path.name)
    return own is not None and numbers != [] and int(own.group()) == max(numbers)


def _find(fd: int, size: int, earlier: int, head: bytes) -> int:
    """Where the poll whose (framed) head is ``head`` starts in the raw log: at ``earlier`` (the bytes
    the earlier polls held), or past it by what they rendered away (found by the head's first bytes)."""
    earlier = min(earlier, size)
    probe = head[:_PROBE].split(b"\r")[0].split(b"\x1b")[0]
    if not probe:
        return earlier
    window = os.pread(fd, min(_SEARCH + len(probe), size - earlier), earlier)
    found = window.find(probe)
    return earlier + found if found >= 0 else earlier
