"""Per-session workspaces (``workspace=None``): each session's own empty folder, and the sweep
that removes the folders of hosts that died without closing. Never through a symlink."""

from __future__ import annotations

import contextlib
import os
import tempfile

import anyio
import psutil

from console_bridge._errors import NotAllowed
from console_bridge._hostfs import remove_tree

__all__ = ["WS_PREFIX", "remove_folder", "sweep_workspaces"]

#: Per-session workspaces (workspace=None) are named ``console-bridge-ws-<host pid>-<session id>-*``.
WS_PREFIX = "console-bridge-ws-"


def sweep_workspaces(root: str | None = None) -> list[str]:
    """Remove the per-session workspaces left by hosts that died without closing (killed, or
    their Ray node host actor was lost): folders whose host pid is no longer running. Returns
    the folders removed."""
    base = root if root is not None else tempfile.gettempdir()
    removed = []
    with contextlib.suppress(OSError):
        for name in os.listdir(base):
            if not name.startswith(WS_PREFIX):
                continue
            pid = name[len(WS_PREFIX) :].split("-", 1)[0]
            if not pid.isdigit() or psutil.pid_exists(int(pid)):
                continue
            with contextlib.suppress(OSError, NotAllowed):
                remove_tree(base, name)
                removed.append(os.path.join(base, name))
    return removed


async def remove_folder(folder: str | None) -> None:
    """Remove a session's own workspace (never through a symlink); gone already is fine."""
    if folder is None:
        return
    parent, name = os.path.split(folder)
    with contextlib.suppress(OSError, NotAllowed):
        await anyio.to_thread.run_sync(remove_tree, parent, name)
