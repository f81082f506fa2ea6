"""The host side of one console session's confinement: its private folder and registry
entry, its limits, its deny list, the start-time probe, limit hits, and files in and out.

The mechanisms live in ``console_bridge/_confinement`` (which knows processes and the OS,
not MCP); this module ties them to a console session.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import platformdirs
import psutil

from console_bridge._confinement._deny import deny_paths, parse_probe, probe_code_for
from console_bridge._confinement._limits import Limits
from console_bridge._confinement._plan import Confinement, Supervision, plan_confinement
from console_bridge._confinement._registry import SessionEntry, r_hooks_dir, register, state_dir
from console_bridge._errors import NotAllowed, SandboxMismatch

__all__ = ["SessionConfinement"]

_CANARY = "console-bridge-canary"
_LIMIT_TEXT = {
    "memory": "the session's memory limit ({value}); the worker was killed and its state is lost",
    "processes": "the session's process limit ({value} tasks); starting more processes or threads failed",
    "tmpdir": "the TMPDIR size limit ({value}); writing more failed with 'No space left on device'",
}


def _human(value: int | float | None) -> str:
    if isinstance(value, int) and value >= 1024:
        for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
            if value >= size:
                return f"{value / size:g} {unit}"
    return str(value)


class SessionConfinement:
    """One session's private folder, limits, deny list and probe."""

    def __init__(self, *, limits: Limits, deny_read: tuple[str, ...], workspace: Path) -> None:
        self.limits = limits
        self.deny_read = deny_read
        self.workspace = workspace
        self.entry: SessionEntry | None = None
        self.confinement: Confinement | None = None
        self.deny: list[str] = []
        self._canaries: list[Path] = []
        self._counters: dict[str, int] = {}
        self._worker: psutil.Process | None = None
        self._r_profile: Path | None = None
        self._tmp_fd: int | None = None

    # ------------------------------------------------------------------ start
    def prepare(self, *, owner: str, profile: str, recording_base: Path) -> Supervision:
        """Register the session, create its groups, compute the deny list (blocking; run in a thread)."""
        self.entry = register(
            owner=owner, workspace=str(self.workspace), profile=profile, recording_base=str(recording_base)
        )
        try:
            self.confinement = plan_confinement(self.limits, self.entry.id)
        except BaseException:
            self.release()
            raise
        self.entry.cgroups = [str(path) for path in self.confinement.cgroups.paths]
        self.entry.save()
        default_recordings = Path(platformdirs.user_data_dir("console-bridge"))
        self.deny = deny_paths(
            workspace=self.workspace,
            state_dir=state_dir(),
            recording_roots=[recording_base, default_recordings],
            extra=self.deny_read,
        )
        return Supervision(self.confinement, self.entry.tmpdir, (self.entry.path,))

    @property
    def tmpdir(self) -> Path:
        assert self.entry is not None
        return self.entry.tmpdir

    def attach(self, supervisor_pid: int, recording_base: Path, *, server_pid: int | None = None) -> None:
        """Record the supervisor and the server in the registry entry (``console-bridge ps`` shows them)."""
        if self.entry is None:
            return
        self.entry.supervisor_pid = supervisor_pid
        self.entry.server_pid = server_pid
        with contextlib.suppress(psutil.Error):
            self.entry.supervisor_started = psutil.Process(supervisor_pid).create_time()
        self.entry.recording_base = str(recording_base)
        with contextlib.suppress(OSError):
            self.entry.save()

    def note_recording(self, path: Path | None) -> None:
        if self.entry is not None and path is not None and self.entry.recording != str(path):
            self.entry.recording = str(path)
            with contextlib.suppress(OSError):
                self.entry.save()

    # ------------------------------------------------------------------ probe
    def _plant(self, folder: Path) -> Path | None:
        """A canary file in one of the bridge's own denied folders."""
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f".{_CANARY}-{os.getpid()}-{time.monotonic_ns()}"
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            os.write(fd, b"console-bridge canary: a cell must never read this\n")
            os.close(fd)
        except OSError:
            return None
        self._canaries.append(path)
        return path

    def probe_cell(self, recording_base: Path, writable_workspace: bool, language: str) -> str:
        """Plant canaries and return the Python probe cell (blocking)."""
        assert self.entry is not None
        reads: list[str] = []
        for item in (self.entry.path, recording_base):
            canary = self._plant(item)
            if canary is not None:
                reads.append(str(canary))
        reads += [path for path in self.deny if os.path.lexists(path)]
        writes = [str(self.entry.path / f"{_CANARY}-write"), str(recording_base / f"{_CANARY}-write")]
        if not writable_workspace:
            writes.append(str(self.workspace / f".{_CANARY}-write"))
        return probe_code_for(language, list(dict.fromkeys(reads)), writes)

    def check_probe(self, text: str, *, server: str, pid: int | None) -> int:
        """Raise SandboxMismatch unless the probe ran and every attempt failed; return the count."""
        for canary in self._canaries:
            with contextlib.suppress(OSError):
                canary.unlink()
        self._canaries.clear()
        result = parse_probe(text)
        if result is None:
            raise SandboxMismatch(
                "the confinement probe did not report (its output was: "
                f"{text[:300]!r}); the deny rules cannot be proven, so the bridge fails closed. The server was "
                "stopped before any user cell.",
                server=server,
                pid=pid,
            )
        if result.readable or result.writable:
            raise SandboxMismatch(
                "the sandbox does not hold what the bridge asked for: a probe cell could read "
                f"{result.readable or 'nothing denied'} and write {result.writable or 'nothing outside its set'}. "
                "The server was stopped before any user cell; check the mcp-console version and any project "
                "config.",
                server=server,
                pid=pid,
                details={"readable": result.readable, "writable": result.writable},
            )
        return result.checked

    # ----------------------------------------------------------------- limits
    def reports(self) -> dict[str, dict[str, Any]]:
        return self.confinement.report_dict() if self.confinement is not None else {}

    def mark(self) -> None:
        """Before a cell: remember the limit counters; put a new worker under the process limit."""
        self._counters = self._read_counters()
        if self.confinement is not None and (
            self.confinement.cgroups.cells is not None or "fsize" in self.confinement.rlimits
        ):
            self._place_worker()

    def _place_worker(self) -> None:
        """Adopt a (new) worker process: move it into the nested process-limit group, and lift
        the recording's RLIMIT_FSIZE (meant for the server's raw logs) off it, so cells may
        write large files to TMPDIR and the workspace. One stat per cell while the worker
        lives; a walk of the session's tree only when it changed."""
        worker = self._worker
        if worker is not None:
            with contextlib.suppress(psutil.Error):
                if worker.is_running():
                    return
        self._worker = None
        if self.entry is None or self.entry.supervisor_pid is None or self.confinement is None:
            return
        try:
            tree = psutil.Process(self.entry.supervisor_pid).children(recursive=True)
        except psutil.Error:
            return
        for proc in tree:
            with contextlib.suppress(psutil.Error):
                argv = proc.cmdline()
                if len(argv) > 1 and argv[1] == "worker" and os.path.basename(argv[0]) == "mcp-console":
                    if "fsize" in self.confinement.rlimits:
                        _, hard = proc.rlimit(psutil.RLIMIT_FSIZE)
                        proc.rlimit(psutil.RLIMIT_FSIZE, (hard, hard))
                    if self.confinement.cgroups.cells is None or self.confinement.cgroups.move_worker(proc.pid):
                        self._worker = proc
                    return

    def _read_counters(self) -> dict[str, int]:
        return self.confinement.cgroups.counters() if self.confinement is not None else {}

    def limit_hit(self) -> str | None:
        """The limit the cell since :meth:`mark` ran into, if any (kernel counters and the TMPDIR's
        free space, never the cell's text)."""
        if self.confinement is None:
            return None
        now = self._read_counters()
        before, self._counters = self._counters, now
        for name in ("memory", "processes"):
            if now.get(name, 0) > before.get(name, 0):
                return name
        if self.confinement.tmpfs_size is not None and self._tmpfs_full():
            return "tmpdir"
        return None

    def limit_message(self, name: str) -> str:
        value = self.confinement.reports[name].value if self.confinement is not None else None
        return _LIMIT_TEXT[name].format(value=_human(value))

    def _tmpfs_full(self) -> bool:
        if self._tmp_fd is None:  # kept open: checked after every cell (released with the session)
            self._tmp_fd = self.open_tmp_root()
            if self._tmp_fd is None:
                return False
        try:
            info = os.fstatvfs(self._tmp_fd)
        except OSError:
            return False
        return info.f_bavail * info.f_frsize < 1 << 20

    def cpu_busy(self, window: float = 0.3) -> Callable[[], Awaitable[bool]] | None:
        """An async check: did the session tree use more than 20% of a CPU over ``window`` seconds?"""
        groups = self.confinement.cgroups if self.confinement is not None else None
        if groups is None or groups.cpu_usage_ns() is None:
            return None

        async def check() -> bool:
            import anyio

            first = groups.cpu_usage_ns() or 0
            await anyio.sleep(window)
            return ((groups.cpu_usage_ns() or 0) - first) / 1e9 > 0.2 * window

        return check

    def tmp_view(self) -> Path:
        """The TMPDIR as the session's processes see it (through the supervisor's mount namespace)."""
        assert self.entry is not None
        if self.entry.supervisor_pid is None:
            return self.entry.tmpdir
        return Path(f"/proc/{self.entry.supervisor_pid}/root{self.entry.tmpdir}")

    def write_r_profile(self, text: str) -> Path:
        """The R outcome hook's profile file, readable by the sandboxed worker (not in a denied folder)."""
        assert self.entry is not None
        folder = r_hooks_dir()
        path = folder / f"{self.entry.id}.Rprofile"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        self._r_profile = path
        return path

    # ---------------------------------------------------------- files in/out
    def open_tmp_root(self) -> int | None:
        """An fd of the TMPDIR as the session's processes see it (inside the supervisor's mounts)."""
        if self.entry is None or self.entry.supervisor_pid is None:
            return None
        try:
            return os.open(
                f"/proc/{self.entry.supervisor_pid}/root{self.entry.tmpdir}", os.O_RDONLY | os.O_DIRECTORY
            )
        except OSError:
            return None

    def _data_dir(self) -> tuple[int, str]:
        """(fd of the cell's TMPDIR, the path cells use for it). mcp-console gives each worker
        ``<TMPDIR>/sandbox-XXXX/data``."""
        root = self.open_tmp_root()
        if root is None:
            raise NotAllowed("the session's TMPDIR is not available (the console is not running)")
        try:
            candidates = []
            for name in os.listdir(root):
                if not name.startswith("sandbox-"):
                    continue
                with contextlib.suppress(OSError):
                    info = os.stat(name, dir_fd=root, follow_symlinks=False)
                    if stat.S_ISDIR(info.st_mode):
                        candidates.append((info.st_mtime, name))
            if not candidates:
                raise NotAllowed("the session's worker has not started yet; run a cell first")
            name = max(candidates)[1]
            sandbox = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=root)
            try:
                data = os.open("data", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=sandbox)
            finally:
                os.close(sandbox)
        finally:
            os.close(root)
        return data, str(self.tmpdir / name / "data")

    def put_file(self, name: str, data: bytes) -> str:
        from console_bridge._hostfs import write_file

        fd, cell_path = self._data_dir()
        try:
            write_file(fd, name, data)
        finally:
            os.close(fd)
        return f"{cell_path}/{name}"

    def get_file(self, name: str, max_bytes: int) -> bytes:
        from console_bridge._hostfs import read_file

        fd, _ = self._data_dir()
        try:
            data = read_file(fd, name, max_bytes)
            return data
        finally:
            os.close(fd)

    # ------------------------------------------------------------------- end
    def release(self) -> None:
        """After the supervisor ended: remove what it could not (folder, groups). Blocking."""
        for canary in self._canaries:
            with contextlib.suppress(OSError):
                canary.unlink()
        if self._r_profile is not None:
            with contextlib.suppress(OSError):
                self._r_profile.unlink()
        if self._tmp_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._tmp_fd)
            self._tmp_fd = None
        if self.entry is not None:
            with contextlib.suppress(OSError):
                if self.entry.path.exists():
                    shutil.rmtree(self.entry.path, ignore_errors=True)
        if self.confinement is not None:
            self.confinement.release()
