"""How much a session and each of its cells used: CPU, memory, processes, bytes on disk.

From the session's cgroups where it has them (v2 ``cpu.stat``/``memory.current``/``memory.peak``/
``pids.current``, v1 ``cpuacct.usage``/``memory.usage_in_bytes``/``memory.max_usage_in_bytes``/
``pids.current``), else from the processes themselves (``/proc`` through psutil: the worker's
CPU times and its peak resident size, ``VmHWM``). Counter files are opened once and re-read with
``pread``: a cell costs a few system calls before and after, nothing more.

A cell's ``memory_peak`` is the most memory the session used during the cell above what it used
when the cell began (what the cell added): the group's peak is reset before each cell (v1: a
write to ``memory.max_usage_in_bytes``; v2: a per-descriptor ``memory.peak`` reset, kernel 6.12+),
the worker's ``VmHWM`` through ``/proc/PID/clear_refs`` (the worker alone then: processes a cell
starts are not counted). Where neither can be reset it is None.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from console_bridge._cells._recordings import Recording
from console_bridge._results import CellUsage

__all__ = ["CellMeter", "GroupMeter", "SessionUsage", "TreeMeter", "UsageReader", "WorkerMeter", "group_meter"]


@dataclass(frozen=True, slots=True)
class SessionUsage:
    """What a session used so far (``status().usage``); None where this host cannot measure one.

    ``cpu_seconds``: CPU time of the session's processes (server, worker, what cells started);
    ``memory``/``memory_peak``: bytes in use now and at most (the cgroup's count, page cache and
    TMPDIR files included, else the processes' resident size); ``processes``: tasks now;
    ``tmpdir_bytes``: bytes in the private TMPDIR; ``writes_bytes``: bytes added to writable
    places (None: no mechanism counts them here); ``recording_bytes``: the recording on disk.
    Example::

        usage = console.status().usage
        print(f"{usage.cpu_seconds:.1f} s CPU, {usage.memory_peak / 2**20:.0f} MiB peak")
    """

    cpu_seconds: float | None = None
    memory: int | None = None
    memory_peak: int | None = None
    processes: int | None = None
    tmpdir_bytes: int | None = None
    writes_bytes: int | None = None
    recording_bytes: int | None = None


class _Counter:
    """One counter file, opened once, re-read with pread (``key``: a line of a flat-keyed file)."""

    def __init__(self, path: Path, key: str | None = None, *, writable: bool = False, write_only: bool = False) -> None:
        self.path, self.key = path, key
        self._fd: int | None = None
        # (/proc/PID/clear_refs is mode 0200: opened for reading too it is refused to a normal user)
        self._mode = "w" if write_only else "rw" if writable else "r"

    def _open(self) -> int:
        if self._fd is None:
            flags = {"r": os.O_RDONLY, "rw": os.O_RDWR, "w": os.O_WRONLY}[self._mode] | os.O_CLOEXEC
            self._fd = os.open(self.path, flags)
        return self._fd

    def text(self) -> str | None:
        try:
            return os.pread(self._open(), 4096, 0).decode("ascii", "replace")
        except OSError:
            return None

    def read(self) -> int | None:
        text = self.text()
        if text is None:
            return None
        if self.key is None:
            with contextlib.suppress(ValueError):
                return int(text.strip())
            return None
        for line in text.splitlines():
            name, _, value = line.partition(" ")
            if name == self.key:
                with contextlib.suppress(ValueError):
                    return int(value)
        return None

    def write(self, value: str) -> bool:
        try:
            os.pwrite(self._open(), value.encode("ascii"), 0)
        except OSError:
            return False
        return True

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


class GroupMeter:
    """The session's cgroups, read: CPU (ns), memory now and peak (bytes), tasks."""

    def __init__(self, paths: list[Path]) -> None:
        self.cpu: _Counter | None = None
        self.cpu_scale = 1
        self.memory: _Counter | None = None
        self.peak: _Counter | None = None
        self.version: str | None = None
        self.tasks: _Counter | None = None
        for path in paths:
            if (path / "memory.current").exists():
                self.version = "cgroup2"
                self.memory = _Counter(path / "memory.current")
                if (path / "memory.peak").exists():
                    self.peak = _Counter(path / "memory.peak", writable=True)
            elif (path / "memory.usage_in_bytes").exists():
                self.version = "cgroup1"
                self.memory = _Counter(path / "memory.usage_in_bytes")
                self.peak = _Counter(path / "memory.max_usage_in_bytes", writable=True)
            if self.cpu is None and (path / "cpu.stat").exists() and (path / "memory.current").exists():
                self.cpu, self.cpu_scale = _Counter(path / "cpu.stat", "usage_usec"), 1000
            elif self.cpu is None and (path / "cpuacct.usage").exists():
                self.cpu = _Counter(path / "cpuacct.usage")
            if self.tasks is None and (path / "pids.current").exists():
                self.tasks = _Counter(path / "pids.current")
        self._peak_seen = 0  # v1's peak is reset per cell: the session's peak is kept here

    def cpu_seconds(self) -> float | None:
        value = self.cpu.read() if self.cpu is not None else None
        return None if value is None else value * self.cpu_scale / 1e9

    def memory_now(self) -> int | None:
        return self.memory.read() if self.memory is not None else None

    def reset_peak(self) -> bool:
        """Start a cell's peak: v1 resets the group's maximum (nothing else reads it), v2 resets what
        this descriptor sees (kernel 6.12+; an older kernel refuses the write)."""
        if self.peak is None:
            return False
        before = self.peak.read()
        if before is not None:
            self._peak_seen = max(self._peak_seen, before)
        return self.peak.write("0" if self.version == "cgroup1" else "reset\n")

    def peak_now(self) -> int | None:
        value = self.peak.read() if self.peak is not None else None
        if value is not None:
            self._peak_seen = max(self._peak_seen, value)
        return value

    def session_peak(self) -> int | None:
        if self.peak is None:
            return None
        if self.version == "cgroup2":  # the group's own peak (a reset through our descriptor leaves it)
            with contextlib.suppress(OSError, ValueError):
                return max(self._peak_seen, int((self.peak.path).read_text(encoding="ascii").strip()))
        now = self.peak_now()
        return self._peak_seen if now is None else max(self._peak_seen, now)

    def processes(self) -> int | None:
        return self.tasks.read() if self.tasks is not None else None

    def close(self) -> None:
        for counter in (self.cpu, self.memory, self.peak, self.tasks):
            if counter is not None:
                counter.close()


def group_meter(paths: list[Path]) -> GroupMeter | None:
    """A meter of the groups at ``paths``, or None when none of them counts anything."""
    meter = GroupMeter(paths)
    if meter.cpu is None and meter.memory is None and meter.tasks is None:
        return None
    return meter


class WorkerMeter:
    """The worker process of a session, found below its supervisor (re-found when it was replaced).

    Its ``/proc`` files stay open and are re-read with pread; a read that fails (the worker ended:
    the descriptors then refer to the dead task, never to a reused pid) makes it look again."""

    def __init__(self, supervisor_pid: int | None) -> None:
        self.supervisor_pid = supervisor_pid
        self._files: tuple[_Counter, _Counter, _Counter] | None = None  # stat, status, clear_refs
        self._tick = os.sysconf("SC_CLK_TCK")

    def _find(self) -> tuple[_Counter, _Counter, _Counter] | None:
        if self.supervisor_pid is None:
            return None
        with contextlib.suppress(psutil.Error):
            for proc in psutil.Process(self.supervisor_pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    argv = proc.cmdline()
                    if len(argv) > 1 and argv[1] == "worker" and os.path.basename(argv[0]) == "mcp-console":
                        folder = Path(f"/proc/{proc.pid}")
                        return (
                            _Counter(folder / "stat"),
                            _Counter(folder / "status"),
                            _Counter(folder / "clear_refs", write_only=True),
                        )
        return None

    def _read(self, index: int) -> str | None:
        for _ in range(2):
            if self._files is None:
                self._files = self._find()
                if self._files is None:
                    return None
            text = self._files[index].text()
            if text is not None:
                return text
            for counter in self._files:
                counter.close()
            self._files = None
        return None

    def cpu_seconds(self) -> float | None:
        text = self._read(0)
        if text is None:
            return None
        fields = text.rpartition(")")[2].split()
        try:  # utime, stime, cutime, cstime: fields 14-17 of stat, 12-15 after the command name
            ticks = sum(int(value) for value in fields[11:15])
        except (ValueError, IndexError):
            return None
        return ticks / self._tick

    def reset_peak(self) -> bool:
        if self._files is None and self._read(0) is None:
            return False
        assert self._files is not None
        return self._files[2].write("5")  # resets the peak resident size (VmHWM) to the current one

    def rss_and_peak(self) -> tuple[int, int] | None:
        text = self._read(1)
        if text is None:
            return None
        rss = peak = None
        for line in text.splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
            elif line.startswith("VmHWM:"):
                peak = int(line.split()[1]) * 1024
        return None if rss is None or peak is None else (rss, peak)

    def close(self) -> None:
        if self._files is not None:
            for counter in self._files:
                counter.close()
            self._files = None


class TreeMeter:
    """The session's processes (psutil), where no cgroup counts them: CPU, resident memory, tasks."""

    def __init__(self, supervisor_pid: int | None) -> None:
        self.supervisor_pid = supervisor_pid
        self._peak = 0

    def read(self) -> tuple[float | None, int | None, int | None, int | None]:
        """(cpu seconds, memory, peak seen, processes)."""
        if self.supervisor_pid is None:
            return None, None, None, None
        try:
            tree = [psutil.Process(self.supervisor_pid), *psutil.Process(self.supervisor_pid).children(recursive=True)]
        except psutil.Error:
            return None, None, None, None
        cpu = 0.0
        memory = 0
        for proc in tree:
            with contextlib.suppress(psutil.Error):
                times = proc.cpu_times()
                cpu += times.user + times.system + times.children_user + times.children_system
                memory += proc.memory_info().rss
        self._peak = max(self._peak, memory)
        return cpu, memory, self._peak, len(tree)


class CellMeter:
    """Measures one cell at a time: ``start()`` when it is submitted, ``stop()`` when it ended."""

    def __init__(self, group: GroupMeter | None, worker: WorkerMeter) -> None:
        self.group = group
        self.worker = worker
        self._started: float | None = None
        self._cpu: float | None = None
        self._memory: int | None = None
        self._peak_reset = False

    @property
    def active(self) -> bool:
        return self._started is not None

    def state(self) -> tuple[float | None, float | None, int | None, bool]:
        """What :meth:`restore` puts back (a submission the server refused as busy measured nothing)."""
        return self._started, self._cpu, self._memory, self._peak_reset

    def restore(self, state: tuple[float | None, float | None, int | None, bool]) -> None:
        self._started, self._cpu, self._memory, self._peak_reset = state

    def start(self) -> None:
        group = self.group
        self._cpu = self._cpu_now()
        if group is not None and group.memory is not None:
            self._memory = group.memory_now()
            self._peak_reset = group.reset_peak()
        else:
            self._peak_reset = self.worker.reset_peak()
            sizes = self.worker.rss_and_peak()
            self._memory = sizes[0] if sizes is not None else None
        self._started = time.monotonic()

    def close(self) -> None:
        if self.group is not None:
            self.group.close()
        self.worker.close()

    def _cpu_now(self) -> float | None:
        group = self.group
        return group.cpu_seconds() if group is not None and group.cpu is not None else self.worker.cpu_seconds()

    def stop(self) -> CellUsage | None:
        if self._started is None:
            return None
        wall = time.monotonic() - self._started
        self._started = None
        group = self.group
        cpu_now = self._cpu_now()
        cpu = None if cpu_now is None or self._cpu is None else max(0.0, cpu_now - self._cpu)
        peak: int | None = None
        if self._peak_reset and self._memory is not None:
            if group is not None and group.memory is not None:
                top = group.peak_now()
            else:
                sizes = self.worker.rss_and_peak()
                top = sizes[1] if sizes is not None else None
            peak = None if top is None else max(0, top - self._memory)
        return CellUsage(cpu_seconds=cpu, wall_seconds=wall, memory_peak=peak)


def registry_usage(cgroups: list[str], supervisor_pid: int | None, recording: str | None) -> SessionUsage:
    """A session's usage read from outside (``console-bridge ps``/``top``): its groups as the registry
    lists them, else its supervisor's process tree; the recording's size on disk."""
    cpu = memory = peak = processes = None
    meter = group_meter([Path(path) for path in cgroups])
    if meter is not None:
        try:
            cpu, memory, peak, processes = (
                meter.cpu_seconds(),
                meter.memory_now(),
                meter.session_peak(),
                meter.processes(),
            )
        finally:
            meter.close()
    if cpu is None or memory is None or processes is None:
        tree_cpu, tree_memory, _, tree_processes = TreeMeter(supervisor_pid).read()
        cpu = cpu if cpu is not None else tree_cpu
        if memory is None:
            memory, peak = tree_memory, None  # one look: no peak
        processes = processes if processes is not None else tree_processes
    return SessionUsage(
        cpu_seconds=cpu,
        memory=memory,
        memory_peak=peak,
        processes=processes,
        recording_bytes=_tree_bytes(Path(recording)) if recording else None,
    )


def _tree_bytes(root: Path, max_entries: int = 10_000) -> int | None:
    total = seen = 0
    try:
        for folder, _dirs, files in os.walk(root):
            for name in files:
                seen += 1
                if seen > max_entries:
                    return total
                with contextlib.suppress(OSError):
                    total += os.lstat(os.path.join(folder, name)).st_size
    except OSError:
        return None
    return total


class UsageReader:
    """A part of :class:`AsyncConsole`: ``status().usage``. From the session's cgroups where it has
    them, else its processes; the walks (the process tree, the recording's size) are re-read at
    most every ``refresh()`` seconds: status() is called often, the counter files are read each time.

    ``tmpdir_bytes`` and ``writes_bytes`` are the confinement's books; ``recording`` gives the
    session's recording once there is one.
    """

    def __init__(
        self,
        *,
        refresh: Callable[[], float],
        tmpdir_bytes: Callable[[], int | None],
        writes_bytes: Callable[[], int | None],
        recording: Callable[[], Recording | None],
    ) -> None:
        self._refresh = refresh
        self._tmpdir_bytes = tmpdir_bytes
        self._writes_bytes = writes_bytes
        self._recording = recording
        self._cache: dict[str, tuple[float, Any]] = {}

    def read(self, meter: CellMeter | None, tree: TreeMeter | None) -> SessionUsage | None:
        """What the session used so far; None before it runs (no ``meter``, no ``tree``)."""
        if meter is None or tree is None:
            return None
        group = meter.group
        cpu = group.cpu_seconds() if group is not None else None
        memory = group.memory_now() if group is not None else None
        peak = group.session_peak() if group is not None else None
        processes = group.processes() if group is not None else None
        if cpu is None or memory is None or processes is None:
            tree_cpu, tree_memory, tree_peak, tree_processes = self._cached("tree", tree.read)
            cpu = cpu if cpu is not None else tree_cpu
            if memory is None:
                memory, peak = tree_memory, tree_peak
            processes = processes if processes is not None else tree_processes
        recording = self._recording()
        return SessionUsage(
            cpu_seconds=cpu,
            memory=memory,
            memory_peak=peak,
            processes=processes,
            tmpdir_bytes=self._tmpdir_bytes(),
            writes_bytes=self._writes_bytes(),
            recording_bytes=self._cached("recording", lambda: recording.size_bytes) if recording is not None else None,
        )

    def _cached(self, key: str, read: Callable[[], Any]) -> Any:
        """What ``read`` returned, re-read at most every ``refresh()`` seconds."""
        now = time.monotonic()
        hit = self._cache.get(key)
        if hit is not None and now - hit[0] < self._refresh():
            return hit[1]
        value = read()
        self._cache[key] = (now, value)
        return value
