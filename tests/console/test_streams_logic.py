"""stderr apart from stdout (pure): the frames the worker's sys.stderr adds, read and removed."""

from __future__ import annotations

from console_bridge import CellResult, Output
from console_bridge._cells._notices import (
    DISPLAY_END,
    DISPLAY_SEP,
    DISPLAY_START,
    STDERR_END,
    STDERR_START,
    split_response,
    split_streams,
)
from console_bridge._cells._observe import cell_from, for_model, merge, split_chunk
from console_bridge._results import ToolResult

E0, E1 = STDERR_START, STDERR_END
D0, D1, D2 = DISPLAY_START, DISPLAY_SEP, DISPLAY_END


def _cell(raw: str, *, ended: bool | None = True) -> CellResult:
    plain, segments, _ids = split_streams(raw)
    notice = split_response(plain, ended=ended)
    return cell_from(
        ToolResult(text=raw, content=[{"type": "text", "text": raw}]), 0.1, notice, segments=segments, plain=plain
    )


def test_frames_split_the_streams_in_order() -> None:
    plain, segments, _ = split_streams(f"a\n{E0}warn\n{E1}{E0}more\n{E1}b\n")
    assert plain == "a\nwarn\nmore\nb\n"
    assert segments == (("stdout", "a\n"), ("stderr", "warn\nmore\n"), ("stdout", "b\n"))


def test_a_frame_cut_by_the_output_cap_ends_with_the_response_and_stray_ends_are_dropped() -> None:
    assert split_streams(f"a{E0}Traceback\n[output omitted: 9 bytes]")[1] == (
        ("stdout", "a"),
        ("stderr", "Traceback\n[output omitted: 9 bytes]"),
    )
    assert split_streams(f"x{E1}y")[1] == (("stdout", "xy"),)
    assert split_streams("") == ("", (), ())


def test_a_result_keeps_stdout_in_text_and_stderr_apart_and_notices_out_of_both() -> None:
    cell = _cell(f"out\n{E0}err\n{E1}\n[elapsed: 1s]\n[running; poll with an empty send]", ended=False)
    assert cell.running and cell.text == "out\n" and cell.stderr == "err\n"
    assert cell.combined == "out\nerr\n" and cell.content[0]["text"] == "out\nerr\n"


def test_chunks_carry_one_stream_each_and_merge_restores_the_order() -> None:
    cell = _cell(f"1\n{E0}2\n{E1}3\n")
    pieces = split_chunk(cell)
    assert [(p.stream, p.text, p.stderr) for p in pieces] == [
        ("stdout", "1\n", ""),
        ("stderr", "", "2\n"),
        ("stdout", "3\n", ""),
    ]
    assert [p.running for p in pieces] == [True, True, False]
    whole = merge(pieces, 0.2)
    assert whole.text == "1\n3\n" and whole.stderr == "2\n" and whole.combined == "1\n2\n3\n"


def test_the_model_reads_both_streams_interleaved() -> None:
    cell = _cell(f"1\n{E0}Traceback ...\n{E1}")
    assert for_model(cell).text == "1\nTraceback ...\n"


def test_omitted_output_is_truncated() -> None:
    assert _cell("head\n[output omitted: 120 UTF-8 bytes; raw log: /x]\ntail\n").truncated
    assert not _cell("all of it\n").truncated


def test_rich_results_are_framed_text_plain_with_their_ids() -> None:
    raw = f"a\n{D0}w-1{D1}   x\n0  1\n{D2}{D0}w-2{D1}2\n{D2}b\n"
    plain, segments, ids = split_streams(raw)
    assert ids == ("w-1", "w-2") and plain == "a\n   x\n0  1\n2\nb\n"
    assert segments == (("stdout", "a\n"), ("display", "   x\n0  1\n"), ("display", "2\n"), ("stdout", "b\n"))
    cell = cell_from(
        ToolResult(text=raw),
        0.1,
        split_response(plain, ended=True),
        segments=segments,
        plain=plain,
        outputs=[
            Output("display", {"text/plain": "   x", "text/html": "<table/>"}),
            Output("result", {"text/plain": "2"}),
        ],
    )
    assert cell.text == plain and [o.kind for o in cell.outputs] == ["display", "result"]
    pieces = split_chunk(cell)
    assert [(p.stream, p.segments[0][0], [o.kind for o in p.outputs]) for p in pieces] == [
        ("stdout", "stdout", []),
        ("stdout", "display", ["display"]),
        ("stdout", "display", ["result"]),
        ("stdout", "stdout", []),
    ]
    # the contract's two streams, whatever a chunk shows (a lone rich result too)
    [alone] = split_chunk(
        cell_from(
            ToolResult(text=raw),
            0.1,
            split_response("2\n", ended=True),
            segments=(("display", "2\n"),),
            plain="2\n",
            outputs=[Output("result", {"text/plain": "2"})],
        )
    )
    assert alone.stream == "stdout" and alone.segments == (("display", "2\n"),)
    assert "<table/>" in cell._repr_mimebundle_()["text/html"]
