"""A hostile cell prints past mcp-console's per-poll window (about 8 KiB) so the poll is cut and the
bridge reads the rest from the raw log, then escape sequences: OSC 0 (window title), OSC 52 (clipboard
write), OSC 8 (hyperlink), CSI cursor moves, DCS, C1 controls. The polls strip them; the raw log keeps
them. Before: they reached ``on_output`` and ``CellResult.text``/``stderr`` as printed. Now the raw
log's text is rendered as the polls render it, whichever path the output came by."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from console_bridge import AsyncConsole, CellResult
from tests.console.test_escapes_logic import MEASURED
from tests.support.binaries import binary_for

PAD = "P" * 20000
#: what the attack writes after the padding, one ``sys.stdout.write`` (the same text as Python source)
SEQUENCES = (
    r"red:\x1b[31mRED\x1b[0m|title:\x1b]0;PWNED\x07|clip:\x1b]52;c;SGVsbG8=\x07"
    r"|link:\x1b]8;;http://evil.example\x1b\\LINK\x1b]8;;\x1b\\|up:\x1b[2A\x1b[2K\x1b[1;1H"
    r"|dcs:\x1bPqDCSDATA\x1b\\|c1csi:\x9b31m|c1osc:\x9d0;C1TITLE\x07|c1st:\x9d52;c;QQ==\x9c"
    r"|lone:\x1b\ttab|bell\x07|\n"
    r"over\rwritten\n"
)
VISIBLE = "red:RED|title:|clip:|link:LINK|up:|dcs:|c1csi:|c1osc:|c1st:|lone:\ttab|bell\x07|\nwritten\n"
ATTACK = f"""import sys
print({PAD!r})
sys.stdout.write("{SEQUENCES}")
sys.stdout.flush()
sys.stderr.write("err:\\x1b[31mE\\x1b]0;T\\x07|\\x9b2J|\\n")
print("visible end")
"""
_LEAKS = re.compile("[\x1b\x80-\x9f]|\r(?!\n)")


def _no_leaks(text: str) -> None:
    found = _LEAKS.search(text)
    assert found is None, repr(text[max(found.start() - 40, 0) : found.end() + 40])
    assert "PWNED" not in text and "C1TITLE" not in text and "evil.example" not in text and "SGVsbG8" not in text


@pytest.mark.anyio
@pytest.mark.console
@pytest.mark.parametrize("version", ["0.0.5", "0.0.6"])
async def test_escape_sequences_past_a_cut_poll_reach_neither_on_output_nor_the_result(
    version: str, workspace: Path, recordings: Path
) -> None:
    async with AsyncConsole(workspace, command=binary_for(version), recordings_dir=recordings) as c:
        pieces: list[CellResult] = []
        out = await c.run(python=ATTACK, on_output=pieces.append)
        streamed = "".join(piece.text for piece in pieces)
        streamed_err = "".join(piece.stderr for piece in pieces)
        for text in (streamed, streamed_err, out.text, out.stderr, out.combined):
            _no_leaks(text)
        for part in out.content:
            if part.get("type") == "text":
                _no_leaks(part["text"])
        whole = PAD + "\n" + VISIBLE + "visible end\n"
        assert out.text == whole, out.text[20000:]
        assert streamed == whole, streamed[20000:]
        assert out.stderr == streamed_err == "err:E||\n"
        # the session still works
        after = await c.run(python="print('still here')")
        assert after.text == "still here\n"


@pytest.mark.anyio
@pytest.mark.console
@pytest.mark.parametrize("version", ["0.0.5", "0.0.6"])
async def test_the_raw_log_path_renders_as_an_uncut_poll_does(version: str, workspace: Path, recordings: Path) -> None:
    """The same output through a poll (short) and through the raw log (past a cut): the same text."""
    kept = [
        (printed, polled)
        for printed, polled in MEASURED
        if (printed.endswith("\n") and polled.endswith("\n")) or (not printed.endswith("\n") and "\r" not in printed)
    ]
    body = "".join(printed if printed.endswith("\n") else printed + "\n" for printed, _ in kept)
    expected = "".join(polled if polled.endswith("\n") else polled + "\n" for _, polled in kept)
    code = f"import sys\nsys.stdout.write({body!r})\nsys.stdout.flush()\nNone"
    async with AsyncConsole(workspace, command=binary_for(version), recordings_dir=recordings) as c:
        polled = await c.run(python=code)
        assert not polled.truncated
        pieces: list[CellResult] = []
        cut = await c.run(python=f"print({PAD!r})\n" + code, on_output=pieces.append)
        head = PAD + "\n"
        assert cut.text.startswith(head) and cut.text[len(head) :] == polled.text
        streamed = "".join(piece.text for piece in pieces)
        assert streamed[len(head) :] == polled.text
        assert polled.text == expected
