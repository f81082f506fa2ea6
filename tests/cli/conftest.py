"""Helpers for the command-line tests: the installed ``console-bridge`` script, run as a real process.

Every run gets ``--recordings-dir`` under the test's tmp_path where it makes a session, and
``XDG_DATA_HOME`` points into tmp as well, so nothing lands in the user's data folder even
where the default recordings folder is exercised.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

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


Runner = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def cb(tmp_path: Path) -> Runner:
    """Run ``console-bridge ARGS`` in tmp_path (or ``cwd``); returns the completed process (text)."""

    def run(*args: str, cwd: Path | None = None, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [cli_path(), *args],
            cwd=cwd or tmp_path,
            input=stdin if stdin is not None else "",
            capture_output=True,
            text=True,
            timeout=PROC_TIMEOUT,
            env=cli_env(tmp_path),
            check=False,
        )

    return run


def start(args: Sequence[str], cwd: Path, tmp: Path, **kwargs: object) -> subprocess.Popen[str]:
    """Start ``console-bridge ARGS`` without waiting (for several at once, or for streaming)."""
    return subprocess.Popen(
        [cli_path(), *args],
        cwd=cwd,
        env=cli_env(tmp),
        text=True,
        **kwargs,  # type: ignore[call-overload]
    )


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path
