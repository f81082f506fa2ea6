"""A real test of the namespaces a session needs, in a throwaway child (for ``doctor``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

__all__ = ["try_namespaces"]

_CODE = (
    "import sys; sys.path.insert(0, sys.argv[1]); import _namespaces\n"
    "try:\n"
    "    _namespaces.enter(sys.argv[2] == '1')\n"
    "except Exception as exc:\n"
    "    print(exc); sys.exit(1)\n"
)


def try_namespaces(user_namespace: bool, *, timeout: float = 30.0) -> str | None:
    """None when a child could enter a private mount namespace (in a user namespace when asked), else why not."""
    here = str(Path(__file__).parent)
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-S", "-c", _CODE, here, "1" if user_namespace else "0"],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"the check could not run ({exc})"
    if done.returncode != 0:
        return (done.stdout.strip() or done.stderr.strip() or f"exit status {done.returncode}")[-500:]
    return None
