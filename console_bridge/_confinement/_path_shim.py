"""The PATH folder of a view that hides some commands (R, for a session that does not ask for
it): one symlink per command of the host's PATH folders but the hidden ones.

Made once per set of PATH folders in the bridge's cache folder and bound read-only into each
view (``View.plan``), instead of 1,000-odd symlinks made in every session's view as it starts
(25-30 ms of each cold start). The folder's name is a digest of the PATH folders' identities
(device, inode, mtime: a command added or removed changes the mtime), so a changed PATH gets a
fresh folder; it is built under a temporary name and renamed into place, so a concurrent start
sees a whole folder or none. Cells see it read-only, at the view's own path; the cache's host
path has no name in the view. Folders not used for 30 days are removed.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

from console_bridge._confinement._namespaces import SetupError, fill_shim
from console_bridge._hostfs import prune_unused

__all__ = ["cached_shim"]

_UNUSED = 30 * 86400  # seconds since a shim folder was last used: then it is removed


def _key(sources: Sequence[str], hide: Sequence[str]) -> str:
    parts = [",".join(sorted(hide))]
    for source in sources:
        try:
            info = os.stat(source)
        except OSError:
            parts.append(f"{source}:-")
            continue
        parts.append(f"{source}:{info.st_dev}:{info.st_ino}:{info.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]


def _ours(path: Path) -> bool:
    """A real folder of this user's that no one else may write (else it is not used)."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return path.is_dir() and not path.is_symlink() and info.st_uid == os.getuid() and not info.st_mode & 0o022


def cached_shim(cache: Path, sources: Sequence[str], hide: Sequence[str]) -> Path | None:
    """The shim folder for ``sources`` less ``hide`` under ``cache``; None when it cannot be made
    (the view then makes its own, as before)."""
    parent = cache / "path-shims"
    final = parent / _key(sources, hide)
    if _ours(final):
        with contextlib.suppress(OSError):
            os.utime(final)  # in use: kept
        return final
    try:
        parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        scratch = tempfile.mkdtemp(prefix=".build-", dir=parent)
    except OSError:
        return None
    try:
        os.chmod(scratch, 0o755)
        fill_shim(scratch, list(sources), set(hide))  # what a view made itself, made once here
        os.rename(scratch, final)
    except (OSError, SetupError):
        shutil.rmtree(scratch, ignore_errors=True)  # (another start renamed its own first: use it)
    prune_unused(parent, final, unused=_UNUSED, stale_build=3600)
    return final if _ours(final) else None
