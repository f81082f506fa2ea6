"""``console-bridge run`` with a hostile cell that prints past mcp-console's per-poll window, then
escape sequences (window title, clipboard write, hyperlink, cursor moves, DCS, C1 controls): none
reaches the terminal (the live output), output.txt or --json. Before: the live output and the files
read from the raw log carried them as printed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.cli.conftest import Runner, write
from tests.console.test_escape_attack import ATTACK, PAD, VISIBLE
from tests.support.binaries import binary_for

pytestmark = [pytest.mark.console]

_LEAKS = re.compile("[\x1b\x80-\x9f]|\r(?!\n)")
#: what the sequences leave, the BEL (which the polls keep too) as the CLI shows it, escaped
SHOWN = PAD + "\n" + VISIBLE.replace("\x07", "\\x07")


def _clean(text: str) -> None:
    found = _LEAKS.search(text)
    assert found is None, repr(text[max(found.start() - 40, 0) : found.end() + 40])
    for gone in ("PWNED", "C1TITLE", "evil.example", "SGVsbG8", "\\x1b", "\\x9b", "\\x9d", "\\r"):
        assert gone not in text, gone


@pytest.mark.parametrize("version", ["0.0.5", "0.0.6"])
def test_no_escape_sequence_reaches_the_terminal_output_txt_or_json(cb: Runner, tmp_path: Path, version: str) -> None:
    write(tmp_path, "attack.py", ATTACK)
    write(tmp_path, "after.py", "print('still here')\n")
    recs = str(tmp_path / "recs")
    command = str(binary_for(version))
    proc = cb("run", "--command", command, "--recordings-dir", recs, "--artifacts", "out", "attack.py", "after.py")
    assert proc.returncode == 0, proc.stderr
    _clean(proc.stderr)
    output = (tmp_path / "out" / "output.txt").read_text(encoding="utf-8")
    for text in (proc.stdout, output):
        _clean(text)
        assert SHOWN in text and "err:E||\n" in text and "visible end\n" in text
        assert "still here" in text  # the session still works after
    # --raw: the cell's output as it is, nothing escaped by the CLI: still no sequence
    raw = cb("run", "--command", command, "--recordings-dir", recs, "--raw", "attack.py")
    assert raw.returncode == 0, raw.stderr
    _clean(raw.stdout)
    assert PAD + "\n" + VISIBLE in raw.stdout and "err:E||\n" in raw.stdout
    as_json = cb("run", "--command", command, "--recordings-dir", recs, "--json", "attack.py")
    assert as_json.returncode == 0, as_json.stderr
    entry = json.loads(as_json.stdout)["files"][0]
    _clean(entry["output"])
    assert PAD + "\n" + VISIBLE in entry["output"] and "visible end\n" in entry["output"]
