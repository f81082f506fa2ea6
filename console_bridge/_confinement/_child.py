"""A short stdlib-only child (``python -I -S -c CODE``): where the bridge must act in another process's
namespaces (``_devcap``) or try what a session's server will do (``_namespaces_check``)."""

from __future__ import annotations

import subprocess
import sys

__all__ = ["run_child"]


def run_child(code: str, *args: str, timeout: float) -> subprocess.CompletedProcess[str] | str:
    """Run ``code`` with ``args`` in a fresh interpreter (no site, no user paths, no stdin) within
    ``timeout`` seconds: its result, or why it could not run."""
    try:
        return subprocess.run(
            [sys.executable, "-I", "-S", "-c", code, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"the child could not run ({exc})"
