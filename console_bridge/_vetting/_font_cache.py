"""matplotlib's font cache, built once per environment on the host and shown read-only to sessions.

mcp-console points the worker's ``MPLCONFIGDIR`` at a new folder in each session's TMPDIR, so the
first ``import matplotlib.pyplot`` of every session scanned the fonts and wrote a fresh
``fontlist-vNNN.json`` ("Matplotlib is building the font cache"): 0.5-0.8 s of that import, every
session. As ``_bytecode`` does for compiled files, the host makes the cache once per environment
(the worker's interpreter and its matplotlib: a changed or reinstalled matplotlib gets a fresh one)
in the bridge's cache folder, by running the environment's Python with an empty ``HOME`` and
``MPLCONFIGDIR`` (fontconfig and matplotlib then find the system's fonts and matplotlib's own, not
the user's: the list names no file of the user's folders, which the view may hide). Nothing is
downloaded: matplotlib only lists the fonts on disk.

Each session gets the lists linked (or copied) into its private cache folder, which the sandbox
mounts read-only; the startup code (``font_startup_code``) links them into ``MPLCONFIGDIR`` when
matplotlib is first imported, so matplotlib reads them and cells cannot change them (the folder is
made then, as matplotlib would make it: a session that never imports matplotlib has none in its
TMPDIR). This must be done before the server starts:
mcp-console boots the worker, and runs the startup code, as soon as it starts, not at the first
cell (``WorkerBoot.link``). A font the view does not show makes matplotlib rebuild its list in the
cell, as before, and its write to the read-only file fails with a logged warning.

Concurrent sessions share the built cache safely: a build writes into a scratch folder of its own
and renames it into place whole (a second build that lost the race removes its scratch and uses the
winner's); a session's copy is written under a temporary name and renamed. Any failure (no
matplotlib, the build failing or timing out, a full disk) leaves the session without the lists: its
first import builds them, as before; it never fails the session.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from console_bridge._hostfs import prune_unused

__all__ = ["FONT_FOLDER", "built_font_cache", "font_startup_code", "show_font_cache"]

#: The folder of the session's cache (``MCP_CONSOLE_CACHE_DIR``'s parent) that holds the font lists.
FONT_FOLDER = "matplotlib"
_UNUSED = 30 * 86400  # seconds since a built cache was last used: then it is removed
_STALE_BUILD = 3600  # seconds: a scratch folder this old belongs to a build that died
_BUILD = "import matplotlib.font_manager"

_STARTUP = r"""
def _console_bridge_fonts(folder):
    # matplotlib's font lists, built by the host and read-only in the session's cache (_font_cache):
    # linked into MPLCONFIGDIR as matplotlib is first imported (the folder made then, not before).
    import os, sys

    class Fonts:
        @staticmethod
        def find_spec(name, path=None, target=None):
            if name != "matplotlib":
                return None
            if Fonts in sys.meta_path:
                sys.meta_path.remove(Fonts)
            config, cache = os.environ.get("MPLCONFIGDIR"), os.environ.get("MCP_CONSOLE_CACHE_DIR")
            built = os.path.join(os.path.dirname(cache or "/"), folder)
            try:
                names = [n for n in os.listdir(built) if n.startswith("fontlist-") and n.endswith(".json")]
                if config and cache and names:
                    os.makedirs(config, exist_ok=True)
                    for n in names:
                        if not os.path.lexists(os.path.join(config, n)):
                            os.symlink(os.path.join(built, n), os.path.join(config, n))
            except OSError:
                pass
            return None

    sys.meta_path.insert(0, Fonts)


_console_bridge_fonts(%r)
del _console_bridge_fonts
"""


def _matplotlib(search_path: Sequence[str]) -> Path | None:
    """The folder of the matplotlib the worker imports (the first on its ``sys.path``), or None."""
    for folder in search_path:
        candidate = Path(folder) / "matplotlib" / "__init__.py"
        if os.path.isabs(folder) and candidate.is_file():
            return candidate.parent
    return None


def _key(python: Path, package: Path) -> str:
    """The environment's name in the cache: its interpreter and its matplotlib's files (a
    reinstalled matplotlib has new inodes and mtimes); ``""`` when they cannot be read."""
    parts = [str(python.resolve())]
    for path in (package, package / "__init__.py", package / "font_manager.py"):
        try:
            info = os.stat(path)
        except OSError:
            return ""
        parts.append(f"{path}:{info.st_dev}:{info.st_ino}:{info.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]


def _fontlists(folder: Path) -> list[Path]:
    with contextlib.suppress(OSError):
        return sorted(p for p in folder.iterdir() if p.name.startswith("fontlist-") and p.name.endswith(".json"))
    return []


def _ours(path: Path) -> bool:
    """A real folder of this user's that no one else may write (else it is not used)."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return path.is_dir() and not path.is_symlink() and info.st_uid == os.getuid() and not info.st_mode & 0o022


def built_font_cache(cache: Path, python: Path, search_path: Sequence[str], *, timeout: float = 60.0) -> Path | None:
    """The folder under ``cache`` holding the font lists of the environment whose interpreter is
    ``python`` and whose ``sys.path`` is ``search_path``, built now when missing (at most ``timeout``
    seconds, blocking); None when that environment has no matplotlib or the build failed."""
    package = _matplotlib(search_path)
    key = _key(python, package) if package is not None else ""
    if not key:
        return None
    parent = cache / "matplotlib-fonts"
    final = parent / key
    if _ours(final) and _fontlists(final):
        with contextlib.suppress(OSError):
            os.utime(final)  # in use: kept
        return final
    try:
        parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        scratch = Path(tempfile.mkdtemp(prefix=".build-", dir=parent))
    except OSError:
        return None
    try:
        home = scratch / "home"
        home.mkdir()
        env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "MPLCONFIGDIR": str(scratch), "MPLBACKEND": "agg"}
        done = subprocess.run(
            [str(python), "-I", "-c", _BUILD], cwd=home, env=env, capture_output=True, timeout=timeout, check=False
        )
        lists = _fontlists(scratch)
        if done.returncode != 0 or not lists:
            raise OSError("no font cache was written")
        for entry in scratch.iterdir():  # only the font lists: nothing else matplotlib may have left
            if entry in lists:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        os.chmod(scratch, 0o755)
        os.rename(scratch, final)  # whole or not at all; fails when another build got there first
    except (OSError, subprocess.SubprocessError):
        shutil.rmtree(scratch, ignore_errors=True)
    prune_unused(parent, final, unused=_UNUSED, stale_build=_STALE_BUILD)
    return final if _ours(final) and _fontlists(final) else None


def font_startup_code() -> str:
    """The worker's startup code's part that links the session's font lists into ``MPLCONFIGDIR``."""
    return _STARTUP % FONT_FOLDER


def show_font_cache(built: Path, session_cache: Path) -> int:
    """Put the built font lists in the session's cache folder (read-only to cells), each whole
    (a hard link, or a copy renamed into place); returns how many are there (blocking)."""
    target = session_cache / FONT_FOLDER
    target.mkdir(mode=0o755, exist_ok=True)
    shown = 0
    for source in _fontlists(built):
        final = target / source.name
        if os.path.lexists(final):
            shown += 1
            continue
        try:
            os.link(source, final)
        except FileExistsError:
            pass
        except OSError:  # another file system: a copy under a temporary name, renamed whole
            partial = target / f".{source.name}.{os.getpid()}.partial"
            try:
                shutil.copyfile(source, partial, follow_symlinks=False)
                os.chmod(partial, 0o644)
                os.rename(partial, final)
            except OSError:
                with contextlib.suppress(OSError):
                    partial.unlink()
                continue
        shown += 1
    return shown
