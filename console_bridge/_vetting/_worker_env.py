"""What the worker's Python environment holds (checked on the host, before launch)."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

__all__ = ["VenvFacts", "checked_venv", "inspect_venv", "missing_modules", "venv_interpreter"]

_FIND = (
    "import importlib.util, json, sys, sysconfig, os\n"
    "missing = [m for m in sys.argv[1:] if importlib.util.find_spec(m) is None]\n"
    "print(' '.join(missing))\n"
    "v = sysconfig.get_config_var\n"
    "print(os.path.join(v('LIBDIR') or '', v('LDLIBRARY') or '') if v('Py_ENABLE_SHARED') else '')\n"
    "print('%d.%d' % sys.version_info[:2])\n"
    "print(sys.implementation.cache_tag or '')\n"
    "print(json.dumps(sys.path))\n"
)


@dataclass(frozen=True, slots=True)
class VenvFacts:
    """What a worker venv holds: modules it lacks, and the library mcp-console embeds Python from."""

    missing: tuple[str, ...]
    embedding_library: Path | None  # libpython3.X.so (None: a static build, nothing to check)
    python_version: str
    cache_tag: str = ""  # sys.implementation.cache_tag, e.g. cpython-311 (its compiled files' names)
    search_path: tuple[str, ...] = ()  # sys.path of the interpreter run with -I (the worker's, less "")

    @property
    def embedding_missing(self) -> bool:
        return self.embedding_library is not None and not self.embedding_library.exists()

    def embedding_fix(self) -> str:
        """How to install the missing embedding library (Debian and Ubuntu name the package)."""
        package = f"libpython{self.python_version}-dev"
        return (
            f"mcp-console embeds Python from {self.embedding_library}, which is missing; on Debian or Ubuntu install "
            f"it with `sudo apt-get install {package}`, or pass python= pointing at a venv of a Python built with "
            "--enable-shared"
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
    facts = inspect_venv(prefix, modules, timeout=timeout)
    return facts.missing if facts is not None else None


def inspect_venv(prefix: Path, modules: tuple[str, ...] = (), *, timeout: float = 10.0) -> VenvFacts | None:
    """One run of the venv's interpreter: the modules it lacks and its embedding library (None: no answer)."""
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
    lines = [*done.stdout.splitlines(), "", "", "", "", ""]
    library = Path(lines[1].strip()) if lines[1].strip() else None
    try:
        found = json.loads(lines[4])
    except ValueError:
        found = []
    search_path = tuple(item for item in found if isinstance(item, str)) if isinstance(found, list) else ()
    return VenvFacts(tuple(lines[0].split()), library, lines[2].strip(), lines[3].strip(), search_path)


_Stamp = tuple[tuple[str, int, int] | None, ...]
_CHECKED: dict[tuple[str, tuple[str, ...]], tuple[VenvFacts, _Stamp]] = {}
_CHECKED_LOCK = threading.Lock()


def _stamp(prefix: Path, facts: VenvFacts) -> _Stamp:
    """What the answer depends on: the venv's config, its interpreter, and every folder of its
    ``sys.path`` (installing or removing a package or a ``.pth`` file changes its folder's mtime)."""
    python = venv_interpreter(prefix)
    paths = [prefix / "pyvenv.cfg", *([python.resolve()] if python is not None else []), *map(Path, facts.search_path)]
    out: list[tuple[str, int, int] | None] = []
    for path in paths:
        try:
            status = os.stat(path)
        except OSError:
            out.append(None)
            continue
        out.append((str(path), status.st_mtime_ns, status.st_ino))
    return tuple(out)


def checked_venv(prefix: Path, modules: tuple[str, ...] = (), *, timeout: float = 10.0) -> VenvFacts | None:
    """``inspect_venv``, answered again without running the interpreter while nothing it depends on
    changed (the sessions of one process use the same venv: the run is 17-27 ms of every start)."""
    key = (str(prefix), modules)
    with _CHECKED_LOCK:
        known = _CHECKED.get(key)
    if known is not None and _stamp(prefix, known[0]) == known[1]:
        return known[0]
    facts = inspect_venv(prefix, modules, timeout=timeout)
    if facts is None:
        return None
    stamp = _stamp(prefix, facts)
    with _CHECKED_LOCK:
        if len(_CHECKED) >= 32:
            _CHECKED.clear()
        _CHECKED[key] = (facts, stamp)
    return facts
