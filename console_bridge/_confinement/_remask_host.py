"""The host process's side of the shared remasker (``_remaskd``): started at the first session that
needs it, stopped when the last one is released.

A session that hides names inside a tree it shows takes the helper with :func:`acquire` while its
supervision is built (the socket's path goes into its plan: ``watch["helper"]``) and gives it back
with :func:`release` after its supervisor ended. A helper found dead (killed, crashed: its sessions
ended with it, failing closed) is replaced by a new one at the next :func:`acquire`; the dead one's
sessions still give their share back to it.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

__all__ = ["HELPER", "RemaskHelper", "acquire", "current", "release"]

HELPER = Path(__file__).with_name("_remaskd.py")
#: How long the helper may take to start (a ``python -I -S``: tens of milliseconds) or to exit.
START_TIMEOUT = 10.0


class RemaskHelper:
    """One running helper: its process, its socket, its stdin (closing it ends the helper)."""

    def __init__(self, *, start_timeout: float = START_TIMEOUT) -> None:
        # A short path (a unix socket's path is at most 107 bytes), in a folder only this user enters.
        base = "/tmp" if os.path.isdir("/tmp") else None
        self.folder = tempfile.mkdtemp(prefix="cb-remask-", dir=base)
        self.path = os.path.join(self.folder, "s")
        self.users = 0
        control_r, self._control = os.pipe()
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-I", "-S", str(HELPER), self.path],
                stdin=control_r,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        except BaseException:
            os.close(self._control)
            shutil.rmtree(self.folder, ignore_errors=True)
            raise
        finally:
            os.close(control_r)
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], start_timeout)
        answer = self.process.stdout.readline().decode(errors="replace").strip() if ready else "no answer in time"
        self.process.stdout.close()
        if answer != "ready":
            self.stop()
            raise OSError(
                f"the shared remasker (one inotify instance for this process's sessions) did not start: {answer}; "
                "if the kernel refused an inotify instance, raise fs.inotify.max_user_instances (sysctl)"
            )

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = START_TIMEOUT) -> None:
        """Close its stdin (it exits), wait a bounded time, kill it, remove its folder."""
        with contextlib.suppress(OSError):
            os.close(self._control)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


_lock = threading.Lock()
_current: RemaskHelper | None = None


def acquire() -> RemaskHelper:
    """The host process's helper, started (or started again) if need be; one more session holds it.
    Raises OSError when it cannot start."""
    global _current
    with _lock:
        if _current is None or not _current.alive():
            _current = RemaskHelper()
        _current.users += 1
        return _current


def release(helper: RemaskHelper) -> None:
    """A session that held ``helper`` ended; the last one stops it (blocking, bounded)."""
    global _current
    with _lock:
        helper.users -= 1
        if helper.users > 0:
            return
        if _current is helper:
            _current = None
    helper.stop()


def current() -> RemaskHelper | None:
    """The helper sessions started now would share (None: none yet); for tests and the bench."""
    return _current
