"""Issue 31, item 2: a stopped ``console-bridge run`` keeps its evidence. SIGTERM (what CI sends on a job
timeout), SIGHUP and Ctrl-C interrupt the running cell, let its ``finally`` run, collect the ``--collect``
files, finalize the recording and write ``output.txt`` and ``report.json`` saying how the run ended, then
exit 128 + the signal's number; a second signal cuts the grace short and still loses nothing. Before:
SIGTERM wrote neither file, one Ctrl-C lost the collected files and the ``finally``, two Ctrl-Cs 0.3 s
apart left the recording unfinished (3 of 3)."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import PROC_TIMEOUT, start

pytestmark = [pytest.mark.console]

LONG = """
import os, time
d = os.environ["TMPDIR"]
open(d + "/early.csv", "w").write("a\\n1\\n")
print("working", flush=True)
try:
    for i in range(600):
        time.sleep(0.1)
finally:
    open(d + "/final.csv", "w").write("b\\n2\\n")
    print("finally ran", flush=True)
"""
NEVER = "print('the second file ran')\n"


def _stop(
    tmp_path: Path, signals: list[signal.Signals], gap: float = 0.0, code: str = LONG
) -> tuple[int, str, str, Path]:
    (tmp_path / "long.py").write_text(code)
    (tmp_path / "next.py").write_text(NEVER)
    proc = start(
        ["run", "--recordings-dir", str(tmp_path / "recs"), "--artifacts", "out", "--collect", "*.csv",
         "long.py", "next.py"],
        tmp_path,
        tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()  # the cell is running once it printed
    assert line == "working\n", (line, proc.stderr.read() if proc.stderr else "")
    time.sleep(0.3)
    for n, signum in enumerate(signals):
        if n:
            time.sleep(gap)
        proc.send_signal(signum)
    sent = time.monotonic()
    out, err = proc.communicate(timeout=PROC_TIMEOUT)
    took = time.monotonic() - sent
    assert took < 15, f"a stopped run took {took:.1f}s to exit"  # within the 10 s + margin CI runners leave
    return proc.returncode, line + out, err, tmp_path / "out"


def _report(out: Path) -> dict[str, Any]:
    report: dict[str, Any] = json.loads((out / "report.json").read_text())
    return report


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129), (signal.SIGINT, 130)])
def test_a_stop_signal_keeps_the_evidence(tmp_path: Path, signum: signal.Signals, code: int) -> None:
    rc, stdout, stderr, out = _stop(tmp_path, [signum])
    assert rc == code, (rc, stderr)
    report = _report(out)
    assert report["exit_status"] == code and report["ended_by"] == signum.name, report
    assert f"stopped by {signum.name} while long.py ran; 1 file not run" in report["error"], report["error"]
    statuses = [f["status"] for f in report["files"]]
    assert statuses == ["stopped", "not run"], statuses
    # the cell's finally ran: its output is kept and the file it wrote was collected
    assert "finally ran" in stdout and "finally ran" in (out / "output.txt").read_text()
    assert "the second file ran" not in stdout
    collected = sorted(p.name for p in (out / "files").iterdir())
    assert collected == ["early.csv", "final.csv"], collected
    assert report["recording"]["finalized"] is True, report["recording"]
    assert f"stopped by {signum.name}" in stderr


SLOW_FINALLY = LONG.replace('open(d + "/final.csv"', 'time.sleep(60)\n    open(d + "/final.csv"')


def test_a_second_signal_cuts_the_grace_short_and_loses_nothing(tmp_path: Path) -> None:
    """A cell whose finally takes a minute: the first Ctrl-C gives it its grace, the second ends that."""
    rc, stdout, stderr, out = _stop(tmp_path, [signal.SIGINT, signal.SIGINT], gap=1.0, code=SLOW_FINALLY)
    assert rc == 130, (rc, stderr)
    report = _report(out)
    assert report["ended_by"] == "SIGINT" and report["files"][0]["status"] == "stopped", report
    assert "a second signal cut its grace short" in report["files"][0]["error"], report["files"][0]
    assert "finally ran" not in stdout
    assert report["recording"]["finalized"] is True, report["recording"]
    assert (out / "output.txt").is_file()
    assert "early.csv" in {p.name for p in (out / "files").iterdir()}


def test_a_run_that_ends_normally_says_so(tmp_path: Path) -> None:
    (tmp_path / "ok.py").write_text("print(1 + 1)\n")
    proc = start(
        ["run", "--recordings-dir", str(tmp_path / "recs"), "--artifacts", "out", "ok.py"],
        tmp_path,
        tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    proc.communicate(timeout=PROC_TIMEOUT)
    assert proc.returncode == 0
    assert _report(tmp_path / "out")["ended_by"] == "completed"
