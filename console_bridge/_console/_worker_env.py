"""What the worker's Python environment holds (checked on the host, before launch)."""

from __future__ import annotations

import subprocess
from pathlib import Path

__all__ = ["missing_modules", "venv_interpreter"]

_FIND = (
    "import importlib.util, sys\n"
    "missing = [m for m in sys.argv[1:] if importlib.util.find_spec(m) is None]\n"
    "print(' '.join(missing))\n"
)


def venv_interpreter(prefix: Path) -> Path | None:
    """The interpreter of a venv (``bin/python``), or None."""
    for name in ("python3", "python"):
        candidate = prefix / "bin" / name
        if candidate.exists():
            return candidate
    return None


def missing_modules(prefix: Path, modules: tuple[str, ...], *, timeout: float = 10.0) -> tuple[str, ...] | None:
    """The modules of ``modules`` the venv at ``prefix`` cannot import (located, not imported).

    None when the check itself could not run (no interpreter, timeout): the caller then
    assumes nothing is missing and lets the worker report.
    """
    python = venv_interpreter(prefix)
    if python is None:
        return None
    try:
        done = subprocess.run(
            [str(python), "-I", "-c", _FIND, *modules],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={"PATH": "/usr/bin:/bin"},
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return tuple(done.stdout.split())
