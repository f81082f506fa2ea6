"""Fixtures for the session manager tests: the real mcp-console 0.0.6, one workspace and recordings folder."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.console.conftest import binary_for, no_leaks, recordings, state_dir, workspace

__all__ = ["no_leaks", "recordings", "state_dir", "workspace"]


@pytest.fixture
def options(workspace: Path, recordings: Path) -> dict[str, Any]:
    """Manager arguments shared by the tests (the console options of a small, fast pool)."""
    return {"workspace": workspace, "command": binary_for("0.0.6"), "recordings_dir": recordings}


async def eventually(condition: Callable[[], bool], bound: float = 30.0, what: str = "condition") -> None:
    """Wait until ``condition()`` holds, re-checking every 20 ms, for at most ``bound`` seconds."""
    deadline = time.monotonic() + bound
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not hold within {bound:g}s")
        await anyio.sleep(0.02)
