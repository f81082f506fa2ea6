"""Per-session cgroups, created only beneath the cgroups this process already belongs to.

v2 (a unified hierarchy where this process's group delegates ``memory``/``pids``/``cpu``
to children) is preferred; v1 hierarchies (``memory``, ``pids``, ``cpu``) are used where
that is what the host mounts. Nothing else is touched: no process is moved out of its
group (the session's supervisor moves *itself* into the new child group before it starts
anything), and every group created is removed when its session ends (by the supervisor,
or by the sweep after a host that died).

``CONSOLE_BRIDGE_CGROUP_ROOT`` (documented test hook) replaces ``/sys/fs/cgroup`` as the
place where hierarchies are looked for: pointing it at an empty or unwritable folder
simulates a host without usable cgroups.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

__all__ = [
    "CGROUP_PREFIX",
    "SessionCgroups",
    "create_session_cgroups",
    "remove_group",
    "scope_group",
    "stale_groups",
]

CGROUP_PREFIX = "console-bridge-"
#: Tasks the server and its sandbox helpers may use beyond a session's process limit (v1).
PIDS_HEADROOM = 64
_ENV_ROOT = "CONSOLE_BRIDGE_CGROUP_ROOT"
_V1 = ("memory", "pids", "cpu")


def _mount_root() -> Path:
    return Path(os.environ.get(_ENV_ROOT) or "/sys/fs/cgroup")


def _own_groups() -> dict[str, str]:
    """``{"memory": "/a/b", ..., "": "/x"}`` from /proc/self/cgroup ('' is the v2 group)."""
    groups: dict[str, str] = {}
    try:
        text = Path("/proc/self/cgroup").read_text(encoding="ascii")
    except OSError:
        return groups
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for controller in parts[1].split(",") if parts[1] else [""]:
            groups[controller] = parts[2]
    return groups


def _writable_dir(path: Path) -> bool:
    return path.is_dir() and os.access(path, os.W_OK | os.X_OK)


def _v2_base(root: Path, own: dict[str, str], needed: set[str]) -> Path | None:
    """The v2 group to create children in, when it delegates every ``needed`` controller."""
    if "" not in own:
        return None
    for candidate in (root, root / "unified"):
        base = candidate / own[""].lstrip("/")
        controls = base / "cgroup.subtree_control"
        if not controls.is_file() or not _writable_dir(base):
            continue
        try:
            enabled = set(controls.read_text(encoding="ascii").split())
            if not needed <= enabled:
                available = set((base / "cgroup.controllers").read_text(encoding="ascii").split())
                if not needed <= available:
                    continue
                with contextlib.suppress(OSError):  # EBUSY when the group itself holds processes
                    controls.write_text(" ".join(f"+{name}" for name in sorted(needed - enabled)), encoding="ascii")
                enabled = set(controls.read_text(encoding="ascii").split())
            if needed <= enabled:
                return base
        except OSError:
            continue
    return None


@dataclass
class SessionCgroups:
    """The groups of one session and which limits they carry."""

    version: Literal["cgroup2", "cgroup1"] | None  # also the mechanism a limit it carries reports
    paths: list[Path] = field(default_factory=list)
    by_limit: dict[str, Path] = field(default_factory=dict)  # "memory" | "processes" | "cpu" -> group
    errors: dict[str, str] = field(default_factory=dict)  # limit -> why it has no group
    cells: Path | None = None  # v1: the nested pids group the worker is moved into (see move_worker)
    owned: bool = True  # False: a systemd scope's group (systemd removes it; only its counters are read)
    _fds: dict[Path, int] = field(default_factory=dict)
    _counter_files: list[tuple[str, Path, bytes]] | None = None
    _cpu: tuple[int, bytes | None] | None = None  # the CPU counter's open file, and its key (None: v1)

    def counters(self) -> dict[str, int]:
        """Counters that rise when a limit is hit: ``{"memory": oom kills, "processes": fork refusals}``.

        Read before and after every cell, so the files stay open and are re-read with pread (the
        list of files is worked out once: no path building or hashing per read)."""
        if self._counter_files is None:
            files: list[tuple[str, Path, bytes]] = []
            memory = self.by_limit.get("memory")
            if memory is not None:
                name = "memory.events" if self.version == "cgroup2" else "memory.oom_control"
                files.append(("memory", memory / name, b"oom_kill"))
            pids = self.by_limit.get("processes")
            if pids is not None:
                files.append(("processes", pids / "pids.events", b"max"))
                if self.cells is not None:
                    files.append(("processes", self.cells / "pids.events", b"max"))
            self._counter_files = files
        out: dict[str, int] = {}
        for limit, path, key in self._counter_files:
            out[limit] = out.get(limit, 0) + self._read_key(path, key)
        return out

    def _read_key(self, path: Path, key: bytes) -> int:
        fd = self._fds.get(path)
        try:
            if fd is None:
                fd = self._fds[path] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            data = os.pread(fd, 4096, 0)
        except OSError:
            return 0
        for line in data.splitlines():
            name, _, value = line.partition(b" ")
            if name == key:
                with contextlib.suppress(ValueError):
                    return int(value)
        return 0

    def cpu_counter(self) -> int | None:
        """The session tree's CPU time so far, in the group's own unit (v2 microseconds, v1
        nanoseconds), from one open file (a pread: the write watch reads it at every idle wake, see
        ``_disk.WriteWatch``); None where no group counts it. Only its changes mean anything."""
        if self._cpu is None:
            for path in self.paths:
                name, key = ("cpu.stat", b"usage_usec") if self.version == "cgroup2" else ("cpuacct.usage", None)
                with contextlib.suppress(OSError):
                    self._cpu = (os.open(path / name, os.O_RDONLY | os.O_CLOEXEC), key)
                    break
            else:
                return None
        fd, key = self._cpu
        try:
            data = os.pread(fd, 4096, 0)
        except OSError:
            return None
        if key is None:  # cgroup v1's cpuacct.usage: one number
            data = b"usage " + data
            key = b"usage"
        for line in data.splitlines():
            field_name, _, value = line.partition(b" ")
            if field_name == key:
                with contextlib.suppress(ValueError):
                    return int(value)
        return None

    def close_files(self) -> None:
        for fd in self._fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds.clear()
        if self._cpu is not None:
            with contextlib.suppress(OSError):
                os.close(self._cpu[0])
            self._cpu = None

    def move_worker(self, pid: int) -> bool:
        """Put the worker process (and so everything a cell starts) into the nested group that
        holds the process limit, so the server and its relay keep headroom to report the hit."""
        if self.cells is None:
            return False
        try:
            (self.cells / "cgroup.procs").write_text(str(pid), encoding="ascii")
        except OSError:
            return False
        return True

    def pids(self) -> set[int]:
        found: set[int] = set()
        for path in self.paths:
            found.update(_procs(path))
        return found

    def cpu_usage_ns(self) -> int | None:
        """CPU time used by the session tree so far (nanoseconds), where a group counts it."""
        for path in self.paths:
            with contextlib.suppress(OSError, ValueError):
                if self.version == "cgroup2":
                    return _read_key(path / "cpu.stat", "usage_usec") * 1000
                if (path / "cpuacct.usage").exists():
                    return int((path / "cpuacct.usage").read_text(encoding="ascii"))
        return None


def scope_group(pid: int) -> Path | None:
    """The cgroup v2 group of ``pid`` (the supervisor, in its systemd scope), or None."""
    try:
        text = Path(f"/proc/{pid}/cgroup").read_text(encoding="ascii")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("0::"):
            group = _mount_root() / line[3:].strip().lstrip("/")
            return group if (group / "cgroup.procs").exists() else None
    return None


def _read_key(path: Path, key: str) -> int:
    try:
        for line in path.read_text(encoding="ascii").splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def _procs(group: Path) -> list[int]:
    try:
        return [int(line) for line in (group / "cgroup.procs").read_text(encoding="ascii").split()]
    except (OSError, ValueError):
        return []


def _write(path: Path, value: str) -> None:
    path.write_text(value, encoding="ascii")


def create_session_cgroups(
    session_id: str, *, memory: int | None, processes: int | None, cpu: float | None
) -> SessionCgroups:
    """Create the session's groups beneath this process's own groups and set the limits.

    A limit that cannot be set is recorded in ``errors`` (the caller decides whether
    that refuses the launch); a group is created only for limits that are set.
    """
    wanted = {name for name, value in (("memory", memory), ("processes", processes), ("cpu", cpu)) if value}
    result = SessionCgroups(version=None)
    if not wanted:
        return result
    root, own = _mount_root(), _own_groups()
    name = CGROUP_PREFIX + session_id
    controllers = {"memory": "memory", "processes": "pids", "cpu": "cpu"}
    v2 = _v2_base(root, own, {controllers[limit] for limit in wanted})
    try:
        if v2 is not None:
            group = v2 / name
            group.mkdir()
            result.version, result.paths = "cgroup2", [group]
            if memory:
                _write(group / "memory.max", str(memory))
                with contextlib.suppress(OSError):
                    _write(group / "memory.swap.max", "0")
            if processes:
                _write(group / "pids.max", str(processes))
            if cpu:
                _write(group / "cpu.max", f"{int(cpu * 100_000)} 100000")
            result.by_limit = dict.fromkeys(wanted, group)
            return result
    except OSError as exc:
        remove_group(result.paths[0]) if result.paths else None
        result = SessionCgroups(version=None)
        for limit in wanted:
            result.errors[limit] = f"cgroup v2 group could not be set up: {exc.strerror or exc}"
        return result
    for limit in sorted(wanted):
        controller = controllers[limit]
        if controller not in own:
            result.errors[limit] = f"this process is in no {controller} cgroup (v1) and v2 does not delegate it"
            continue
        base = root / controller / own[controller].lstrip("/")
        if not _writable_dir(base):
            result.errors[limit] = f"the {controller} cgroup {str(base)!r} is missing or not writable"
            continue
        group = base / name
        try:
            group.mkdir(exist_ok=True)
            if group not in result.paths:
                result.paths.append(group)
            if limit == "memory":
                _write(group / "memory.limit_in_bytes", str(memory))
                with contextlib.suppress(OSError):  # swap accounting may be off
                    _write(group / "memory.memsw.limit_in_bytes", str(memory))
            elif limit == "processes":
                assert processes is not None
                # The cell's processes live in a nested group capped at `processes`; the session's
                # own helpers (server, relay) keep PIDS_HEADROOM more to report the hit and recover.
                _write(group / "pids.max", str(processes + PIDS_HEADROOM))
                cells = group / "cells"
                cells.mkdir(exist_ok=True)
                _write(cells / "pids.max", str(processes))
                result.cells = cells
            else:
                assert cpu is not None
                _write(group / "cpu.cfs_period_us", "100000")
                _write(group / "cpu.cfs_quota_us", str(int(cpu * 100_000)))
            result.by_limit[limit] = group
            result.version = "cgroup1"
        except OSError as exc:
            result.errors[limit] = f"the {controller} cgroup could not be set up: {exc.strerror or exc}"
    # CPU accounting for "did the cell leave work running" (cpuacct is often a separate v1 hierarchy).
    if result.version == "cgroup1" and "cpuacct" in own:
        base = root / "cpuacct" / own["cpuacct"].lstrip("/")
        if _writable_dir(base) and not (base / name).exists():
            with contextlib.suppress(OSError):
                (base / name).mkdir()
                result.paths.append(base / name)
    return result


def remove_group(group: Path, *, kill: bool = True, attempts: int = 100) -> bool:
    """Kill what is left in ``group`` (only ever a session's own group) and remove it."""
    with contextlib.suppress(OSError):
        for child in group.iterdir():
            if child.is_dir() and not child.is_symlink():
                remove_group(child, kill=kill, attempts=attempts)
    for _ in range(attempts):
        pids = _procs(group)
        if kill:
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        try:
            group.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError:
            time.sleep(0.01)
    return False


def stale_groups(session_ids_alive: set[str], min_age: float = 60.0) -> Iterator[Path]:
    """This process's hierarchies' ``console-bridge-*`` child groups whose session is not alive."""
    root, own = _mount_root(), _own_groups()
    bases: set[Path] = set()
    for controller, path in own.items():
        if controller in (*_V1, "cpuacct"):
            bases.add(root / controller / path.lstrip("/"))
        elif controller == "":
            bases.update({root / path.lstrip("/"), root / "unified" / path.lstrip("/")})
    for base in bases:
        with contextlib.suppress(OSError):
            for child in base.iterdir():
                if child.name.startswith(CGROUP_PREFIX) and child.name[len(CGROUP_PREFIX) :] not in session_ids_alive:
                    with contextlib.suppress(OSError):
                        # a group being born (its supervisor not joined yet) is young: leave it
                        if time.time() - child.stat().st_mtime > min_age:
                            yield child
