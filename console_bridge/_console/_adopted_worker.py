"""The session's worker process, found in the supervisor's tree and put under the limits that
need its pid (the nested process-limit group, its rlimits, the sandbox's ``/dev`` cap).

mcp-console starts its worker itself (at the first cell, after a restart, after a death), so
the bridge adopts it before each cell: one pidfd poll while it lives, a walk of the session's
tree only when it changed. The write watch kills cells through it (``_confinement._disk``).
"""

from __future__ import annotations

import contextlib
import os
import select

import psutil

from console_bridge._confinement._devcap import cap_dev
from console_bridge._confinement._plan import Confinement
from console_bridge._confinement._proctree import descendants

__all__ = ["AdoptedWorker"]


class AdoptedWorker:
    """The worker a session adopted, if any, and whether its ``/dev`` got the TMPDIR's cap."""

    def __init__(self) -> None:
        self.process: psutil.Process | None = None
        self.dev_capped: bool | None = None  # the worker's /dev got the TMPDIR's cap as a tmpfs size (_devcap)
        self._fd: int | None = None  # a pidfd of the adopted worker: its liveness in one poll
        self._poll: select.poll | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def place(self, supervisor_pid: int | None, confinement: Confinement) -> None:
        """Adopt a (new) worker process: move it into the nested process-limit group, and lift the
        recording's RLIMIT_FSIZE (meant for the server's raw logs) off it, so cells may write large
        files to TMPDIR and the workspace. One poll per cell while the worker lives; a walk of the
        session's tree only when it changed."""
        if self.process is not None and self.alive():
            return
        self.forget()
        if supervisor_pid is None:
            return
        tree = descendants(supervisor_pid)
        if tree is None:
            return
        for proc in tree:
            with contextlib.suppress(psutil.Error):
                argv = proc.cmdline()
                if len(argv) > 1 and argv[1] == "worker" and os.path.basename(argv[0]) == "mcp-console":
                    if "fsize" in confinement.rlimits:
                        _, hard = proc.rlimit(psutil.RLIMIT_FSIZE)
                        proc.rlimit(psutil.RLIMIT_FSIZE, (hard, hard))
                    processes = confinement.reports["processes"].value
                    if "nproc" in confinement.child_rlimits and isinstance(processes, int):
                        # the cells get the limit itself; the server and its helpers keep the headroom
                        proc.rlimit(psutil.RLIMIT_NPROC, (processes, processes))
                    if confinement.cgroups.cells is None or confinement.cgroups.move_worker(proc.pid):
                        self._adopt(proc)
                        if confinement.tmpfs_size is not None:  # the sandbox's /dev (and /dev/shm): the TMPDIR's cap
                            self.dev_capped = cap_dev(proc.pid, confinement.tmpfs_size) is None
                    return

    def _adopt(self, proc: psutil.Process) -> None:
        self.process = proc
        pidfd_open = getattr(os, "pidfd_open", None)
        if pidfd_open is not None:
            with contextlib.suppress(OSError):
                fd = pidfd_open(proc.pid)
                if proc.is_running():  # the pid was not reused between the listing and the open
                    self._fd = fd
                    self._poll = select.poll()
                    self._poll.register(fd, select.POLLIN)
                else:
                    os.close(fd)

    def alive(self) -> bool:
        """Is the adopted worker still running? Before every cell: a poll of its pidfd (about a
        microsecond), psutil's create-time check where there is no pidfd."""
        if self._poll is not None:
            try:
                return not self._poll.poll(0)  # a pidfd is readable once its process exited
            except OSError:
                return False
        if self.process is None:
            return False
        with contextlib.suppress(psutil.Error):
            return self.process.is_running()
        return False

    def forget(self) -> None:
        self.process = None
        self._poll = None
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def namespace_tasks(self, supervisor_pid: int | None) -> int:
        """Tasks (threads included) in the worker's user namespace: what the cells' RLIMIT_NPROC counts."""
        worker = self.process
        if worker is None or supervisor_pid is None:
            return 0
        try:
            namespace = os.readlink(f"/proc/{worker.pid}/ns/user")
            tree = psutil.Process(supervisor_pid).children(recursive=True)
        except (OSError, psutil.Error):
            return 0
        total = 0
        for proc in tree:
            with contextlib.suppress(OSError, psutil.Error):
                if os.readlink(f"/proc/{proc.pid}/ns/user") == namespace:
                    total += proc.num_threads()
        return total
