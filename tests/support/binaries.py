"""The real mcp-console binaries of both qualified versions (``scripts/setup-dev.sh`` installs them;
``CONSOLE_BRIDGE_TEST_MCP_CONSOLE_0_0_5``/``_0_0_6`` point elsewhere, e.g. from a worktree)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.places import ROOT

__all__ = ["VENV", "binary_for"]

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
