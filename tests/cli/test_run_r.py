"""`console-bridge run analysis.R` with a real R (installed by .ci/run from Debian's packages)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.cli.conftest import Runner

pytestmark = pytest.mark.skipif(
    shutil.which("R") is None,
    reason="R is not installed: .ci/run installs r-base-core from Debian's packages",
)


def test_run_r_file_and_an_r_error(cb: Runner, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "analysis.R").write_text("x <- c(1, 5, 9)\ncat('mean:', mean(x), '\\n')\nplot(x)\n")
    (ws / "broken.R").write_text("stop('bad input')\n")
    rec = str(tmp_path / "rec")
    ok = cb("run", "analysis.R", "--recordings-dir", rec, "--artifacts", str(tmp_path / "art"), cwd=ws)
    assert ok.returncode == 0, ok.stderr
    assert "mean: 5" in ok.stdout
    assert (tmp_path / "art" / "image-001.png").read_bytes().startswith(b"\x89PNG")
    report = json.loads((tmp_path / "art" / "report.json").read_text())
    assert report["exit_status"] == 0
    bad = cb("run", "broken.R", "--recordings-dir", rec, cwd=ws)
    assert bad.returncode == 1 and "bad input" in bad.stdout + bad.stderr
    assert "Traceback" not in bad.stderr
