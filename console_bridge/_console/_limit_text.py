"""What a cell that ran into a session limit is told: the limit, its value, what happened to the worker."""

from __future__ import annotations

from console_bridge._results import CellFailure

__all__ = ["fork_refused", "limit_text", "out_of_memory"]

_TEXT = {
    "memory": "the session's memory limit ({value}); the worker was killed and its state is lost (the files in its "
    "TMPDIR too)",
    "processes": "the session's process limit ({value} tasks); starting more processes or threads failed "
    "(children a cell never waited for count until the worker restarts: restart() frees them)",
    "tmpdir": "the TMPDIR size limit ({value}); writing more failed with 'No space left on device'",
    "tmpdir:shm": "the TMPDIR size limit ({value}), which /dev/shm (the sandbox's /dev) shares; the cell wrote more to "
    "/dev/shm or /dev, so its processes were stopped and the worker's state is lost (files there stay until the "
    "worker restarts)",
    "tmpdir:shm-full": "the TMPDIR size limit ({value}), which /dev/shm (the sandbox's /dev) shares; writing more "
    "there failed with 'No space left on device' (the worker lives on; delete files in /dev/shm to write again)",
    "writes": "the session's write limit ({value} added to its writable folders); the cell's processes were "
    "stopped and the worker's state is lost. What was written stays (the file being written may be partial); "
    "delete files to write again, or raise Limits(writes=...) (CLI: --writes-limit)",
    "files": "the session's file limit ({value} files and folders added to its writable folders); the cell's "
    "processes were stopped and the worker's state is lost. What was created stays; delete files to create more, "
    "or raise Limits(files=...) (CLI: --files-limit)",
    "recording": "the session's recording limit ({value} on disk); the output past it was not kept in the "
    "recording (the cell's result above is what the server returned). Raise Limits(recording=...) (CLI: "
    "--recording-limit) or start a new session to record more",
    "memory:watched": "the session's memory limit ({value}: the sandbox's resident memory plus its /dev tmpfs, "
    "watched by the bridge where no cgroup holds it); the cell's processes were stopped and the worker's state "
    "is lost (the files in its TMPDIR too)",
    "memory:rlimit": "the session's memory limit ({value}; RLIMIT_AS per process, its backstop where no cgroup "
    "holds it, refused an allocation); the worker lives on and keeps what the cell had made",
    "processes:userns-rlimit": "the session's process limit ({value} tasks, RLIMIT_NPROC over its user "
    "namespace); starting more processes or threads failed (children a cell never waited for count until the "
    "worker restarts: restart() frees them)",
}


def fork_refused(error: CellFailure | None) -> bool:
    """The worker reported a refused fork or thread start (EAGAIN), the mark of RLIMIT_NPROC."""
    if error is None:
        return False
    text = f"{error.name}: {error.message}"
    return "Resource temporarily unavailable" in text or "can't start new thread" in text


def out_of_memory(error: CellFailure) -> bool:
    """The worker reported an allocation that failed (RLIMIT_AS): Python's MemoryError, R's vector error."""
    return error.name == "MemoryError" or "cannot allocate vector" in error.message


_SIZES = ("memory", "tmpdir", "recording", "writes")


def _human(value: int | float | None) -> str:
    if isinstance(value, int) and value >= 1024:
        for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
            if value >= size:
                return f"{value / size:g} {unit}"
    return str(value)


def limit_text(name: str, mechanism: str | None, value: int | float | None, *, shm: bool | str = False) -> str:
    """The detail of a ``kind == "limit"`` failure (``shm``: the TMPDIR cap was hit in /dev/shm, the cells
    stopped; ``"full"``: the kernel held it there)."""
    key = f"{name}:{mechanism}"
    if name == "tmpdir" and shm:
        key = "tmpdir:shm-full" if shm == "full" else "tmpdir:shm"
    return _TEXT.get(key, _TEXT[name]).format(value=_human(value) if name in _SIZES else value)
