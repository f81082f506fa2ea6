"""The interpreter installations a session runs, wherever they live (for the session's view).

The worker venv and its base installation (``pyvenv.cfg``'s ``home``, and where the
venv's interpreter really is), mcp-console's own installation (the environment holding
the binary, its ``libexec`` helpers and bundled bubblewrap) and, when R is asked for,
R's home and the user's R library. Reading a few small files only: no interpreter runs.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

__all__ = ["session_environments", "venv_base"]


def _prefix_of(executable: Path) -> Path:
    """``/x/bin/python3`` -> ``/x``."""
    return executable.parent.parent if executable.parent.name == "bin" else executable.parent


def venv_base(venv: Path) -> list[Path]:
    """The base installation(s) a venv runs on (from ``pyvenv.cfg`` and the interpreter's real path)."""
    found: list[Path] = []
    try:
        text = (venv / "pyvenv.cfg").read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    for line in text.splitlines():
        key, _, value = line.partition("=")
        key, value = key.strip().lower(), value.strip()
        if key == "home" and value:
            found.append(_prefix_of(Path(value) / "python"))
        elif key in ("executable", "base-executable") and value:
            found.append(_prefix_of(Path(value)))
    for name in ("python3", "python"):
        interpreter = venv / "bin" / name
        if interpreter.exists():
            found.append(_prefix_of(Path(os.path.realpath(interpreter))))
            break
    return list(dict.fromkeys(found))


def session_environments(python: Path, binary: Path, languages: tuple[str, ...]) -> list[tuple[Path, str]]:
    """``(path, why)`` of every installation the session's processes must read."""
    out: list[tuple[Path, str]] = [(python, "the worker's Python environment")]
    out += [(base, "the worker venv's base installation") for base in venv_base(python)]
    real = Path(os.path.realpath(binary))
    out.append((_prefix_of(real), "mcp-console's installation"))
    if real != binary:
        out.append((_prefix_of(binary), "mcp-console's installation"))
    if "r" in languages:
        found = shutil.which("R")
        if found is not None:
            r_real = Path(os.path.realpath(found))
            out.append((_prefix_of(r_real), "R's installation"))
            out.append((_prefix_of(Path(found)), "R's installation"))
        for library in (Path.home() / "R", *(Path(p) for p in os.environ.get("R_LIBS_USER", "").split(":") if p)):
            out.append((library, "the user's R library"))
    return out
