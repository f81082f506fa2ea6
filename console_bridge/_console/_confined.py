"""The host side of one console session's confinement: its private folder and registry
entry, its limits, its deny list, the start-time probe, limit hits, and files in and out.

The mechanisms live in ``console_bridge/_confinement`` (which knows processes and the OS,
not MCP); this module ties them to a console session.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import platformdirs
import psutil

from console_bridge._confinement import _remask_host as remask_host
from console_bridge._confinement._deny import deny_paths, expand_deny, secret_folders, secret_names
from console_bridge._confinement._disk import FolderUsage, WriteWatch, kill_cells
from console_bridge._confinement._idmap import IdRange, session_ids, session_mapping
from console_bridge._confinement._limits import Limits, Mechanism
from console_bridge._confinement._path_shim import cached_shim
from console_bridge._confinement._plan import Confinement, Supervision, plan_confinement
from console_bridge._confinement._recording_cap import RecordingCap
from console_bridge._confinement._registry import SessionEntry, bridge_cache_dir, r_hooks_dir, register, state_dir
from console_bridge._confinement._shared_roots import Names, RootHold, placeholders
from console_bridge._confinement._view import View, build_view
from console_bridge._console._adopted_worker import AdoptedWorker
from console_bridge._console._limit_text import fork_refused, limit_text, out_of_memory
from console_bridge._results import CellFailure
from console_bridge._vetting._environments import session_environments
from console_bridge._vetting._probe import StartProbe

__all__ = ["SessionConfinement"]


class SessionConfinement:
    """One session's private folder, limits, deny list and probe."""

    def __init__(self, *, limits: Limits, deny_read: tuple[str, ...], workspace: Path) -> None:
        self.limits = limits
        self.deny_read = deny_read
        self.workspace = workspace
        self.entry: SessionEntry | None = None
        self.confinement: Confinement | None = None
        self.deny: list[str] = []
        self.view: View | None = None
        self.ids: IdRange | None = None  # root's sessions: the host ids they take a block from
        self.probe = StartProbe()
        self._tmp_was_full = False
        self._counters: dict[str, int] = {}
        self._tasks_seen = 0  # the session's tasks when the last cell ended (see limit_hit)
        self.worker = AdoptedWorker()
        self._r_profile: Path | None = None
        self._tmp_fd: int | None = None
        self.watch: WriteWatch | None = None  # the writes limit and /dev/shm's cap (see _confinement._disk)
        self.recording_cap: RecordingCap | None = None
        self._watch_hits: dict[str, int] = {}
        self._shm_hit = False
        self._memory_stopped = False  # the memory watch stopped the last cell (else the RLIMIT_AS backstop)
        self._shm_full = False  # the sandbox's /dev, capped by the kernel, became full in the last cell
        self.roots: RootHold | None = None  # the writable folders' names mcp-console mounts over
        self.remasker: remask_host.RemaskHelper | None = None  # held from the supervision to the release

    # ------------------------------------------------------------------ start
    def prepare(self, *, owner: str, profile: str, recording_base: Path, writable: bool = True) -> None:
        """Register the session and create its groups (blocking; run in a thread). ``writable``:
        cells may write host folders (the workspace or writable roots)."""
        self.entry = register(
            owner=owner, workspace=str(self.workspace), profile=profile, recording_base=str(recording_base)
        )
        try:
            self.confinement = plan_confinement(self.limits, self.entry.id, writable=writable)
            # Root's sessions: the range of unprivileged host ids they run as, checked free.
            self.ids = session_ids() if self.confinement.host.namespace_mode == "mapped" else None
        except BaseException:
            self.release()
            raise
        self.entry.cgroups = [str(path) for path in self.confinement.cgroups.paths]
        self.entry.limits = {
            name: report.as_dict()["enforced_by"]  # the plain string, as the entry's JSON holds it
            for name, report in self.confinement.reports.items()
            if report.value is not None
        }
        self.entry.save()

    def supervision(
        self,
        *,
        recording_base: Path,
        python: Path,
        binary: Path,
        languages: tuple[str, ...],
        workspace_writable: bool,
        writable_roots: list[Path],
        read_roots: list[Path],
        search_path: str | None = None,
        protected: list[tuple[Path, Names]] | None = None,
    ) -> Supervision:
        """Build the session's view and deny list; what the supervisor gets (blocking).
        ``protected``: each writable folder and the names mcp-console mounts over in it, made first
        and kept while any session uses the folder (``_confinement._shared_roots``)."""
        assert self.entry is not None and self.confinement is not None
        self.cache_dir.mkdir(mode=0o700, exist_ok=True)
        writable = [*([self.workspace] if workspace_writable else []), *writable_roots]
        # A name reached through a symlinked folder is hidden where it really is, too (the view binds both).
        hidden = _with_real(secret_names(self.workspace, self.deny_read))
        if protected:
            self.roots = RootHold(state_dir() / "roots")
            self.roots.acquire(protected)
        # A hidden name missing in a writable folder is held by the bridge's own placeholder, masked
        # from the start: no cell makes it and keeps it open for what the host writes there later.
        held = placeholders(hidden, writable, secret_folders())
        if held:
            self.roots = self.roots or RootHold(state_dir() / "roots")
            self.roots.acquire((), held)
        self.plant_early()
        if "r" in languages:
            self._r_profile = r_hooks_dir() / f"{self.entry.id}.Rprofile"
            fd = os.open(self._r_profile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
            os.close(fd)
        self.view = build_view(
            root=self.entry.path / "view",
            workspace=self.workspace,
            workspace_writable=workspace_writable,
            writable_roots=writable_roots,
            read_roots=read_roots,
            environments=session_environments(python, binary, languages),
            recording_base=recording_base,
            files=[(self._r_profile, "the R outcome hook")] if self._r_profile is not None else [],
            server_dirs=[(self.cache_dir, "mcp-console's cache, private to this session")],
            tmpdir=self.entry.tmpdir,
            tmpdir_size=self.confinement.tmpfs_size,
            home=Path.home(),
            masks=[
                *_with_real([expand_deny(item, self.workspace) for item in self.deny_read]),
                *(str(Path(root) / step) for root, step, _ in held),
            ],
            hidden=hidden,
            # R not asked for: mcp-console would discover it through PATH at every start (seconds)
            search_path=search_path,
            hide_commands=() if "r" in languages else ("R", "Rscript"),
        )
        if self.view.hidden_commands:
            shim = cached_shim(bridge_cache_dir(), self.view.path_dirs, self.view.hidden_commands)
            if shim is not None:
                self.view = dataclasses.replace(self.view, shim_source=str(shim))
        default_recordings = Path(platformdirs.user_data_dir("console-bridge"))
        denied = deny_paths(
            workspace=self.workspace,
            state_dir=state_dir(),
            recording_roots=[recording_base, default_recordings],
            extra=self.deny_read,
        )
        # mcp-console's own rules deny what must stay hidden inside the view (the workspace's .git,
        # the recordings the server writes, /etc/shadow); what is outside the view has no name at all.
        inside = [path for path in denied if self.view.contains(path)]
        base = str(recording_base)
        if not any(base == path or base.startswith(path + os.sep) for path in inside):
            inside.append(base)
        self.deny = inside
        plan = self.view.plan()
        watch = plan.get("watch")
        if watch is not None and (watch["names"] or watch["etc"]) and self.remasker is None:
            # the host process's shared remasker (one inotify instance for all its sessions)
            self.remasker = remask_host.acquire()
        if watch is not None and self.remasker is not None:
            watch["helper"] = self.remasker.path
        if self.ids is not None:
            plan["ids"] = self.ids.config()
        self._books(recording_base, writable)
        holds = tuple(self.roots.locks) if self.roots is not None else ()
        return Supervision(self.confinement, self.entry.tmpdir, (self.entry.path,), plan, holds)

    def _books(self, recording_base: Path, writable: list[Path]) -> None:
        """The disk limits' bookkeeping: the writes baseline (a walk of the writable folders, before
        any cell) and the recording's total (see ``_confinement._disk``)."""
        assert self.confinement is not None and self.entry is not None
        reports = self.confinement.reports
        writes = reports["writes"].value if reports["writes"].enforced_by == Mechanism.ACCOUNTING else None
        files = reports["files"].value if reports["files"].enforced_by == Mechanism.ACCOUNTING else None
        counted = writes is not None or files is not None
        watched = reports["memory"].enforced_by == Mechanism.WATCHED
        usage = FolderUsage(writable, exclude=[recording_base, self.entry.path]) if writable and counted else None
        self.watch = WriteWatch(
            usage,
            int(writes) if writes is not None else None,
            shm_limit=self.confinement.tmpfs_size,
            worker_pid=lambda: self.worker.pid,
            stop_cells=self.stop_cells,
            activity=self._cpu_counter,
            own_tmpfs=[str(self.entry.tmpdir)],
            memory_limit=int(reports["memory"].value or 0) if watched else None,
            count_tasks=reports["processes"].enforced_by == Mechanism.USERNS_RLIMIT,
            files_limit=int(files) if files is not None else None,
        )
        recording = reports["recording"].value
        self.recording_cap = RecordingCap(int(recording)) if recording is not None else None

    def _cpu_counter(self) -> int | None:
        """The session tree's CPU time from its group (the group of the moment: a systemd scope's once
        adopted); None where no group counts it. The write watch skips its idle looks while it stands."""
        return self.confinement.cgroups.cpu_counter() if self.confinement is not None else None

    def stop_cells(self, with_worker: bool = True) -> None:
        """Kill what the cells run (see ``kill_cells``); called from the write watcher's thread."""
        worker = self.worker.process
        if worker is not None:
            kill_cells(worker, with_worker=with_worker)

    def path_env(self) -> dict[str, str]:
        """``{"PATH": ...}`` when the view hides commands from the server's PATH, else nothing."""
        path = self.view.search_path if self.view is not None else None
        return {"PATH": path} if path is not None else {}

    @property
    def cache_dir(self) -> Path:
        """mcp-console's cache for this session (``MCP_CONSOLE_CACHE_DIR``), removed with the session."""
        assert self.entry is not None
        return self.entry.path / "cache"

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
        if self.confinement is not None:
            # (the scope's group is systemd's: not listed for the sweep, systemd removes it)
            self.confinement.adopt_scope(supervisor_pid)
        with contextlib.suppress(psutil.Error):
            self.entry.supervisor_started = psutil.Process(supervisor_pid).create_time()
        self.entry.recording_base = str(recording_base)
        with contextlib.suppress(OSError):
            self.entry.save()
        if self.watch is not None:
            self.watch.start()

    def id_mapping(self) -> dict[str, object] | None:
        """How the session's ids map to the host's (``status().extra["ids"]``): its server's uid and gid
        maps; for root's sessions also the range their blocks come from."""
        mapping = session_mapping(self.entry.server_pid if self.entry is not None else None)
        if mapping is not None and self.ids is not None:
            mapping["range"] = self.ids.text()
        return mapping

    def note_recording(self, path: Path | None) -> None:
        if self.entry is not None and path is not None and self.entry.recording != str(path):
            self.entry.recording = str(path)
            with contextlib.suppress(OSError):
                self.entry.save()

    # ------------------------------------------------------------------ probe
    def plant_early(self) -> None:
        """Before the server starts: the canary the probe later replaces by rename (``_probe``)."""
        assert self.entry is not None
        self.probe.plant_early(self.entry.path)

    def probe_cell(self, recording_base: Path, writable_workspace: bool, language: str) -> str:
        """Plant the probe's canaries and return its cell (blocking; see ``StartProbe.cell``)."""
        assert self.entry is not None
        return self.probe.cell(
            private=self.entry.path,
            recording_base=recording_base,
            workspace=self.workspace,
            writable_workspace=writable_workspace,
            deny=self.deny,
            language=language,
        )

    def check_probe(self, text: str, *, server: str, pid: int | None) -> int:
        """Raise SandboxMismatch unless the probe ran and every attempt failed; return the count."""
        return self.probe.check(text, server=server, pid=pid)

    # ----------------------------------------------------------------- limits
    def reports(self) -> dict[str, dict[str, Any]]:
        reports = self.confinement.report_dict() if self.confinement is not None else {}
        if self.worker.dev_capped and "tmpdir" in reports:
            reports["tmpdir"]["note"] = (
                "a size-capped tmpfs in the session's view; /dev/shm in the sandbox: the same cap, as the size of "
                "the sandbox's /dev tmpfs (remounted when the worker started)"
            )
        view = self.view
        if view is not None and (view.hidden or view.hidden_tree):
            tree = view.hidden_tree and f", and every entry of {view.hidden_tree} not everyone may read, at any depth"
            reports["hidden_names"] = {
                "value": len(view.hidden),
                "enforced_by": Mechanism.WATCHED.value,
                "note": (
                    f"{len(view.hidden)} names hidden inside the view (the workspace's .git, deny_read, credential "
                    f"stores){tree}: masked at start and again, within milliseconds, when the host renames, "
                    "recreates or creates them (a watch-and-remask: a read in that moment can still get through)"
                ),
            }
        return reports

    def mark(self) -> None:
        """Before a cell: remember the limit counters; put a new worker under the process limit;
        let the server's raw output grow only as far as the recording's total allows."""
        self._counters = self._read_counters()
        if self._adopts():
            self._place_worker()
        if self.watch is not None:
            self._watch_hits = dict(self.watch.hits)
            self.watch.set_running(True)
        if self.recording_cap is not None and self.entry is not None and self.entry.recording:
            self.recording_cap.before_cell(Path(self.entry.recording), self.entry.server_pid)

    def _adopts(self) -> bool:
        """Does this session adopt its worker (a cells group, rlimits to set on it, a write watch)?"""
        return self.confinement is not None and (
            self.confinement.cgroups.cells is not None
            or "fsize" in self.confinement.rlimits
            or "nproc" in self.confinement.child_rlimits
            or self.watch is not None
        )

    def adopt_early(self) -> bool:
        """While the probe boots the worker: adopt it once it exists, so its cgroup move (12-17 ms
        on cgroup v1) is off the first cell's path. True when there is nothing (more) to do."""
        if not self._adopts():
            return True
        self._place_worker()
        return self.worker.process is not None

    def _place_worker(self) -> None:
        if self.confinement is not None:
            self.worker.place(self.entry.supervisor_pid if self.entry is not None else None, self.confinement)

    def _read_counters(self) -> dict[str, int]:
        return self.confinement.cgroups.counters() if self.confinement is not None else {}

    def limit_hit(self, error: CellFailure | None = None) -> str | None:
        """The limit the cell since :meth:`mark` ran into, if any: kernel counters where a cgroup holds
        the limit, the TMPDIR's free space; where only an rlimit holds one, the session tree's size
        (processes) and the failure the worker reported (``MemoryError``, a fork refused)."""
        if self.confinement is None:
            return None
        cut = self.recording_cap is not None and self.recording_cap.after_cell(self._recording_path())
        disk = self._disk_hit()
        now = self._read_counters()
        before, self._counters = self._counters, now
        for name in ("memory", "processes"):
            if now.get(name, 0) > before.get(name, 0):
                return name
        if self.confinement.tmpfs_size is not None and self._tmpfs_filled():
            return "tmpdir"
        if self.confinement.mechanism("processes") == Mechanism.USERNS_RLIMIT:
            limit = self.confinement.reports["processes"].value
            # The kernel refuses at `limit` tasks of the namespace (a few may have ended since). Only
            # a cell that took the count there ran into it: children a cell never waited for stay as
            # zombies and still count, and a later cell that starts nothing has not hit anything.
            supervisor = self.entry.supervisor_pid if self.entry is not None else None
            tasks, tasks_before = self.worker.namespace_tasks(supervisor), self._tasks_seen
            self._tasks_seen = tasks
            # ... or took it there while it ran (a bomb that caught its EAGAIN and reaped its children):
            # the watch's peak of the sandbox's tasks, the server's and its helpers' beside them
            peak = self.watch.tasks_peak if self.watch is not None else 0
            if isinstance(limit, int) and (
                (tasks >= limit - 8 and tasks > tasks_before)
                or (peak >= limit - 8 and peak > tasks_before)  # (children left from before are not this cell's)
                or fork_refused(error)
            ):
                return "processes"
        if self.confinement.mechanism("memory") == Mechanism.WATCHED and error is not None and out_of_memory(error):
            return "memory"  # (the RLIMIT_AS backstop refused an allocation before the watch saw it)
        if disk is not None:
            return disk
        return "recording" if cut else None

    def _recording_path(self) -> Path | None:
        return Path(self.entry.recording) if self.entry is not None and self.entry.recording else None

    def _disk_hit(self) -> str | None:
        """Did the cell overdraw the writes limit or /dev/shm's cap (the watcher stopped it, or it
        ended between two looks: one more look, a walk only when a file system lost space)?"""
        watch = self.watch
        if watch is None:
            return None
        watch.set_running(False)
        watch.check(only_if_grown=True)
        before, self._watch_hits = self._watch_hits, dict(watch.hits)
        self._shm_hit = watch.hits["shm"] > before.get("shm", 0)
        self._shm_full = watch.hits["shm_full"] > before.get("shm_full", 0)
        self._memory_stopped = watch.hits["memory"] > before.get("memory", 0)
        if self._memory_stopped:
            return "memory"
        if watch.hits["writes"] > before.get("writes", 0):
            return "writes"
        if watch.hits["files"] > before.get("files", 0):
            return "files"
        return "tmpdir" if self._shm_hit or self._shm_full else None

    def _tree_cpu_seconds(self) -> float:
        """CPU time the session's processes used so far (where no cgroup counts it)."""
        if self.entry is None or self.entry.supervisor_pid is None:
            return 0.0
        total = 0.0
        with contextlib.suppress(psutil.Error):
            for proc in psutil.Process(self.entry.supervisor_pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    times = proc.cpu_times()
                    total += times.user + times.system
        return total

    def limit_message(self, name: str) -> str:
        report = self.confinement.reports[name] if self.confinement is not None else None
        value = report.value if report is not None else None
        mechanism = report.enforced_by if report is not None else None
        if name == "memory" and mechanism == Mechanism.WATCHED and not self._memory_stopped:
            mechanism = Mechanism.RLIMIT  # the RLIMIT_AS backstop refused an allocation before the watch saw it
        return limit_text(name, mechanism, value, shm="full" if self._shm_full else self._shm_hit)

    def _tmpfs_filled(self) -> bool:
        """The TMPDIR became full during this cell (a full TMPDIR left from before is not this cell's hit)."""
        full = self._tmpfs_full()
        before, self._tmp_was_full = self._tmp_was_full, full
        return full and not before

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

    def cpu_busy(self, window: float = 0.5) -> Callable[[], Awaitable[bool]] | None:
        """An async check: did the session tree use more than 10% of a CPU over ``window`` seconds?"""
        groups = self.confinement.cgroups if self.confinement is not None else None
        if groups is None:
            return None
        if groups.cpu_usage_ns() is None:  # no cgroup counts it: add up the tree's processes (psutil)

            def usage() -> float:
                return self._tree_cpu_seconds()
        else:

            def usage() -> float:
                return (groups.cpu_usage_ns() or 0) / 1e9

        async def check() -> bool:
            import anyio

            first = await anyio.to_thread.run_sync(usage)
            await anyio.sleep(window)
            # 10%: a leftover busy loop gets more than that of a CPU even on a host loaded several
            # times over; an idle worker and the server answering the interrupt use far less.
            return await anyio.to_thread.run_sync(usage) - first > 0.1 * window

        return check

    def _viewer(self) -> int | None:
        """The pid through whose root the host sees the session's view (the server's)."""
        if self.entry is None:
            return None
        return self.entry.server_pid or None

    def tmp_view(self) -> Path:
        """The TMPDIR as the session's processes see it (through the server's mount namespace)."""
        assert self.entry is not None
        pid = self._viewer()
        if pid is None:
            return self.entry.tmpdir
        return Path(f"/proc/{pid}/root{self.entry.tmpdir}")

    def write_r_profile(self, text: str) -> Path:
        """The R outcome hook's profile file, readable by the sandboxed worker (in the view, read-only)."""
        assert self.entry is not None
        path = self._r_profile or r_hooks_dir() / f"{self.entry.id}.Rprofile"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        self._r_profile = path
        return path

    # ---------------------------------------------------------- files in/out
    def open_tmp_root(self) -> int | None:
        """An fd of the TMPDIR as the session's processes see it (inside the server's view)."""
        if self.entry is None or self._viewer() is None:
            return None
        try:
            return os.open(str(self.tmp_view()), os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            return None

    def usage_sources(self) -> tuple[list[Path], int | None]:
        """(the session's cgroup folders, the supervisor's pid): where its usage can be read (read-only)."""
        paths = list(self.confinement.cgroups.paths) if self.confinement is not None else []
        return paths, self.entry.supervisor_pid if self.entry is not None else None

    def writes_bytes(self) -> int | None:
        """Net bytes the session added to its writable folders (as of the watcher's last look), or None."""
        watch = self.watch
        return watch.added if watch is not None and watch.usage is not None else None

    def tmpdir_bytes(self) -> int | None:
        """Bytes in use in the session's TMPDIR, where it is a tmpfs of its own (read-only; else None)."""
        if self.confinement is None or self.confinement.tmpfs_size is None:
            return None
        if self._tmp_fd is None:
            self._tmp_fd = self.open_tmp_root()
            if self._tmp_fd is None:
                return None
        try:
            info = os.fstatvfs(self._tmp_fd)
        except OSError:
            return None
        return (info.f_blocks - info.f_bfree) * info.f_frsize

    # ------------------------------------------------------------------- end
    def release(self) -> None:
        """After the supervisor ended: remove what it could not (folder, groups). Blocking."""
        self.probe.clear()
        if self._r_profile is not None:
            with contextlib.suppress(OSError):
                self._r_profile.unlink()
        if self._tmp_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._tmp_fd)
            self._tmp_fd = None
        if self.watch is not None:
            self.watch.close()
        if self.recording_cap is not None:
            self.recording_cap.close()
        self.worker.forget()
        if self.entry is not None:
            with contextlib.suppress(OSError):
                if self.entry.path.exists():
                    shutil.rmtree(self.entry.path, ignore_errors=True)
        if self.confinement is not None:
            self.confinement.release()
        if self.roots is not None:
            self.roots.release()
        if self.remasker is not None:
            remask_host.release(self.remasker)
            self.remasker = None


def _with_real(paths: list[str]) -> list[str]:
    """``paths`` and, for each reached through a symlinked folder, the path it really is (a symlink at
    the name itself is masked as it is, never where it points)."""
    real = (os.path.join(os.path.realpath(os.path.dirname(given)), os.path.basename(given)) for given in paths)
    return list(dict.fromkeys([*paths, *real]))
