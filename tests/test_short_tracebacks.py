"""Public blocking calls raise with a short traceback: no portal, anyio or concurrent.futures frames."""

from __future__ import annotations

import traceback
from pathlib import Path

import pytest

from console_bridge import Console, LaunchRefused, McpConnection, Owner


def _frames(exc: BaseException) -> list[str]:
    return [frame.filename for frame in traceback.extract_tb(exc.__traceback__)]


def test_a_refused_console_raises_without_loop_frames(tmp_path: Path) -> None:
    with pytest.raises(LaunchRefused) as caught:
        Console(tmp_path / "my-analysis")
    frames = _frames(caught.value)
    assert len(frames) <= 4, frames
    assert not [f for f in frames if "anyio" in f or "concurrent" in f or "asyncio" in f]
    assert caught.value.__context__ is None or caught.value.__suppress_context__
    assert "create it first" in str(caught.value)


def test_a_missing_config_file_names_the_file_and_the_entry(tmp_path: Path) -> None:
    missing = tmp_path / "mcp.json"
    with pytest.raises(LaunchRefused) as caught:
        McpConnection(missing, "files", owner=Owner("a"))
    message = str(caught.value)
    assert str(missing) in message and "entry 'files'" in message and "does not exist" in message
    assert not [f for f in _frames(caught.value) if "anyio" in f or "concurrent" in f]
