"""Fixtures for the session manager tests: the real mcp-console 0.0.6, one workspace and recordings folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.binaries import binary_for
from tests.support.sessions import no_leaks, recordings, state_dir, workspace

__all__ = ["no_leaks", "recordings", "state_dir", "workspace"]


@pytest.fixture
def options(workspace: Path, recordings: Path) -> dict[str, Any]:
    """Manager arguments shared by the tests (the console options of a small, fast pool)."""
    return {"workspace": workspace, "command": binary_for("0.0.6"), "recordings_dir": recordings}
