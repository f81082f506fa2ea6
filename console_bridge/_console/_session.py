"""``AsyncConsole``: a verified, governed mcp-console session for one workspace.

A facade over parts, each a class with one job, none inheriting from another: the launcher
(``_launcher``: binary, version, launch arguments, verification, probe, teardown), the call path
(``_call_path``: one request, a refusal as Busy, a fresh worker around a restart), the cell loop
(``_cell_loop``: run, polling, streaming, stopping a cell past its bound), files (``_session_files``:
put/get/list, the restart carry), the worker's boot (``_worker_boot``) and the model's tool
(``_model_tool``, through the governance ``Gate``). Here: the checked options, the status, and
the public methods, each handing its work to a part.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import platformdirs

from console_bridge._cells._observe import CellObserver
from console_bridge._cells._outcome import outcome_dir_name
from console_bridge._cells._recordings import Recording, find_recording, write_sidecar
from console_bridge._confinement._limits import Limits, parse_size
from console_bridge._confinement._unconfinable import refuse_unconfinable
from console_bridge._connection._async import AsyncMcpConnection
from console_bridge._console import _values
from console_bridge._console._call_path import CallPath
from console_bridge._console._cell_loop import CellLoop, Timing
from console_bridge._console._confined import SessionConfinement
from console_bridge._console._launcher import Launcher, LaunchInputs
from console_bridge._console._model_tool import ModelTool
from console_bridge._console._session_files import SessionFiles
from console_bridge._console._status import LANGUAGES, ConsoleStatus
from console_bridge._console._usage import SessionUsage, UsageReader
from console_bridge._console._worker_boot import WorkerBoot
from console_bridge._errors import ConnectionClosed, LaunchRefused, NotAllowed
from console_bridge._governance._policy import Policy
from console_bridge._handles import NotCopyable, ToolHandle
from console_bridge._identity import Owner, check_owner, current_owner
from console_bridge._results import CellFailure, CellResult
from console_bridge._vetting._launch import check_project_config, find_r, split_args, validate_root
from console_bridge._vetting._profiles import Profile, load_profile
from console_bridge._vetting._workspace import evidence, vet_evidence, vet_recordings, vet_workspace

__all__ = ["AsyncConsole", "ConsoleStatus"]

_REFUSED_ENV_PREFIXES = ("MCP_CONSOLE_", "LD_", "DYLD_")
_REFUSED_ENV = ("TMPDIR",)


class AsyncConsole(NotCopyable):
    """A governed MCP Console session for one workspace.

    It refuses to run unless everything checks out: a qualified binary, allowlisted
    launch arguments, no project config unless ``project_config=True``, and an
    advertised sandbox exactly equal to the requested profile. Example::

        async with AsyncConsole("analysis/", profile="workspace") as console:
            result = await console.run(python="import pandas as pd; print(pd.__version__)")
            print(result.text)

    Nothing it starts outlives it: closing stops the server's process tree and
    removes the session's private ``TMPDIR``; a clean ``close()`` finalizes the
    recording.
    """

    def __init__(
        self,
        workspace: str | os.PathLike[str] = ".",
        *,
        profile: str | os.PathLike[str] = "read-only",
        writable_roots: Sequence[str | os.PathLike[str]] = (),
        read_roots: Sequence[str | os.PathLike[str]] = (),
        dependencies: Literal["deny", "allow"] = "deny",
        project_config: bool = False,
        command: str | os.PathLike[str] | None = None,
        args: Sequence[str] = (),
        python: str | os.PathLike[str] | None = None,
        languages: Sequence[str] = ("python", "sql"),
        env: Mapping[str, str] | None = None,
        poll_window: float = 30.0,
        timeout: float = 60.0,
        startup_timeout: float = 60.0,
        recordings_dir: str | os.PathLike[str] | None = None,
        owner: Owner | None = None,
        policy: Policy | None = None,
        version_timeout: float = 10.0,
        shutdown_grace: float = 3.0,
        limits: Limits | None = None,
        stream_window: float = 0.25,
        events_wait: float = 2.0,
        max_output: int | str | None = "10MiB",
    ) -> None:
        refuse_unconfinable()  # macOS, Windows, Linux without user namespaces: say so before anything else
        ws = Path(workspace).expanduser()
        if not ws.is_dir():
            raise LaunchRefused(f"workspace {os.fspath(workspace)!r} is not an existing directory; create it first")
        self.workspace = ws.resolve()
        if dependencies not in ("deny", "allow"):
            raise LaunchRefused(f"dependencies must be 'deny' or 'allow', not {dependencies!r}")
        if isinstance(languages, str) or not languages or any(lang not in LANGUAGES for lang in languages):
            raise LaunchRefused(f"languages must be a non-empty sequence drawn from {LANGUAGES}, not {languages!r}")
        bounds: dict[str, object] = {"poll_window": poll_window, "timeout": timeout, "startup_timeout": startup_timeout}
        for label, value in bounds.items():
            if not isinstance(value, int | float) or isinstance(value, bool) or not 0 < value < float("inf"):
                raise LaunchRefused(f"{label} must be a positive, finite number of seconds, not {value!r}")
        if owner is not None and not isinstance(owner, Owner):
            raise LaunchRefused("owner must be an Owner or None")
        if policy is not None and not isinstance(policy, Policy):
            raise LaunchRefused("policy must be a console_bridge.Policy or None")
        self._profile: Profile = load_profile(profile)
        vet_workspace(self.workspace, self._profile)
        if limits is not None and not isinstance(limits, Limits):
            raise LaunchRefused("limits must be a console_bridge.Limits or None (None takes the profile's limits)")
        self.limits = limits if limits is not None else self._profile.limits
        #: per cell, the bytes of output run() keeps whole (read from the recording past the per-poll window)
        self.max_output = parse_size(max_output, "max_output")
        evidence_paths = tuple(str(item.path) for item in evidence(policy))  # never readable by a cell
        self._confined = SessionConfinement(
            limits=self.limits, deny_read=(*self._profile.deny_read, *evidence_paths), workspace=self.workspace
        )
        arg_roots, self._extra_args = split_args(args)
        self._roots = list(dict.fromkeys([*arg_roots, *(validate_root(r) for r in writable_roots)]))
        if isinstance(read_roots, str | bytes):
            raise LaunchRefused("read_roots must be a sequence of folder paths, e.g. read_roots=['~/data']")
        self._read_roots = list(
            dict.fromkeys(validate_root(r, what="read root") for r in [*self._profile.read_roots, *read_roots])
        )
        self._env = dict(env or {})
        for key, value in self._env.items():
            if not isinstance(key, str) or not isinstance(value, str) or "\x00" in key + value:
                raise LaunchRefused("env must map strings to strings without NUL bytes")
            if key in _REFUSED_ENV or key.startswith(_REFUSED_ENV_PREFIXES):
                raise LaunchRefused(
                    f"env key {key!r} is controlled by the bridge (it would change the sandbox, the recordings or "
                    "the loader); remove it"
                )
        self.languages = tuple(dict.fromkeys(languages))
        if "r" in self.languages and find_r() is None:
            raise LaunchRefused(
                "languages includes 'r' but R is not installed (no `R` on PATH); install it, e.g. "
                "`apt-get install r-base-core`, or drop 'r' from languages"
            )
        self.dependencies = dependencies
        self.project_config = project_config
        self.poll_window = float(poll_window)
        self.timeout = float(timeout)
        self.startup_timeout = float(startup_timeout)
        self.version_timeout = version_timeout
        self.shutdown_grace = shutdown_grace
        self.recordings_dir = Path(recordings_dir).expanduser().absolute() if recordings_dir is not None else None
        vet_recordings(self.recordings_base, self.workspace, self._profile, self._roots)
        vet_evidence(evidence(policy), self.workspace, self._profile, self._roots)
        self.owner = owner if owner is not None else Owner("host")
        self.policy = policy if policy is not None else Policy(pin_schemas="on_change")
        check_project_config(self.workspace, project_config)
        self._recording: Recording | None = None
        self._close_reason: str | None = None
        #: observation window of run() while on_output is given (output at most this late)
        self.stream_window = float(stream_window)
        self._nonce = secrets.token_hex(8)
        self._observer = CellObserver(lambda: self.recording, self._note_recording, events_wait=float(events_wait))
        self._notices = self._observer.notices
        self._observer.limit_check = self._limit_check
        #: seconds status().usage keeps a walked figure (the recording's size, the process tree's use)
        self.usage_refresh = 2.0
        self._usage = UsageReader(
            refresh=lambda: self.usage_refresh,
            tmpdir_bytes=self._confined.tmpdir_bytes,
            writes_bytes=self._confined.writes_bytes,
            recording=lambda: self.recording,
        )
        #: a worker's boot: a fresh one ahead, its bytecode links (the launcher arms it once started)
        self._boot = WorkerBoot(
            lambda: self._confined.cache_dir,
            wanted="python" in self.languages and dependencies == "deny",
            on_fresh=self._observer.fresh,
            font_build_timeout=self.startup_timeout,  # (an environment's first start builds its font lists)
        )
        #: files in and out of the TMPDIR, and carried to a fresh worker around a restart
        self._files = SessionFiles(
            self._confined.open_tmp_root,
            lambda: self._confined.tmpdir,
            private=outcome_dir_name(self._nonce),
            notices=self._notices,
        )
        #: the one path every send takes
        self._calls = CallPath(
            self._require,
            self._observer,
            boot=self._boot,
            files=self._files,
            mark=self._confined.mark,
            recording=lambda: self.recording,
            close_reason=lambda: self._close_reason,
            poll_window=lambda: self.poll_window,
        )
        #: a cell from submission to its outcome
        self._loop = CellLoop(
            self._calls,
            self._observer,
            lambda: Timing(self.poll_window, self.stream_window, self.startup_timeout, self.max_output),
            python="python" in self.languages,
            version=lambda: self.version,
            recording=lambda: self.recording,
            cpu_busy=self._confined.cpu_busy,
        )
        #: the model-facing send, governed by its own gate
        self._model = ModelTool(
            self.policy,
            owner=lambda: self.owner,
            installs=dependencies != "deny",
            poll_window=lambda: self.poll_window,
            window_ms=self._window_ms,
            call=self._calls.call,
            interrupt=self._loop.interrupt,
        )
        #: start, verification, the probe, teardown; the session's lifecycle state
        self._launcher = Launcher(
            self,
            LaunchInputs(
                profile=self._profile,
                roots=tuple(self._roots),
                read_roots=tuple(self._read_roots),
                extra_args=tuple(self._extra_args),
                env=self._env,
                command=command,
                python=python,
                nonce=self._nonce,
            ),
            confined=self._confined,
            observer=self._observer,
            boot=self._boot,
            calls=self._calls,
            model=self._model,
            require=self._require,
            locate_recording=self._locate_recording,
        )

    def __repr__(self) -> str:
        state = self._launcher.state
        return f"<{type(self).__name__} workspace={str(self.workspace)!r} profile={self._profile.name!r} {state}>"

    @property
    def recordings_base(self) -> Path:
        """Where this session's recording lands: the workspace's .agents/console, else recordings_dir."""
        local = self.workspace / ".agents" / "console"
        if local.is_dir():
            return local
        if self.recordings_dir is not None:
            return self.recordings_dir
        return Path(platformdirs.user_data_dir("console-bridge")) / "recordings"

    @property
    def server_languages(self) -> tuple[str, ...]:
        """The languages the server offers: ``languages`` minus SQL when it is withheld."""
        return self._launcher.server_languages

    # ---------------------------------------------------------------- status
    @property
    def version(self) -> str | None:
        return self._launcher.binary.version_text if self._launcher.binary else None

    @property
    def pid(self) -> int | None:
        return self._launcher.conn.pid if self._launcher.conn is not None else None

    @property
    def recording(self) -> Recording | None:
        """This session's recording, once the first send created it."""
        self._locate_recording()
        return self._recording

    def _locate_recording(self) -> None:
        if self._recording is None and self._launcher.conn is not None and self._launcher.conn.pid is not None:
            self._recording = find_recording(self.recordings_base, self._launcher.conn.pid)

    def status(self) -> ConsoleStatus:
        recording = self.recording
        return ConsoleStatus(
            connection=self._launcher.conn.status() if self._launcher.conn is not None else None,
            state=self._launcher.state
            if self._launcher.conn is None or self._launcher.state == "closed"
            else self._launcher.conn.status().state,
            version=self.version,
            command=str(self._launcher.binary.path) if self._launcher.binary else None,
            workspace=self.workspace,
            profile=self._profile.name,
            sandbox=self._launcher.advertised.as_dict() if self._launcher.advertised else None,
            dependencies=self.dependencies,
            languages=self.languages,
            poll_window=self.poll_window,
            recording=recording.path if recording else None,
            pid=self.pid,
            tmpdir=self._launcher.tmpdir,
            limits=self._confined.reports(),
            extra={"probe": {"checked": self._launcher.probe_checked, "ms": self._launcher.probe_ms}}
            | ({"ids": ids} if (ids := self._confined.id_mapping()) is not None else {})
            | ({"notices": list(self._notices)} if self._notices else {}),
            session_id=self._confined.entry.id if self._confined.entry else None,
            supervisor_pid=self._confined.entry.supervisor_pid if self._confined.entry else None,
            deny_read=tuple(self._confined.deny),
            view=self._confined.view.describe() if self._confined.view is not None else [],
            host=self._confined.confinement.host.name if self._confined.confinement is not None else None,
            usage=self.usage(),
            owner=self.owner,
        )

    # ------------------------------------------------------------ hand-over
    def assign_owner(self, owner: Owner) -> None:
        """Give a started session to ``owner`` (a session manager does this at hand-over).

        Every later call is checked against ``owner``, and the audit log names it.
        """
        if not isinstance(owner, Owner):
            raise NotAllowed("owner must be an Owner")
        self.owner = owner
        if self._launcher.conn is not None:
            self._launcher.conn.owner = owner

    def set_close_reason(self, reason: str) -> None:
        """Say why the session is (about to be) closed: every later use raises
        :class:`ConnectionClosed` with ``reason`` (e.g. "closed by the session manager after 600 s idle")."""
        self._close_reason = reason

    @property
    def close_reason(self) -> str | None:
        """Why the session was closed from outside (see :meth:`set_close_reason`), if it was."""
        return self._close_reason

    # ---------------------------------------------------------------- cells
    def _require(self, what: str) -> AsyncMcpConnection:
        check_owner(self.owner, "console")
        if self._launcher.state == "new":
            raise ConnectionClosed(f"{what}: the console is not started; use `async with` or await start()")
        if self._launcher.conn is None or self._launcher.state == "closed":
            raise ConnectionClosed(f"{what}: this console was {self._close_reason or 'closed'}; create a new one")
        return self._launcher.conn

    def _window_ms(self, timeout_ms: int | None) -> int:
        cap = int(self.poll_window * 1000)
        if timeout_ms is None:
            return cap
        if not isinstance(timeout_ms, int) or isinstance(timeout_ms, bool) or timeout_ms < 0:
            raise NotAllowed(f"timeout_ms must be a non-negative integer, not {timeout_ms!r}")
        return min(timeout_ms, cap)

    def _code_args(self, python: str | None, r: str | None, sql: str | None) -> dict[str, Any]:
        given = {lang: code for lang, code in (("python", python), ("r", r), ("sql", sql)) if code is not None}
        if len(given) > 1:
            raise NotAllowed(f"one cell runs one language; got {', '.join(given)}")
        for lang, code in given.items():
            if lang not in self.languages:
                raise NotAllowed(f"language {lang!r} is not enabled for this console (languages={self.languages})")
            if lang == "sql" and self._launcher.sql_withheld is not None:
                raise NotAllowed(self._launcher.sql_withheld)
            if not isinstance(code, str):
                raise NotAllowed(f"{lang}= must be a string of code")
        return given

    def usage(self) -> SessionUsage | None:
        """What the session used so far: from its cgroups where it has them, else its processes."""
        if self._launcher.state == "closed":
            return None
        return self._usage.read(self._calls.meter, self._launcher.tree)

    def _note_recording(self, recording: Recording) -> None:
        """Write the recording's sidecar: which workspace, profile and owner it belongs to (no secrets)."""
        import getpass

        from console_bridge._about import __version__

        try:
            user = getpass.getuser()
        except (KeyError, OSError):
            user = None
        info = {
            "run_id": recording.run_id,
            "workspace": str(self.workspace),
            "profile": self._profile.name,
            "owner": str(self.owner),
            "user": user,
            "uid": os.getuid(),
            "languages": list(self.languages),
            "mcp_console": self.version,
            "console_bridge": __version__,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "session_id": self._confined.entry.id if self._confined.entry is not None else None,
        }
        with contextlib.suppress(OSError):
            write_sidecar(recording.path, info)
        self._confined.note_recording(recording.path)

    @property
    def limit_check(self) -> Callable[[CellFailure | None], tuple[str, str] | None] | None:
        """Hook for the confinement layer: called when a cell ended with a failure or a worker exit;
        returns ``(limit_name, detail)`` when a resource limit stopped it, else None (see ``_observe``)."""
        return self._observer.limit_check

    @limit_check.setter
    def limit_check(self, check: Callable[[CellFailure | None], tuple[str, str] | None] | None) -> None:
        self._observer.limit_check = check

    def _limit_check(self, error: CellFailure | None = None) -> tuple[str, str] | None:
        """The confinement layer's answer for a cell that just ended: did a session limit stop it
        (kernel counters; where only an rlimit holds a limit, the tree's size and the failure's errno)?"""
        hit = self._confined.limit_hit(error)
        return None if hit is None else (hit, self._confined.limit_message(hit))

    # --------------------------------------------------------------- lifecycle
    async def __aenter__(self) -> AsyncConsole:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Check, launch and verify; raise before any call when anything does not check out.

        Raises :class:`VersionRefused`/:class:`LaunchRefused` (nothing started),
        :class:`SandboxMismatch`, :class:`DependenciesRefused`, :class:`VerificationFailed`
        (started, verified, stopped before any call), :class:`CallTimeout`.
        """
        await self._launcher.start()

    async def close(self) -> None:
        """Close cleanly: the server's stdin is closed so the recording is finalized, then the
        tree is stopped within bounds and the private TMPDIR removed. Idempotent."""
        await self._launcher.close()

    async def cancel(self) -> None:
        """Kill the session's process tree at once (the recording is not finalized). Idempotent."""
        await self._launcher.cancel()

    async def send(
        self,
        *,
        python: str | None = None,
        r: str | None = None,
        sql: str | None = None,
        stdin: str | None = None,
        timeout_ms: int | None = None,
    ) -> CellResult:
        """One observation window: submit code (or answer stdin, or just poll) and return what arrived.

        ``timeout_ms`` is clamped to ``poll_window``. ``running`` on the result means the
        cell goes on; poll again. Code sent while a cell runs raises :class:`Busy`.
        """
        args: dict[str, Any] = self._code_args(python, r, sql)
        if stdin is not None:
            if not isinstance(stdin, str):
                raise NotAllowed("stdin must be a string")
            args["stdin"] = stdin
        args["timeout_ms"] = self._window_ms(timeout_ms)
        return await self._calls.call(args)

    async def poll(self, timeout_ms: int | None = None) -> CellResult:
        """An empty send: new output of the running cell, or ``[idle]``."""
        return await self.send(timeout_ms=timeout_ms)

    async def run(
        self,
        *,
        python: str | None = None,
        r: str | None = None,
        sql: str | None = None,
        timeout: float | None = None,
        on_output: Callable[[CellResult], Any] | None = None,
        check: bool = False,
    ) -> CellResult:
        """Submit a cell and poll until it is done; return the whole output (``error`` set when it failed).

        ``timeout`` counts the cell itself, from the moment the worker started it; worker
        startup has its own bound (``startup_timeout``). Past either the cell is interrupted
        (restarted if the interrupt does not take) and :class:`CellTimeout` is raised with
        the output so far; the session stays usable. ``on_output`` receives each piece of
        the cell's output as it arrives (polled in ``stream_window`` slices, whatever
        ``poll_window`` is), all of it, past the server's per-poll window, up to ``max_output``
        bytes (then it stops, saying so once); chunks never hold server notices. ``check=True`` raises
        :class:`CellError` when the cell failed (see :meth:`CellResult.raise_for_error`).
        """
        code = self._code_args(python, r, sql)
        if not code:
            raise NotAllowed("run() needs code: python=, r= or sql=")
        if timeout is not None and (not isinstance(timeout, int | float) or timeout <= 0):
            raise NotAllowed(f"timeout must be a positive number of seconds, not {timeout!r}")
        return await self._loop.run(code, timeout=timeout, on_output=on_output, check=check)

    async def settle(
        self, bound: float = 10.0, on_output: Callable[[CellResult], Any] | None = None
    ) -> CellResult | None:
        """After an abandoned call (Ctrl-C): interrupt the cell and poll until it stopped.

        mcp-console keeps an abandoned poll open until its window ends and refuses new
        polls meanwhile; those refusals are retried every 50 ms within ``bound`` seconds.
        ``on_output`` sees each observation (the cell's last words after the interrupt).
        Returns the last observation, or None when the bound passed first.
        """
        self._host_only("settle()")
        return await self._loop.settle(bound, on_output)

    def _host_only(self, what: str) -> None:
        active = current_owner()
        if active is not None:
            raise NotAllowed(
                f"{what} is a host control; it cannot be used under the run context of {active!s}. "
                "Call it from host code, outside run_context()."
            )

    async def interrupt(self) -> CellResult:
        """Host-only: deliver KeyboardInterrupt to the running cell (state kept)."""
        self._host_only("interrupt()")
        return await self._loop.interrupt()

    async def restart(self) -> CellResult:
        """Host-only: stop the worker and start a fresh one (in-memory state lost)."""
        self._host_only("restart()")
        return await self._calls.call({"control": "restart", "timeout_ms": 5000})

    # ------------------------------------------------------ files in and out
    async def put_file(self, name: str, data: bytes) -> str:
        """Write ``data`` to ``name`` in the session's private TMPDIR; return the path a cell opens.

        ``name`` is relative without ``..``; nothing is followed through a symlink, nothing
        existing is replaced. Raises :class:`NotAllowed` for a bad name or an existing file.
        The file stays across :meth:`restart` (moved into the fresh worker's TMPDIR, at the same
        name under ``os.environ["TMPDIR"]``); a worker that dies takes its files with it.
        """
        self._require("put_file")
        return await self._files.put(name, data)

    async def get_file(self, name: str, *, max_bytes: int = 100_000_000) -> bytes:
        """The bytes of ``name`` in the session's private TMPDIR (written by a cell), never through a
        symlink; larger than ``max_bytes`` raises :class:`NotAllowed`."""
        self._require("get_file")
        return await self._files.get(name, max_bytes)

    async def push(self, name: str, value: Any) -> None:
        """Bind ``name`` in the session's Python to a copy of ``value``: a pandas data frame (through
        Parquet), a numpy array (``.npy``) or plain data (JSON). Nothing is pickled."""
        await _values.push(self, name, value)

    async def pull(self, name: str, *, max_bytes: int = 100_000_000) -> Any:
        """A copy of the session's Python value ``name``: a data frame, an array or plain data, read on
        the host by Parquet, ``.npy`` (no pickle) or JSON readers alone; anything else is refused.
        ``max_bytes`` bounds the file and the value it decodes to on the host (:class:`NotAllowed` past it)."""
        return await _values.pull(self, name, max_bytes=max_bytes)

    async def list_files(self, pattern: str = "**") -> list[str]:
        """The names (relative, sorted) of the regular files in the session's private TMPDIR that
        match the glob ``pattern`` (``*.csv``, ``out/**/*.png``; ``**`` any folders; hidden names
        only when the pattern names them). Symlinks are neither followed nor listed; the bridge's
        own folder is never listed. Raises :class:`NotAllowed` for a bad pattern."""
        self._require("list_files")
        return await self._files.find(pattern)

    # ------------------------------------------------------- the model's tool
    def tools(self) -> list[ToolHandle]:
        """The model-facing ``send`` tool, governed: no restart, clamped windows, no installs under
        ``deny``, approval through ``policy.approve`` when set, audited."""
        self._require("tools()")
        return self._model.handles()
