"""From a ``send`` response to a :class:`CellResult`: the server's status and the cell's outcome.

:class:`CellObserver` follows, for one console session, the server's recording (the
protocol-level "the cell ended", see ``_events``) and the worker hooks' outcome log
(see ``_outcome``). The pure helpers build chunks, merge them into a cell, and word a
result for the model.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import anyio

from console_bridge._cells._events import CallEvents, EventTail, events_file
from console_bridge._cells._notices import (
    LOST_MARK,
    CellNotice,
    Segments,
    bridge_hint,
    cut_segments,
    join_segments,
    split_response,
    split_streams,
)
from console_bridge._cells._outcome import (
    OutcomeLog,
    limit_failure,
    lost_failure,
    parse_records,
    tampered_failure,
    worker_exited_failure,
)
from console_bridge._cells._recordings import Recording
from console_bridge._results import CellFailure, CellResult, Image, Output, ToolResult

__all__ = ["CellObserver", "cell_from", "for_model", "is_restart_notice_only", "merge", "reword_restart", "split_chunk"]

_OMITTED = "[output omitted: "
#: The last part of a rich result's id when its bundle is its text/plain alone (the startup code's
#: emit): the kind, and "n" when the frame added a newline to the text.
_PLAIN: dict[str, tuple[Literal["display", "result"], bool]] = {
    "r": ("result", False),
    "rn": ("result", True),
    "d": ("display", False),
    "dn": ("display", True),
}


def _lost_failures(ids: tuple[str, ...]) -> list[CellFailure]:
    """The failure records carried by lost-record frames (one that cannot be read still fails the cell)."""
    lost: list[CellFailure] = []
    for ident in ids:
        if ident.startswith(LOST_MARK):
            records = parse_records(ident[len(LOST_MARK) :].encode("utf-8", "surrogatepass"))
            lost.extend(records.failures or (lost_failure(),))
    return lost


def cell_from(
    result: ToolResult,
    elapsed: float,
    notice: CellNotice,
    *,
    is_error: bool = False,
    error: CellFailure | None = None,
    segments: Segments | None = None,
    plain: str | None = None,
    outputs: list[Output] | None = None,
) -> CellResult:
    """One observation: the cell's output only (the server's status notices are in the fields).

    ``segments`` are the streams of ``plain`` (the response text without stderr frames, see
    ``split_streams``); ``notice.output`` is the part of ``plain`` that is output.
    """
    if segments is None or plain is None:
        plain = notice.output
        segments = (("stdout", plain),) if plain else ()
    parts = cut_segments(segments, plain, notice.output)
    hint = bridge_hint(notice.output)
    if hint is not None:
        parts = join_segments(
            [
                *parts,
                ("stderr", "\n" if notice.output and not notice.output.endswith("\n") else ""),
                ("stderr", hint + "\n"),
            ]
        )
    text = "".join(part for stream, part in parts if stream != "stderr")
    stderr = "".join(part for stream, part in parts if stream == "stderr")
    combined = "".join(part for _, part in parts)
    shown = sum(1 for stream, _ in parts if stream == "display")
    displayed = (outputs or [])[:shown]
    rich = displayed + [_plot_output(image) for image in result.images]
    # a figure IPython's display formatter showed is an image too (adapters, serve and `run` read .images)
    images = [*result.images, *_images_of(displayed)]
    content = result.content
    if combined != result.text:
        # The text blocks carry the notices too; keep the images and other blocks, one clean text block.
        others = [block for block in result.content if block.get("type") != "text"]
        content = ([{"type": "text", "text": combined}] if combined else []) + others
    return CellResult(
        text=text,
        stderr=stderr,
        segments=parts,
        outputs=rich,
        content=content,
        images=images,
        structured=result.structured,
        is_error=is_error or result.is_error,
        truncated=result.truncated or _OMITTED in combined,
        server=result.server,
        tool=result.tool,
        running=notice.running,
        elapsed=elapsed,
        waiting_for_input=notice.waiting_for_input,
        prompt=notice.prompt,
        worker_exited=notice.worker_exited,
        error=error,
        idle=notice.idle,
    )


def merge(chunks: list[CellResult], elapsed: float, *, running: bool = False) -> CellResult:
    """One result for a whole cell: every chunk's output and image, and the cell's failure."""
    last = chunks[-1]
    segments = join_segments([segment for chunk in chunks for segment in _segments_of(chunk)])
    errors = [chunk.error for chunk in chunks if chunk.error is not None]
    return CellResult(
        text="".join(part for stream, part in segments if stream != "stderr"),
        stderr="".join(part for stream, part in segments if stream == "stderr"),
        segments=segments,
        outputs=[output for chunk in chunks for output in chunk.outputs],
        content=[block for chunk in chunks for block in chunk.content],
        images=[image for chunk in chunks for image in chunk.images],
        structured=last.structured,
        is_error=any(chunk.is_error for chunk in chunks),
        truncated=any(chunk.truncated for chunk in chunks),
        server=last.server,
        tool=last.tool,
        running=running,
        elapsed=elapsed,
        waiting_for_input=last.waiting_for_input,
        prompt=last.prompt,
        worker_exited=any(chunk.worker_exited for chunk in chunks),
        error=errors[0] if errors else None,
        usage=next((chunk.usage for chunk in reversed(chunks) if chunk.usage is not None), None),
    )


def _bundle(ident: str, plain: str, pending: dict[str, Output]) -> Output:
    """A rich result's bundle: its text alone when its id says so, else its record (taken from
    ``pending``), else its text/plain alone."""
    only_text = _PLAIN.get(ident.rpartition("-")[2])
    if only_text is not None:  # a bundle of its text alone, shown in the frame (no record)
        kind, added_newline = only_text
        return Output(kind, {"text/plain": plain[:-1] if added_newline and plain.endswith("\n") else plain})
    output = pending.pop(ident, None)
    return output if output is not None else Output("display", {"text/plain": plain})


def _images_of(outputs: list[Output]) -> list[Image]:
    """The PNG and JPEG images among rich outputs (each once)."""
    found: list[Image] = []
    for output in outputs:
        for mime in ("image/png", "image/jpeg"):
            data = output.data.get(mime)
            if isinstance(data, bytes) and all(image.data != data for image in found):
                found.append(Image(mime, data))
    return found


def _plot_output(image: Image) -> Output:
    """A plot the worker captured, as a display of its image."""
    data: dict[str, str | bytes] = {"text/plain": repr(image)}
    data[image.mime_type] = image.data if image.mime_type != "image/svg+xml" else image.data.decode("utf-8", "replace")
    return Output("display", data)


def _segments_of(chunk: CellResult) -> Segments:
    if chunk.segments:
        return chunk.segments
    return join_segments([("stdout", chunk.text), ("stderr", chunk.stderr)])


def split_chunk(chunk: CellResult) -> list[CellResult]:
    """One observation as the chunks ``run(on_output=...)`` passes on: one per stream segment, in
    order (the images and status with the last); a chunk without output stays one. A chunk's
    ``stream`` is ``"stdout"`` or ``"stderr"``: a rich result's text/plain is stdout text, and its
    one segment, ``("display", text)``, tells it apart."""
    segments = _segments_of(chunk)
    if len(segments) <= 1 and not (segments and segments[0][0] == "display" and len(chunk.outputs) > 1):
        stream = segments[0][0] if segments else "stdout"
        return [dataclasses.replace(chunk, stream="stdout" if stream == "display" else stream)]
    out: list[CellResult] = []
    shown = iter(chunk.outputs)
    plots = chunk.outputs[sum(1 for stream, _ in segments if stream == "display") :]
    for index, (stream, part) in enumerate(segments):
        last = index == len(segments) - 1
        mine = [output] if stream == "display" and (output := next(shown, None)) is not None else []
        piece = dataclasses.replace(
            chunk,
            text=part if stream != "stderr" else "",
            stderr=part if stream == "stderr" else "",
            segments=((stream, part),),
            outputs=mine + (plots if last else []),
            stream="stdout" if stream == "display" else stream,  # (the segment still says "display")
            content=[{"type": "text", "text": part}]
            + ([b for b in chunk.content if b.get("type") != "text"] if last else []),
            images=chunk.images if last else [],
        )
        if not last:
            piece = dataclasses.replace(piece, running=True, error=None, is_error=False, waiting_for_input=False)
        out.append(piece)
    return out


_RESTART_LINE = re.compile(r"^\[[^\]\n]*explicit restart required\]$", re.MULTILINE)
RESTARTED = "[console-bridge: a fresh worker was started; the in-memory state is lost]"


def is_restart_notice_only(text: str) -> bool:
    """Is ``text`` the server's "explicit restart required" notice and nothing else?"""
    return _RESTART_LINE.fullmatch(text.strip()) is not None


def reword_restart(cell: CellResult) -> CellResult:
    """After the bridge restarted a worker the server said needs an "explicit restart": that notice
    is no longer true, so it becomes one that is (nothing else changes)."""
    if _RESTART_LINE.search(cell.combined) is None:
        return cell

    def fix(text: str) -> str:
        return _RESTART_LINE.sub(RESTARTED, text)

    segments = tuple((stream, fix(part)) for stream, part in cell.segments)
    content = [
        {**block, "text": fix(str(block.get("text", "")))} if block.get("type") == "text" else block
        for block in cell.content
    ]
    return dataclasses.replace(cell, text=fix(cell.text), stderr=fix(cell.stderr), segments=segments, content=content)


def for_model(result: CellResult) -> CellResult:
    """The model's view of a result: its status as the server words it, after the output.

    The model drives the cell through the ``send`` tool alone, so it needs to read that
    the cell still runs or waits for input, and that it failed; the host's CellResult
    keeps these in fields instead.
    """
    lines: list[str] = []
    if result.waiting_for_input:
        if result.prompt is not None:
            lines.append(f'[input requested: "{result.prompt}"]')
        lines.append("[waiting for stdin]")
    if result.running:
        lines.append("[running; poll with an empty send]")
    if result.idle:
        lines.append("[idle]")
    if result.error is not None and result.error.kind != "worker_exited":
        lines.append(f"[console-bridge: the cell failed: {result.error}]".replace("\n", " "))
    combined = result.combined
    if not lines:
        if combined == result.text:
            return result
        others = [block for block in result.content if block.get("type") != "text"]
        return dataclasses.replace(result, text=combined, content=[{"type": "text", "text": combined}, *others])
    text = combined if not combined or combined.endswith("\n") else combined + "\n"
    text += "\n".join(lines)
    others = [block for block in result.content if block.get("type") != "text"]
    return dataclasses.replace(result, text=text, content=[{"type": "text", "text": text}, *others])


class CellObserver:
    """The status and outcome side of one session's cells.

    ``locate`` returns the session's recording once it exists; ``on_recording`` is called
    once when it is found (the session writes its sidecar then). ``limit_check`` is the
    confinement layer's hook: called when a cell ended, it returns ``(limit_name, detail)``
    when the cell ran into a resource limit (kernel counters), and the cell's failure is
    then a ``limit_failure`` (kind ``"limit"``), also when the code caught the refusal.
    """

    def __init__(
        self,
        locate: Callable[[], Recording | None],
        on_recording: Callable[[Recording], None],
        *,
        events_wait: float,
    ) -> None:
        self.locate = locate
        self.on_recording = on_recording
        self.events_wait = events_wait
        self.events = EventTail()
        self.outcomes: OutcomeLog | None = None
        self.notices: list[str] = []
        self.limit_check: Callable[[CellFailure | None], tuple[str, str] | None] | None = None
        self.last_notice = split_response("", ended=True)
        self.last_started_at: float | None = None
        self._mark: tuple[Path | None, int] | None = None
        self._language: str | None = None
        self._events_missing = False
        self._outputs_offset = 0
        self._pending_outputs: dict[str, Output] = {}
        #: UTF-8 bytes of cell output (the worker's frames included, the server's notices not) in every
        #: response so far: where a cell's output stands in its raw log while no poll omitted any.
        self.output_bytes = 0
        #: The last response's output, the worker's frames kept (the server's trailing notices removed).
        self.last_framed = ""
        #: What a cell did to the outcome log, once it happened: every cell fails until restart() (fresh()).
        self.tampered: str | None = None
        #: Failure records of the running cell that reached its output because the log could not be written.
        self._lost: list[CellFailure] = []

    def fresh(self) -> None:
        """A fresh worker (``restart()``): it makes a fresh outcome log, to be trusted again."""
        self.tampered = None

    def notice(self, message: str) -> None:
        if message not in self.notices:
            self.notices.append(message)

    def mark(self, language: str | None) -> tuple[Path | None, int] | None:
        """Where the outcome log ends before a cell in ``language`` is submitted."""
        return self.outcomes.mark() if language is not None and self.outcomes is not None else None

    def submitted(self, language: str | None, mark: tuple[Path | None, int] | None) -> None:
        """A cell was accepted: its outcome is what the hooks append after ``mark``.

        (A refused submission, Busy, leaves the running cell's mark alone.)"""
        if language is not None:
            self._language = language
            self._mark = mark
            self._lost = []

    async def observe(self, result: ToolResult, started: float, *, is_error: bool = False) -> CellResult:
        """Read the server's status of this call from its recording, and the cell's outcome."""
        events = await self._call_events(result.text)
        ended = None if events is None else events.ended
        # Without the recording the cell counts as started now (timeouts stay bounded).
        self.last_started_at = time.time() if events is None else events.started_at
        plain, segments, display_ids = split_streams(result.text)
        self._lost.extend(_lost_failures(display_ids))
        outputs = self._outputs_for(tuple(ident for ident in display_ids if not ident.startswith(LOST_MARK)), segments)
        notice = split_response(plain, ended=ended, is_error=is_error or result.is_error)
        framed = split_response(result.text, ended=ended, is_error=is_error or result.is_error).output
        self.output_bytes += len(framed.encode("utf-8", "surrogatepass"))
        self.last_framed = framed
        self.last_notice = notice
        error: CellFailure | None = None
        unknown_done = ended is None and not (notice.running or notice.waiting_for_input)
        finished = bool(ended) or notice.worker_exited or unknown_done
        if finished and events is not None:
            self.events.finished()  # a late end of this cell must not end the next one
        if self.last_started_at is None and not finished and self._mark is not None and self.outcomes is not None:
            # 0.0.5 records no cell start: the startup code notes when it finished (the first cell starts then).
            self.last_started_at = self.outcomes.read_since(self._mark).ready_at
        if finished and self._mark is not None:
            language = self._language or ""
            earlier = self.tampered is not None
            if self.outcomes is not None:
                records = self.outcomes.read_since(self._mark)
                for _topic, message in records.notices:
                    self.notice(message)
                if records.failures:
                    error = records.failures[0]
                if records.tampered is not None and self.tampered is None:
                    self.tampered = records.tampered
                    self.notice(
                        f"the outcome log was tampered with: {records.tampered}; every cell fails until restart()"
                    )
            if error is None and notice.worker_exited and notice.exit_status != 0:
                # sys.exit(0) ends the worker too, but the code asked for it and succeeded.
                error = worker_exited_failure(language, notice.exit_status)
            if self._lost and (error is None or error.kind == "exception"):
                # The worker could not append a failure to the log (its TMPDIR full, an I/O error) and
                # sent the record in the cell's output instead: the cell failed, whatever the log says.
                error = self._lost[0]
                self.notice(
                    "the worker could not write the outcome log (is the TMPDIR full?); the cell's failure came "
                    "through its output instead"
                )
            self._lost = []
            if self.limit_check is not None:  # a limit hit is the cell's failure, even when the code coped
                hit = self.limit_check(error)
                if hit is not None:
                    error = limit_failure(hit[0], language, hit[1])
            if self.tampered is not None and (error is None or error.kind != "limit"):
                error = tampered_failure(language, self.tampered, earlier=earlier)
            self._mark = None
        return cell_from(
            result,
            time.monotonic() - started,
            notice,
            is_error=is_error,
            error=error,
            segments=segments,
            plain=plain,
            outputs=outputs,
        )

    def _outputs_for(self, ids: tuple[str, ...], segments: Segments) -> list[Output]:
        """The bundles of the rich results shown in one response, in order (a bundle that cannot be
        read is its text/plain alone)."""
        if not ids:
            return []
        texts = [part for stream, part in segments if stream == "display"]
        wanted = [ident for ident in ids if _PLAIN.get(ident.rpartition("-")[2]) is None]
        if any(ident not in self._pending_outputs for ident in wanted) and self.outcomes is not None:
            self._outputs_offset, found = self.outcomes.read_outputs(self._outputs_offset)
            self._pending_outputs.update(found)
        outputs = [
            _bundle(ident, texts[index] if index < len(texts) else "", self._pending_outputs)
            for index, ident in enumerate(ids)
        ]
        if len(self._pending_outputs) > 1000:  # shown in a response that was cut: never asked for
            self._pending_outputs.clear()
        return outputs

    def display_reader(self) -> Callable[[str, str], Output]:
        """The bundle of a rich result by its id and text/plain, read apart from the polls' reader
        (the live output reads the frames a poll's window omitted from the raw log): from where the
        polls' reader stands now, so a cell about to run is read whole."""
        state: dict[str, int] = {"offset": self._outputs_offset}
        pending: dict[str, Output] = {}

        def bundle(ident: str, plain: str) -> Output:
            if ident not in pending and _PLAIN.get(ident.rpartition("-")[2]) is None and self.outcomes is not None:
                state["offset"], found = self.outcomes.read_outputs(state["offset"])
                pending.update(found)
            output = _bundle(ident, plain, pending)
            if len(pending) > 1000:
                pending.clear()
            return output

        return bundle

    async def _call_events(self, text: str) -> CallEvents | None:
        """The recording's account of the call that returned ``text`` (None: not recorded in time)."""
        deadline = time.monotonic() + self.events_wait
        while True:
            if self.events.path is None:
                recording = self.locate()
                path = events_file(recording.path) if recording is not None else None
                if path is not None and recording is not None:
                    self.events.attach(path)
                    self.on_recording(recording)
                elif self._events_missing:
                    return None  # already waited once for a recording that never appeared
            if self.events.path is not None:
                found = self.events.next_call(text)
                if found is not None:
                    return found
            if time.monotonic() >= deadline:
                if self.events.path is None:
                    self._events_missing = True
                self.notice(
                    "the server's recording did not show a call within events_wait; cell status was read from "
                    "the response text alone"
                )
                return None
            await anyio.sleep(0.002)
