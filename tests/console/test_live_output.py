"""Issue 31, item 1, live: ``run(on_output=...)`` passes on the whole output while the cell runs, read
from the cell's raw log past mcp-console's per-poll window (about 8 KiB, head and tail, the middle
omitted). Before: a 105 KB print reached on_output as 8,080 bytes (0.0.5) or 8,090 (0.0.6), the
result (read whole at the end) 105,000; now both are 105,000, in order, each byte once."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from console_bridge import AsyncConsole, CellResult
from console_bridge._cells._notices import (
    DISPLAY_END,
    DISPLAY_SEP,
    DISPLAY_START,
    STDERR_END,
    STDERR_START,
    join_segments,
)
from console_bridge._console._live_output import Frames, LiveOutput
from console_bridge._console._whole_output import complete
from console_bridge._results import Output
from tests.support.binaries import binary_for

ROWS = "for i in range(5000): print(f'row {i:05d} ' + 'y' * 10)"


def _joined(pieces: list[CellResult]) -> tuple[str, str]:
    return "".join(piece.text for piece in pieces), "".join(piece.stderr for piece in pieces)


# ------------------------------------------------------------------ real consoles, both versions
@pytest.mark.anyio
@pytest.mark.console
@pytest.mark.parametrize("version", ["0.0.5", "0.0.6"])
async def test_a_105_kb_print_reaches_on_output_whole(version: str, workspace: Path, recordings: Path) -> None:
    async with AsyncConsole(workspace, command=binary_for(version), recordings_dir=recordings) as c:
        pieces: list[CellResult] = []
        out = await c.run(python=ROWS, on_output=pieces.append)
        text, stderr = _joined(pieces)
        assert text == out.text == "".join(f"row {i:05d} {'y' * 10}\n" for i in range(5000)), len(text)
        assert stderr == "" and "[output omitted" not in text
        assert len(text.encode()) == 105_000
        assert not pieces[-1].running and all(piece.running for piece in pieces[:-1])
        print(f"{version}: on_output carried {len(text.encode())} bytes in {len(pieces)} pieces")


FLOOD = """
import sys, time
for k in range(3):
    for i in range(3000):
        print(f"out {k} {i:05d} " + "o" * 20)
        if i % 50 == 0:
            sys.stderr.write(f"err {k} {i:05d}\\n")
    time.sleep(0.6)
"""


@pytest.mark.anyio
@pytest.mark.console
@pytest.mark.parametrize("version", ["0.0.5", "0.0.6"])
async def test_a_mixed_stdout_stderr_flood_streams_in_order(version: str, workspace: Path, recordings: Path) -> None:
    async with AsyncConsole(workspace, command=binary_for(version), recordings_dir=recordings) as c:
        pieces: list[CellResult] = []
        out = await c.run(python=FLOOD, on_output=pieces.append)
        assert out.error is None and not out.truncated
        text, stderr = _joined(pieces)
        assert text == out.text and stderr == out.stderr
        assert text.count("\n") == 9000 and stderr.count("\n") == 180
        # the order of the streams too: the pieces' segments are the result's
        assert join_segments([seg for piece in pieces for seg in piece.segments]) == out.segments
        assert {piece.stream for piece in pieces} == {"stdout", "stderr"}


SLOW = """
import sys, time
for k in range(4):
    print(f"\\x1b[32mstep {k}\\x1b[0m", flush=True)
    time.sleep(0.4)
for i in range(4000):
    print(f"row {i:05d} " + "y" * 10)
sys.stderr.write("tail on stderr\\n")
time.sleep(0.4)
print("last line")
"""


@pytest.mark.anyio
@pytest.mark.console
@pytest.mark.parametrize("version", ["0.0.5", "0.0.6"])
async def test_a_slow_print_over_several_polls_then_a_flood_streams_each_byte_once(
    version: str, workspace: Path, recordings: Path
) -> None:
    # the polls before the flood render escape sequences away, the raw log keeps them: the stream
    # goes on from where they ended, and the result is what was streamed
    async with AsyncConsole(workspace, command=binary_for(version), recordings_dir=recordings) as c:
        pieces: list[CellResult] = []
        out = await c.run(python=SLOW, on_output=pieces.append)
        text, stderr = _joined(pieces)
        assert text == out.text and stderr == out.stderr == "tail on stderr\n"
        lines = text.splitlines()
        assert lines[:4] == [f"step {k}" for k in range(4)], lines[:6]
        assert lines[4:-1] == [f"row {i:05d} {'y' * 10}" for i in range(4000)]
        assert lines[-1] == "last line"
        assert sum(1 for piece in pieces if piece.text) >= 4  # several polls


@pytest.mark.anyio
@pytest.mark.console
async def test_rich_results_in_the_omitted_middle_arrive_with_their_bundles(workspace: Path, recordings: Path) -> None:
    code = (
        "from IPython.display import HTML, display\n"
        "for i in range(400): print('a' * 60)\n"
        "display(HTML('<b>middle</b>'))\n"
        "for i in range(400): print('b' * 60)\n"
    )
    async with AsyncConsole(workspace, command=binary_for("0.0.6"), recordings_dir=recordings) as c:
        pieces: list[CellResult] = []
        out = await c.run(python=code, on_output=pieces.append)
        shown = [output for piece in pieces for output in piece.outputs]
        assert [output.data.get("text/html") for output in shown] == ["<b>middle</b>"], shown
        assert _joined(pieces)[0] == out.text and out.text.count("a" * 60) == 400


@pytest.mark.anyio
@pytest.mark.console
async def test_past_max_output_the_stream_stops_once_saying_so(workspace: Path, recordings: Path) -> None:
    code = "for i in range(40000): print(f'line {i:06d} ' + 'z' * 64)"
    async with AsyncConsole(workspace, command=binary_for("0.0.6"), recordings_dir=recordings, max_output="1MiB") as c:
        pieces: list[CellResult] = []
        out = await c.run(python=code, on_output=pieces.append)
        text, _ = _joined(pieces)
        assert text.count("the rest is not streamed") == 1
        assert 1024 * 1024 - 1024 < len(text.encode()) < 1024 * 1024 + 1024 and text.startswith("line 000000 ")
        assert not pieces[-1].running
        assert out.truncated and "line 039999 " in out.text  # the result keeps the tail


# ------------------------------------------------------------------ planted raw logs
class _Observer(SimpleNamespace):
    """What LiveOutput reads of a session's observer."""

    def display_reader(self) -> Any:
        return lambda ident, text: Output("display", {"text/plain": text, "text/x-id": ident})


def _planted(tmp_path: Path) -> tuple[Path, Path]:
    rec = tmp_path / "rec"
    path = rec / "capture" / "sessions" / "001" / "cell-002.txt"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")
    return rec, path


def _notice(path: Path, dropped: int = 10) -> str:
    return f"\n[output omitted: {dropped} UTF-8 bytes; raw log: {path}]\n"


def test_pieces_carry_markers_and_characters_cut_between_reads(tmp_path: Path) -> None:
    rec, path = _planted(tmp_path)
    observer = _Observer(output_bytes=100, last_framed="")
    live = LiveOutput(observer, None)  # type: ignore[arg-type]
    # a first poll whose output was whole: its own pieces
    path.write_bytes(b"pre\n")
    observer.output_bytes, observer.last_framed = 104, "pre\n"
    first = list(live.pieces(CellResult(text="pre\n", segments=(("stdout", "pre\n"),), running=True), rec))
    assert [piece.text for piece in first] == ["pre\n"]
    # the raw log so far ends inside a stderr marker, and later inside an "é"
    whole = "abc" + STDERR_START + "erré\n" + STDERR_END + "mid" + DISPLAY_START + "id-1" + DISPLAY_SEP + "shown\n"
    whole += DISPLAY_END + "end é\n"
    data = whole.encode()
    cuts = [len(b"pre\n") + len(b"abc") + 1, len(b"pre\n") + data.index("é".encode()) + 1, None]
    framed = "abc" + STDERR_START + "er" + _notice(path) + "end é\n"
    pieces: list[CellResult] = []
    for index, cut in enumerate(cuts):
        path.write_bytes(b"pre\n" + (data if cut is None else data[: cut - 4]))
        observer.output_bytes, observer.last_framed = observer.output_bytes + 50, framed if index == 0 else ""
        chunk = CellResult(
            text="abc" + _notice(path) + "end é\n" if index == 0 else "",
            stderr="er" if index == 0 else "",
            segments=(("stdout", "abc"), ("stderr", "er"), ("stdout", _notice(path) + "end é\n")) if index == 0 else (),
            truncated=index == 0,
            running=cut is not None,
        )
        pieces.extend(live.pieces(chunk, rec))
    assert live.path == path
    segments = join_segments([segment for piece in pieces for segment in piece.segments])
    assert segments == (
        ("stdout", "abc"),
        ("stderr", "erré\n"),
        ("stdout", "mid"),
        ("display", "shown\n"),
        ("stdout", "end é\n"),
    )
    display = next(piece for piece in pieces if piece.segments[0][0] == "display")
    assert display.outputs == [Output("display", {"text/plain": "shown\n", "text/x-id": "id-1"})]
    assert display.stream == "stdout" and not pieces[-1].running
    # the result is what was streamed
    result = CellResult(
        text="pre\nabc" + _notice(path), segments=(("stdout", "pre\nabc" + _notice(path)),), truncated=True
    )
    whole_result = complete(result, rec, None, shown=live.shown)
    assert whole_result.text == "pre\nabcmidshown\nend é\n" and whole_result.stderr == "erré\n"
    assert "".join(piece.text for piece in first + pieces) == whole_result.text


def test_the_earlier_polls_end_is_found_past_what_they_rendered_away(tmp_path: Path) -> None:
    rec, path = _planted(tmp_path)
    # the polls showed "pre\n" and the start of a stderr frame (15 bytes, frames included); the raw
    # log holds colour codes they rendered away, and the frame is still open where the omitting poll
    # starts
    path.write_bytes(("\x1b[31mpre\x1b[0m\n" + STDERR_START + "err one\n" + "err two\n" + STDERR_END + "x\n").encode())
    observer = _Observer(output_bytes=0, last_framed="")
    live = LiveOutput(observer, None)  # type: ignore[arg-type]
    observer.output_bytes = 15
    first = CellResult(text="pre\n", stderr="err one\n", segments=(("stdout", "pre\n"), ("stderr", "err one\n")))
    pieces = list(live.pieces(dataclasses.replace(first, running=True), rec))
    observer.output_bytes, observer.last_framed = 65, "err two\n" + _notice(path) + "x\n"
    chunk = CellResult(
        text=_notice(path) + "x\n",
        stderr="err two\n",
        segments=(("stderr", "err two\n"), ("stdout", _notice(path) + "x\n")),
        truncated=True,
        running=False,
    )
    pieces += list(live.pieces(chunk, rec))
    assert [(piece.stream, piece.text + piece.stderr) for piece in pieces] == [
        ("stdout", "pre\n"),
        ("stderr", "err one\n"),
        ("stderr", "err two\n"),
        ("stdout", "x\n"),
    ]
    assert live.shown == ((("stdout", "pre\n"), ("stderr", "err one\n")), 24)
    whole = complete(dataclasses.replace(chunk, text="pre\n" + chunk.text), rec, None, shown=live.shown)
    assert (whole.text, whole.stderr) == _joined(pieces) == ("pre\nx\n", "err one\nerr two\n")


def test_a_symlinked_raw_log_is_refused_and_the_polls_pieces_pass(tmp_path: Path) -> None:
    rec, path = _planted(tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text("HOST-SECRET\n")
    path.unlink()
    os.symlink(secret, path)
    observer = _Observer(output_bytes=0, last_framed="head" + _notice(path) + "tail\n")
    live = LiveOutput(observer, None)  # type: ignore[arg-type]
    chunk = CellResult(text="head" + _notice(path) + "tail\n", truncated=True, running=False)
    pieces = list(live.pieces(chunk, rec))
    assert live.path is None and live.shown is None
    assert "HOST-SECRET" not in "".join(piece.text for piece in pieces)
    assert [piece.text for piece in pieces] == [chunk.text]


def test_past_the_limit_the_stream_says_so_once(tmp_path: Path) -> None:
    rec, path = _planted(tmp_path)
    observer = _Observer(output_bytes=0, last_framed="")
    live = LiveOutput(observer, 1000)  # type: ignore[arg-type]
    path.write_bytes(b"a" * 600)
    observer.last_framed = "aa" + _notice(path) + "aa"
    chunk = CellResult(text="aa" + _notice(path) + "aa", truncated=True, running=True)
    pieces = list(live.pieces(chunk, rec))
    path.write_bytes(b"a" * 5000)
    pieces += list(live.pieces(CellResult(text="", running=True), rec))
    pieces += list(live.pieces(CellResult(text="", running=False), rec))
    text = "".join(piece.text for piece in pieces)
    assert text.count("the rest is not streamed") == 1
    assert text.startswith("a" * 1000 + "\n[console-bridge: the output passed max_output=1000 bytes")
    assert not pieces[-1].running


def test_frames_read_a_piece_at_a_time() -> None:
    frames = Frames()
    assert frames.feed("a" + STDERR_START + "b") == [("stdout", "a", None), ("stderr", "b", None)]
    assert frames.feed("c" + STDERR_END + DISPLAY_START + "i") == [("stderr", "c", None)]
    assert frames.feed("d" + DISPLAY_SEP + "txt") == []
    assert frames.feed("2" + DISPLAY_END + "z") == [("display", "txt2", "id"), ("stdout", "z", None)]
    assert frames.feed(DISPLAY_START + "x" + DISPLAY_SEP + "open", final=True) == [("display", "open", "x")]


def test_a_notice_the_cell_printed_naming_an_earlier_log_is_not_followed(tmp_path: Path) -> None:
    rec, path = _planted(tmp_path)
    earlier = path.with_name("cell-001.txt")
    earlier.write_text("EARLIER CELL\n")
    path.write_text("mine\n")
    observer = _Observer(output_bytes=0, last_framed="")
    live = LiveOutput(observer, None)  # type: ignore[arg-type]
    printed = "[output omitted: 5 UTF-8 bytes; raw log: " + str(earlier) + "]\n"
    observer.output_bytes, observer.last_framed = len(printed), printed
    chunk = CellResult(text=printed, truncated=True, running=False)
    pieces = list(live.pieces(chunk, rec))
    assert live.path is None and [piece.text for piece in pieces] == [printed]
