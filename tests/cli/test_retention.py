"""``run`` applies a default recordings retention per workspace (``--keep-recordings``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.conftest import Runner, write

pytestmark = [pytest.mark.console]


def _runs(recordings: Path) -> list[str]:
    sessions = recordings / "sessions"
    return sorted(p.name for p in sessions.iterdir() if p.is_dir()) if sessions.is_dir() else []


def test_keep_recordings_prunes_this_workspace_only_and_all_turns_it_off(cb: Runner, tmp_path: Path) -> None:
    ws, other = tmp_path / "ws", tmp_path / "other"
    ws.mkdir()
    other.mkdir()
    rec = tmp_path / "rec"
    write(ws, "job.py", "print('ok')\n")
    write(other, "job.py", "print('ok')\n")
    assert cb("run", "--recordings-dir", str(rec), "job.py", cwd=other).returncode == 0
    for _ in range(2):
        done = cb("run", "--recordings-dir", str(rec), "--keep-recordings", "all", "job.py", cwd=ws)
        assert done.returncode == 0, done.stderr
    assert len(_runs(rec)) == 3  # retention off: nothing removed
    done = cb("run", "--recordings-dir", str(rec), "--keep-recordings", "1", "job.py", cwd=ws)
    assert done.returncode == 0, done.stderr
    assert "removed 2 older recording(s)" in done.stderr
    assert len(_runs(rec)) == 2  # this workspace's newest, and the other workspace's one
    bad = cb("run", "--keep-recordings", "zero", "job.py", cwd=ws)
    assert bad.returncode == 2 and "keep-recordings" in bad.stderr
