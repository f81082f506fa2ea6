"""Issue 31, item 1: a cell's whole output, read from the recording past mcp-console's per-poll window
(about 8 KiB, head and tail, the middle omitted). Before: a 105 KB print came back as 379 of 5,000
lines, a 10 MB print as 8.1 KB. Now ``run()`` keeps it whole up to ``max_output`` and past it the head
and tail, ``truncated`` and ``omitted_bytes`` saying how much was dropped."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from console_bridge import AsyncConsole, LaunchRefused
from console_bridge._cells._notices import STDERR_END, STDERR_START
from console_bridge._console._whole_output import _read, complete
from console_bridge._results import CellResult
from tests.support.binaries import binary_for

MiB = 1 << 20
ROWS = 'for i in range(5000):\n    print(f"row {i:05d} " + "y" * 10)'


@pytest.mark.anyio
@pytest.mark.console
@pytest.mark.parametrize("version", ["0.0.5", "0.0.6"])
async def test_a_105_kb_print_comes_back_whole_with_its_stderr_in_place(
    version: str, workspace: Path, recordings: Path
) -> None:
    code = ROWS + '\n    if i % 1000 == 0:\n        import sys; sys.stderr.write(f"err {i}\\n")'
    async with AsyncConsole(workspace, command=binary_for(version), recordings_dir=recordings) as c:
        seen: list[CellResult] = []
        out = await c.run(python=code, on_output=seen.append)
        assert out.error is None and not out.truncated and out.omitted_bytes == 0
        lines = out.text.splitlines()
        assert lines == [f"row {i:05d} " + "y" * 10 for i in range(5000)], (len(lines), lines[370:380])
        assert out.stderr == "".join(f"err {i}\n" for i in range(0, 5000, 1000))
        # the streams keep their order: each stderr line right after its row
        order = [part for _, part in out.segments]
        assert order[1] == "err 0\n" and order[0].endswith("row 00000 yyyyyyyyyy\n"), order[:3]
        assert "[output omitted" not in out.combined
        # a 1 + 1 after it is as before, and so is a cell whose output fits a poll
        small = await c.run(python="print('x' * 100); 1 + 1")
        assert small.text == "x" * 100 + "\n2\n" and not small.truncated


@pytest.mark.anyio
@pytest.mark.console
async def test_past_max_output_the_head_and_tail_are_kept_and_the_drop_is_said(
    workspace: Path, recordings: Path
) -> None:
    code = "import sys\nfor i in range(40000):\n    print(f'line {i:06d} ' + 'z' * 64)\nsys.stderr.write('the end\\n')"
    async with AsyncConsole(workspace, command=binary_for("0.0.6"), recordings_dir=recordings, max_output="1MiB") as c:
        out = await c.run(python=code)
        total = 40000 * 77 + len(STDERR_START.encode()) * 2 + len("the end\n")
        assert out.truncated and 0 < out.omitted_bytes < total - MiB + 64, (out.omitted_bytes, total)
        assert out.text.startswith("line 000000 ") and "line 039999 " in out.text
        assert f"{out.omitted_bytes} bytes of output omitted here (past max_output={MiB} bytes" in out.text
        assert str(recordings) in out.text  # where the whole output is
        assert out.stderr == "the end\n"
        assert MiB - 4096 < len(out.text.encode()) < MiB + 4096
        after = await c.run(python="print(1 + 1)")
        assert after.text == "2\n"


@pytest.mark.anyio
@pytest.mark.console
async def test_a_notice_a_cell_prints_reads_nothing_outside_its_recording(workspace: Path, recordings: Path) -> None:
    secret = workspace.parent / "host-secret.txt"
    secret.write_text("HOST-SECRET\n")
    fake = f"[output omitted: 5 UTF-8 bytes; raw log: {secret}]"
    async with AsyncConsole(workspace, command=binary_for("0.0.6"), recordings_dir=recordings) as c:
        out = await c.run(python=f"print({fake!r})\nprint('Q' * 20000)")
        assert "HOST-SECRET" not in out.combined
        assert out.text.startswith(fake)  # printed, never obeyed
        assert out.text.count("Q") == 20000  # its real output, whole


def test_max_output_takes_sizes_and_none(workspace: Path) -> None:
    assert AsyncConsole(workspace, max_output="2MiB").max_output == 2 * MiB
    assert AsyncConsole(workspace, max_output=None).max_output is None
    assert AsyncConsole(workspace).max_output == 10 * MiB
    with pytest.raises(LaunchRefused, match="max_output"):
        AsyncConsole(workspace, max_output="lots")


# ------------------------------------------------------------------ the raw log alone
def _log(tmp_path: Path, data: str) -> Path:
    rec = tmp_path / "rec"
    path = rec / "capture" / "sessions" / "001" / "cell-002.txt"
    path.parent.mkdir(parents=True)
    path.write_bytes(data.encode())
    return path


def test_a_cut_never_splits_a_character_and_carries_the_stream(tmp_path: Path) -> None:
    # a stderr frame that opens in the head and closes in the tail: the tail is still stderr
    body = "é" * 600_000  # two bytes each: the cut lands inside characters
    path = _log(tmp_path, "out\n" + STDERR_START + body + "\n" + STDERR_END + "after\n")
    read = _read(path, MiB)
    assert read is not None
    segments, dropped = read
    streams = [stream for stream, _ in segments]
    assert streams == ["stdout", "stderr", "stdout", "stderr", "stdout"], streams
    assert segments[0][1] == "out\n" and segments[-1][1] == "after\n"
    assert "\ufffd" not in "".join(part for _, part in segments)  # no character split
    assert dropped == path.stat().st_size - sum(
        len(part.encode()) for stream, part in segments if "omitted here" not in part
    ) - len((STDERR_START + STDERR_END).encode())


def test_complete_leaves_a_result_alone_without_a_notice_of_its_recording(tmp_path: Path) -> None:
    path = _log(tmp_path, "whole\n")
    rec = tmp_path / "rec"
    plain = CellResult(text="short\n", truncated=False)
    assert complete(plain, rec, MiB) is plain
    elsewhere = CellResult(text=f"h\n[output omitted: 9 UTF-8 bytes; raw log: {tmp_path}/x.txt]\nt\n", truncated=True)
    assert complete(elsewhere, rec, MiB) is elsewhere
    os.symlink(path, rec / "capture" / "sessions" / "001" / "cell-003.txt")
    linked = CellResult(
        text=f"[output omitted: 1 UTF-8 bytes; raw log: {rec}/capture/sessions/001/cell-003.txt]", truncated=True
    )
    assert complete(linked, rec, MiB) is linked  # never through a symlink
    named = CellResult(text=f"h\n[output omitted: 1 UTF-8 bytes; raw log: {path}]\nt\n", truncated=True)
    whole = complete(named, rec, MiB)
    assert whole.text == "whole\n" and not whole.truncated
