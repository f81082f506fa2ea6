"""The files part on its own (no server): a TMPDIR laid out as mcp-console lays it out."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from console_bridge import NotAllowed
from console_bridge._console._session_files import SessionFiles

pytestmark = pytest.mark.anyio

PRIVATE = ".console-bridge-0123456789abcdef"  # the outcome hooks' folder: it marks a booted worker


def _worker(root: Path, name: str) -> Path:
    data = root / name / "data"
    (data / PRIVATE).mkdir(parents=True)
    return data


def _files(root: Path, notices: list[str]) -> SessionFiles:
    return SessionFiles(
        lambda: os.open(root, os.O_RDONLY | os.O_DIRECTORY),
        lambda: Path("/tmp/cells"),
        private=PRIVATE,
        notices=notices,
    )


async def test_put_get_and_find_in_the_running_workers_folder(tmp_path: Path) -> None:
    data = _worker(tmp_path, "sandbox-a")
    (data / PRIVATE / "outcomes.jsonl").write_text("{}")
    files = _files(tmp_path, [])
    assert await files.put("in.csv", b"a,b\n") == "/tmp/cells/sandbox-a/data/in.csv"
    assert (data / "in.csv").read_bytes() == b"a,b\n"
    assert await files.get("in.csv", 100) == b"a,b\n"
    (data / "out").mkdir()
    (data / "out" / "plot.png").write_bytes(b"png")
    assert await files.find("**") == ["in.csv", "out/plot.png"]  # the bridge's own folder is never listed
    assert await files.find("*.csv") == ["in.csv"]


async def test_what_fails_is_not_allowed(tmp_path: Path) -> None:
    _worker(tmp_path, "sandbox-a")
    files = _files(tmp_path, [])
    await files.put("in.csv", b"x")
    with pytest.raises(NotAllowed, match="pick a new name"):
        await files.put("in.csv", b"y")  # nothing existing is replaced
    with pytest.raises(NotAllowed, match="must be bytes"):
        await files.put("text.txt", "text")  # type: ignore[arg-type]
    with pytest.raises(NotAllowed, match="check the name"):
        await files.get("missing.csv", 100)
    with pytest.raises(NotAllowed, match="over the limit"):
        await files.get("in.csv", 0)
    with pytest.raises(NotAllowed):
        await files.find("../*")


async def test_files_are_carried_to_the_fresh_worker(tmp_path: Path) -> None:
    _worker(tmp_path, "sandbox-a")
    notices: list[str] = []
    files = _files(tmp_path, notices)
    await files.put("kept.txt", b"kept")
    async with files.kept():  # the restart: the old worker's folder goes, a fresh one comes
        shutil.rmtree(tmp_path / "sandbox-a")
        fresh = _worker(tmp_path, "sandbox-b")
    assert (fresh / "kept.txt").read_bytes() == b"kept" and notices == []


async def test_no_running_session_is_said(tmp_path: Path) -> None:
    files = SessionFiles(lambda: None, lambda: tmp_path, private=PRIVATE, notices=[])
    with pytest.raises(NotAllowed, match="not available"):
        await files.put("a", b"x")
