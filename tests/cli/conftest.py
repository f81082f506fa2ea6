"""Helpers for the command-line tests: the installed ``console-bridge`` script, run as a real process.

Every run gets ``--recordings-dir`` under the test's tmp_path where it makes a session, and
``XDG_DATA_HOME`` points into tmp as well, so nothing lands in the user's data folder even
where the default recordings folder is exercised.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from tests.support.cli import BIN_DIR, CLI, PROC_TIMEOUT, cli_env, cli_path  # noqa: F401 (the folder's tests import them from here)

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
