"""Issue 31, item 1, on the command line: the live output, output.txt, --json and report.json carry a
cell's whole output (before: 379 of 5,000 lines, each poll's first and last 4 KiB); past --max-output
the live output stops saying so, and the files keep the head and tail, with the truncation said in
report.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.conftest import Runner, write

pytestmark = [pytest.mark.console]

ROWS = 'for i in range(5000):\n    print(f"row {i:05d} " + "y" * 10)\n'


def test_output_txt_and_json_hold_the_whole_output(cb: Runner, tmp_path: Path) -> None:
    write(tmp_path, "big.py", ROWS)
    proc = cb("run", "--recordings-dir", str(tmp_path / "recs"), "--artifacts", "out", "big.py")
    assert proc.returncode == 0, proc.stderr
    rows = [f"row {i:05d} " + "y" * 10 for i in range(5000)]
    assert (tmp_path / "out" / "output.txt").read_text().splitlines() == rows
    assert proc.stdout.splitlines() == rows  # shown whole while it ran (before: 8,083 bytes)
    assert "hold the whole" not in proc.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["files"][0]["truncated"] is False and report["files"][0]["omitted_bytes"] == 0
    as_json = cb("run", "--recordings-dir", str(tmp_path / "recs"), "--json", "big.py")
    assert json.loads(as_json.stdout)["files"][0]["output"].splitlines() == rows


def test_past_max_output_the_report_says_what_was_dropped(cb: Runner, tmp_path: Path) -> None:
    write(tmp_path, "huge.py", "for i in range(40000):\n    print(f'line {i:06d} ' + 'z' * 64)\n")
    proc = cb(
        "run", "--recordings-dir", str(tmp_path / "recs"), "--artifacts", "out", "--max-output", "1MiB", "huge.py"
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    entry = report["files"][0]
    assert entry["truncated"] is True and 0 < entry["omitted_bytes"] < 40000 * 77, entry
    text = (tmp_path / "out" / "output.txt").read_text()
    assert text.startswith("line 000000 ") and text.rstrip().endswith("z" * 64) and "line 039999 " in text
    assert f"{entry['omitted_bytes']} bytes of output omitted here" in text
    assert proc.stdout.count("the rest is not streamed") == 1 and "line 039999 " not in proc.stdout
    assert "huge.py: the live output stopped at --max-output; output.txt and --json hold the whole" in proc.stderr
    bad = cb("run", "--max-output", "lots", "huge.py")
    assert bad.returncode == 2 and "--max-output" in bad.stderr
