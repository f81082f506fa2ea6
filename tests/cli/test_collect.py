"""``console-bridge run --collect GLOB`` and ``--env KEY=VALUE`` against the real mcp-console."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.conftest import Runner

pytestmark = [pytest.mark.console]

JOB = """
import os
print(os.environ.get("MY_VAR"), os.environ.get("OTHER"))
d = os.environ["TMPDIR"]
os.makedirs(d + "/out/deep", exist_ok=True)
open(d + "/a.csv", "w").write("x,y\\n1,2\\n")
open(d + "/out/b.csv", "w").write("z\\n")
open(d + "/out/deep/c.csv", "w").write("deep\\n")
open(d + "/notes.txt", "w").write("not asked for\\n")
open(d + "/.hidden.csv", "w").write("hidden\\n")
os.symlink("/etc/hostname", d + "/link.csv")
"""


def test_collect_copies_matching_tmpdir_files_and_env_reaches_the_code(cb: Runner, tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text(JOB)
    proc = cb(
        "run", "--recordings-dir", str(tmp_path / "recs"), "--artifacts", "art",
        "--env", "MY_VAR=hello world", "--env", "OTHER=a=b",
        "--collect", "*.csv", "--collect", "out/**/*.csv", "job.py",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "hello world a=b\n"
    files = tmp_path / "art" / "files"
    found = sorted(str(p.relative_to(files)) for p in files.rglob("*") if p.is_file())
    # the symlink is neither followed nor copied; hidden files only when a pattern names them
    assert found == ["a.csv", "out/b.csv", "out/deep/c.csv"], found
    assert (files / "a.csv").read_text() == "x,y\n1,2\n" and not any(p.is_symlink() for p in files.rglob("*"))
    report = json.loads((tmp_path / "art" / "report.json").read_text())
    assert report["artifacts"]["files"] == ["files/a.csv", "files/out/b.csv", "files/out/deep/c.csv"]


def test_collect_with_no_match_says_so(cb: Runner, tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text("print(1)\n")
    recs = str(tmp_path / "recs")
    proc = cb("run", "--recordings-dir", recs, "--artifacts", "art", "--collect", "*.parquet", "job.py")
    assert proc.returncode == 0, proc.stderr
    assert "no file in the TMPDIR matched" in proc.stderr and not (tmp_path / "art" / "files").exists()
