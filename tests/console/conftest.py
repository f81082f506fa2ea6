"""Fixtures for console tests: the real mcp-console binaries of both qualified versions."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.conftest import ROOT

VENV = ROOT / ".venv"


def binary_for(version: str) -> Path:
    """The installed mcp-console of ``version`` (scripts/setup-dev.sh installs both)."""
    if version == "0.0.6":
        path = Path(os.environ.get("CONSOLE_BRIDGE_TEST_MCP_CONSOLE_0_0_6", VENV / "bin" / "mcp-console"))
    else:
        default = ROOT / ".venv-mcp-console-0.0.5" / "bin" / "mcp-console"
        path = Path(os.environ.get("CONSOLE_BRIDGE_TEST_MCP_CONSOLE_0_0_5", default))
    if not path.exists():
        pytest.fail(f"mcp-console {version} is not installed at {path}; run `bash scripts/setup-dev.sh`")
    return path


@pytest.fixture(params=["0.0.5", "0.0.6"])
def mcp_console(request: pytest.FixtureRequest) -> tuple[str, Path]:
    """(version, binary path) for each qualified version."""
    return request.param, binary_for(request.param)


def alive(pids: set[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.Error:
            continue
    return out


def tree_of(pid: int) -> set[int]:
    try:
        return {pid, *(child.pid for child in psutil.Process(pid).children(recursive=True))}
    except psutil.Error:
        return {pid}


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
