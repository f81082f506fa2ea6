"""The installed ``console-bridge`` script and the environment a test runs it in (nothing lands in
the user's data folder; CI log fencing off unless a test sets it)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

__all__ = ["BIN_DIR", "CLI", "PROC_TIMEOUT", "cli_env", "cli_path"]

BIN_DIR = Path(sys.executable).parent
CLI = shutil.which("console-bridge", path=str(BIN_DIR))
PROC_TIMEOUT = 90.0  # seconds for one CLI process; the runs here take a few seconds


def cli_path() -> str:
    if CLI is None:
        pytest.fail(f"the console-bridge entry point is not installed in {BIN_DIR}; run `pip install -e .`")
    return CLI


def cli_env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["XDG_DATA_HOME"] = str(tmp / "xdg-data")
    env.pop("CONSOLE_BRIDGE_MCP_CONSOLE", None)
    # CI fencing changes stdout; tests that want it set it
    for ci in ("GITHUB_ACTIONS", "TF_BUILD", "TEAMCITY_VERSION", "BUILDKITE"):
        env.pop(ci, None)
    return env
