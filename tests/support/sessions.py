"""Fixtures of a console session's test: the binary of each qualified version, a workspace, a
recordings folder, the test's own state folder, and the check that nothing of a session outlives
it. A folder's ``conftest`` imports the ones it uses (pytest finds fixtures there)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.binaries import binary_for

__all__ = ["mcp_console", "no_leaks", "recordings", "state_dir", "workspace"]


@pytest.fixture(params=["0.0.5", "0.0.6"])
def mcp_console(request: pytest.FixtureRequest) -> tuple[str, Path]:
    """(version, binary path) for each qualified version."""
    return request.param, binary_for(request.param)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


@pytest.fixture
def recordings(tmp_path: Path) -> Path:
    path = tmp_path / "recordings"
    path.mkdir()
    return path


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The test's own console-bridge state folder (every session's private folder lives in it)."""
    path = tmp_path / "state"
    monkeypatch.setenv("CONSOLE_BRIDGE_STATE_DIR", str(path))
    return path


@pytest.fixture
def no_leaks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, state_dir: Path) -> Iterator[None]:
    """Give the test its own temp and state roots; fail when a session's private folder,
    a private TMPDIR or a session cgroup survives."""
    root = tmp_path / "tmproot"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    yield
    left = sorted(name for name in os.listdir(root) if name.startswith("console-bridge-"))
    assert left == [], f"a private TMPDIR survived its session: {left}"
    sessions = state_dir / "sessions"
    folders = sorted(os.listdir(sessions)) if sessions.is_dir() else []
    assert folders == [], f"a session's private folder survived: {folders}"
