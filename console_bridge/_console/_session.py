"""``AsyncConsole``: a verified, governed mcp-console session for one workspace."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio
import platformdirs

from console_bridge._confinement._limits import Limits
from console_bridge._confinement._unconfinable import refuse_unconfinable
from console_bridge._connection._async import AsyncMcpConnection, ConnectionStatus
from console_bridge._connection._handles import NotCopyable, ToolHandle
from console_bridge._console._cells import BEING_POLLED, BUSY
from console_bridge._console._confined import SessionConfinement
from console_bridge._console._files import check_glob, glob_match
from console_bridge._console._launch import (
    check_project_config,
    check_project_overrides,
    find_r,
    split_args,
    validate_root,
    worker_python,
)
from console_bridge._console._notebook import CellLog
from console_bridge._console._observe import CellObserver, for_model, merge, reword_restart, split_chunk
from console_bridge._console._outcome import (
    OutcomeLog,
    outcome_dir_name,
    python_startup_code,
    r_profile_text,
    yaml_string,
)
from console_bridge._console._profiles import Profile, load_profile, translate
from console_bridge._console._recordings import Recording, find_recording, write_sidecar
from console_bridge._console._sandbox import SandboxPolicy, SandboxTextError, parse_sandbox_description
from console_bridge._console._tmpdir_io import TmpdirFiles
from console_bridge._console._usage import CellMeter, SessionUsage, TreeMeter, WorkerMeter, group_meter
from console_bridge._console._version import Binary, check_binary, resolve_command
from console_bridge._console._worker_env import inspect_venv
from console_bridge._console._workspace import evidence, vet_evidence, vet_recordings, vet_workspace
from console_bridge._errors import (
    ApprovalDenied,
    BridgeError,
    Busy,
    CallTimeout,
    CellTimeout,
    ConnectionClosed,
    DependenciesRefused,
    LaunchRefused,
    NotAllowed,
    SandboxMismatch,
    ServerError,
    VerificationFailed,
)
from console_bridge._governance._policy import ApprovalRequest, Policy, run_approver
from console_bridge._identity import Owner, check_owner, current_owner
from console_bridge._results import CellFailure, CellResult
from console_bridge._transport._stdio import base_environment

__all__ = ["AsyncConsole", "ConsoleStatus"]

SERVER = "mcp-console"
LANGUAGES = ("python", "r", "sql")
_REFUSED_ENV_PREFIXES = ("MCP_CONSOLE_", "LD_", "DYLD_")
_REFUSED_ENV = ("TMPDIR",)
_BRIDGE_NOTE = (
    "\n\nconsole-bridge: `timeout_ms` is capped at {cap} ms per call. A response that ends with "
    "`[running; poll with an empty send]` means the cell is still running: call `send` again with no code "
    '(`{{}}`) to keep watching it, or with `control: "interrupt"` to stop it. `control: "restart"` is '
    "reserved for the host.{deps}"
)


@dataclass(frozen=True, slots=True)
class ConsoleStatus:
    """A snapshot of the session (local state only)."""

    connection: ConnectionStatus | None
    state: str
    version: str | None
    command: str | None
    workspace: Path
    profile: str
    sandbox: dict[str, Any] | None
    dependencies: str
    languages: tuple[str, ...]
    poll_window: float
    recording: Path | None
    pid: int | None = None
    tmpdir: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    limits: dict[str, dict[str, Any]] = field(default_factory=dict)
    session_id: str | None = None
    supervisor_pid: int | None = None
    deny_read: tuple[str, ...] = ()
    view: list[dict[str, Any]] = field(default_factory=list)
    host: str | None = None
    #: what the session used so far (see :class:`SessionUsage`); None before it started
    usage: SessionUsage | None = None


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
        evidence_paths = tuple(str(item.path) for item in evidence(policy))  # never readable by a cell
        self._confined = SessionConfinement(
            limits=self.limits, deny_read=(*self._profile.deny_read, *evidence_paths), workspace=self.workspace
        )
        arg_roots, self._extra_args = split_args(args)
        self._roots = list(dict.fromkeys([*arg_roots, *(validate_root(r) for r in writable_roots)]))
        if isinstance(read_roots, str | bytes):
            raise LaunchRefused("read_roots must be a sequence of folder paths, e.g. read_roots=['~/data']")
        self._read_roots = list(
            dict.fromkeys(
                validate_root(r, what="read root") for r in [*self._profile.read_roots, *read_roots]
            )
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
        self._command = command
        self._python = python
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
        self._conn: AsyncMcpConnection | None = None
        self._binary: Binary | None = None
        self._tmpdir: Path | None = None
        self._expected: SandboxPolicy | None = None
        self._advertised: SandboxPolicy | None = None
        self._send_schema: dict[str, Any] = {}
        self._description = ""
        self._recording: Recording | None = None
        self._state = "new"
        self._probe_checked = 0
        self._probe_ms: float | None = None
        self._close_reason: str | None = None
        #: observation window of run() while on_output is given (output at most this late)
        self.stream_window = float(stream_window)
        self._nonce = secrets.token_hex(8)
        self._sql_withheld: str | None = None
        self._observer = CellObserver(lambda: self.recording, self._note_recording, events_wait=float(events_wait))
        self._notices = self._observer.notices
        self._observer.limit_check = self._limit_check
        self._meter: CellMeter | None = None
        self._tree: TreeMeter | None = None
        self._usage_cache: dict[str, tuple[float, Any]] = {}
        #: seconds status().usage keeps a walked figure (the recording's size, the process tree's use)
        self.usage_refresh = 2.0
        #: the user's cells, logged next to the recording as they end (the notebook export reads it)
        self._cells = CellLog()
        self._cell: tuple[str, str, list[CellResult]] | None = None
        self._log_cells = False

    def __repr__(self) -> str:
        return f"<{type(self).__name__} workspace={str(self.workspace)!r} profile={self._profile.name!r} {self._state}>"

    # --------------------------------------------------------------- lifecycle
    async def __aenter__(self) -> AsyncConsole:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def recordings_base(self) -> Path:
        """Where this session's recording lands: the workspace's .agents/console, else recordings_dir."""
        local = self.workspace / ".agents" / "console"
        if local.is_dir():
            return local
        if self.recordings_dir is not None:
            return self.recordings_dir
        return Path(platformdirs.user_data_dir("console-bridge")) / "recordings"

    def _serve_args(self, binary: Binary, python: Path) -> tuple[list[str], SandboxPolicy]:
        c_args, expected = translate(
            self._profile, binary.version, self.workspace, self._roots, deny=self._confined.deny
        )
        argv = ["serve", "--no-global-config" if self.project_config else "--no-config"]
        argv += ["-c", f"python={python}", *c_args, *self._extra_args]
        langs = ", ".join(self.server_languages)
        argv += ["-c", f"languages=[{langs}]"]
        if "r" in self.languages:
            argv += ["-c", "r.resolution=disabled", "-c", "r.packages=[]"]
        if "python" in self.languages:
            # One startup entry does both: the outcome hooks (see _outcome) and, for SQL, a
            # DuckDB connection that Python owns (with R installed SQL would go to R's DuckDB).
            sql = "sql" in self.server_languages
            code = python_startup_code(self._nonce, sql=sql, offline=expected.network == "restricted")
            argv += ["-c", "startup.language=python", "-c", f"startup.code={yaml_string(code)}"]
        if self.dependencies == "deny":
            argv += ["-c", "tool.parameters.requirements.enabled=false"]
        for root in self._roots:
            argv += ["--writable-root", str(root)]
        return argv, expected

    def _profile_writable(self) -> list[Path]:
        """The profile's ``sandbox.filesystem.read_write`` entries, as host paths."""
        out = []
        for item in self._profile.read_write:
            path = Path(item).expanduser()
            out.append(path if path.is_absolute() else self.workspace / path)
        return out

    @property
    def server_languages(self) -> tuple[str, ...]:
        """The languages the server offers: ``languages`` minus SQL when it is withheld."""
        if self._sql_withheld is not None:
            return tuple(lang for lang in self.languages if lang != "sql")
        return self.languages

    def _check_worker_env(self, python: Path) -> None:
        """The worker's Python must have its embedding library (refused otherwise: mcp-console would
        fail later with a less helpful message); SQL needs duckdb there, else SQL is withheld with
        one notice."""
        if "python" not in self.languages:
            return
        needed = ("duckdb",) if "sql" in self.languages else ()
        facts = inspect_venv(python, needed, timeout=self.version_timeout)
        if facts is None:
            return
        if facts.embedding_missing:
            raise LaunchRefused(f"the worker's Python ({python}) cannot run Python cells: {facts.embedding_fix()}")
        if "duckdb" in facts.missing:
            self._sql_withheld = (
                f"SQL is withheld: the worker's Python ({python}) cannot import duckdb. Install it there "
                "(`pip install duckdb`, or the console-bridge[datascience] extra) or pass python= pointing at "
                "an environment that has it; Python cells are unaffected."
            )
            self._notices.append(self._sql_withheld)

    def _outcome_env(self) -> dict[str, str]:
        """The R hook: an R_PROFILE_USER file (it sources the user's own), outside the denied
        session folders so the sandboxed worker can read it; removed when the session ends."""
        if "r" not in self.languages:
            return {}
        text = r_profile_text(self._nonce, self._env.get("R_PROFILE_USER"))
        return {"R_PROFILE_USER": str(self._confined.write_r_profile(text))}

    async def start(self) -> None:
        """Check, launch and verify; raise before any call when anything does not check out.

        Raises :class:`VersionRefused`/:class:`LaunchRefused` (nothing started),
        :class:`SandboxMismatch`, :class:`DependenciesRefused`, :class:`VerificationFailed`
        (started, verified, stopped before any call), :class:`CallTimeout`.
        """
        check_owner(self.owner, "console")
        if self._state != "new":
            if self._state == "closed":
                raise ConnectionClosed("this console is closed; create a new AsyncConsole")
            return
        self._state = "starting"
        try:
            binary = await anyio.to_thread.run_sync(
                lambda: check_binary(resolve_command(self._command), timeout=self.version_timeout)
            )
            self._binary = binary
            if check_project_config(self.workspace, self.project_config) is not None:
                await anyio.to_thread.run_sync(
                    lambda: check_project_overrides(binary.path, self.workspace, timeout=self.version_timeout)
                )
            python = await anyio.to_thread.run_sync(lambda: worker_python(self._python))
            await anyio.to_thread.run_sync(lambda: self._check_worker_env(python))
            self._abort_if_closed()
            base = self.recordings_base
            base.mkdir(parents=True, exist_ok=True)
            await anyio.to_thread.run_sync(
                lambda: self._confined.prepare(
                    owner=str(self.owner),
                    profile=self._profile.name,
                    recording_base=base,
                    writable=self._profile.base == "workspace" or bool(self._roots) or bool(self._profile_writable()),
                )
            )
            supervision = await anyio.to_thread.run_sync(
                lambda: self._confined.supervision(
                    recording_base=base,
                    python=python,
                    binary=binary.path,
                    languages=self.languages,
                    workspace_writable=self._profile.base == "workspace",
                    writable_roots=[*self._roots, *self._profile_writable()],
                    read_roots=self._read_roots,
                    search_path=self._env.get("PATH") or base_environment().get("PATH"),
                )
            )
            argv, self._expected = self._serve_args(binary, python)
            self._tmpdir = self._confined.tmpdir
            env = (
                base_environment()
                | self._env
                | self._outcome_env()
                | {
                    "TMPDIR": str(self._tmpdir),
                    "MCP_CONSOLE_HOME": str(base),
                    "MCP_CONSOLE_CACHE_DIR": str(self._confined.cache_dir / "mcp-console"),
                    "XDG_CACHE_HOME": str(self._confined.cache_dir),
                }
                | self._confined.path_env()
            )
            config = {
                "mcpServers": {
                    SERVER: {"command": str(binary.path), "args": argv, "env": env, "cwd": str(self.workspace)}
                }
            }
            self._conn = AsyncMcpConnection(
                config,
                SERVER,
                owner=self.owner,
                tools=["send"],
                policy=Policy(
                    mode="read_write",
                    approve_writes=False,
                    pin_schemas=self.policy.pin_schemas,
                    sanitize_descriptions=False,
                    audit=self.policy.audit_log,
                    max_bytes=self.policy.max_bytes,
                ),
                timeout=self.poll_window + self.timeout,
                startup_timeout=self.startup_timeout,
                shutdown_grace=self.shutdown_grace,
                supervision=supervision,
            )
            try:
                await self._conn.connect()
            except ConnectionClosed as exc:
                raise self._confinement_refusal(exc) from None
            self._confined.attach(self._conn.supervisor_pid or 0, base, server_pid=self._conn.pid)
            groups, supervisor = self._confined.usage_sources()
            self._meter = CellMeter(group_meter(groups), WorkerMeter(supervisor))
            self._tree = TreeMeter(supervisor)
            # The hooks write under the TMPDIR as the session's processes see it (a tmpfs of its own).
            self._observer.outcomes = OutcomeLog(self._confined.tmp_view(), self._nonce)
            await self._verify(self._conn, binary)
            self._abort_if_closed()
            await self._probe(base)
            self._abort_if_closed()
            self._log_cells = True
        except Exception:
            with anyio.CancelScope(shield=True):
                await self._teardown(cancel=True)  # a failed check: the server is not trusted
            raise
        except BaseException:
            # Cancelled (a closing manager, Ctrl-C): stop cleanly, within shutdown_grace, so a
            # recording the start-up probe already opened is finalized like any other.
            with anyio.CancelScope(shield=True):
                self._locate_recording()
                await self._teardown(cancel=False)
            raise
        self._state = "ready"

    def _confinement_refusal(self, exc: ConnectionClosed) -> BridgeError:
        """A server that died before it answered because its confinement could not be set up
        (the view, the namespaces, the systemd scope) is a refusal, not a crash."""
        tail = exc.stderr_tail or ""
        lines = [line for line in tail.splitlines() if line.startswith("console-bridge supervisor:")]
        scope = self._confined.confinement.scope if self._confined.confinement is not None else None
        if not lines and scope is not None and "Failed to" in tail:
            lines = [f"systemd-run could not start the session's scope: {tail.strip().splitlines()[-1]}"]
        if not lines:
            return exc
        return LaunchRefused(
            f"the session's confinement could not be set up: {lines[-1]}. Nothing ran; `console-bridge doctor` "
            "checks namespaces, cgroups and the systemd manager on this host.",
            server=SERVER,
            details={"stderr_tail": tail[-2000:]},
        )

    def _abort_if_closed(self) -> None:
        """``close()``/``cancel()`` ran while ``start()`` awaited: launch nothing more."""
        if self._state == "closed":
            raise ConnectionClosed("close() or cancel() ran while the console was starting; it was not started")

    async def _verify(self, conn: AsyncMcpConnection, binary: Binary) -> None:
        """Prove the server is what was asked for, before any call; otherwise stop it."""
        info = conn.status().server_info or {}
        if info.get("name") != "mcp-console" or info.get("version") != binary.version_text:
            raise VerificationFailed(
                f"the server reports {info.get('name')!r} {info.get('version')!r}, not mcp-console "
                f"{binary.version_text} as checked from {str(binary.path)!r}; it was stopped before any call",
                server=SERVER,
                pid=conn.pid,
            )
        page = await conn.discover("tools")
        names = sorted(str(item.get("name")) for item in page.items)
        if names != ["send"] or page.next_cursor is not None:
            raise VerificationFailed(
                f"mcp-console must offer exactly one tool, 'send'; it offers {names} (more pages: "
                f"{page.next_cursor is not None}); it was stopped before any call",
                server=SERVER,
                pid=conn.pid,
            )
        tool = page.items[0]
        schema = tool.get("inputSchema") or {}
        props = schema.get("properties") or {}
        required = {"control", "stdin", "timeout_ms", *self.server_languages}
        missing = sorted(required - set(props))
        if missing:
            raise VerificationFailed(
                f"the send tool lacks the field(s) {', '.join(missing)} the session needs; it was stopped before "
                "any call (check the languages and the mcp-console version)",
                server=SERVER,
                pid=conn.pid,
            )
        unexpected = sorted(set(props) & set(LANGUAGES) - set(self.server_languages))
        if unexpected:
            raise VerificationFailed(
                f"the send tool offers language(s) {', '.join(unexpected)} that were not requested; stopped",
                server=SERVER,
                pid=conn.pid,
            )
        if self.dependencies == "deny" and "requirements" in props:
            raise DependenciesRefused(
                "dependencies='deny' but the send tool still offers `requirements` (package installs); "
                "it was stopped before any call",
                server=SERVER,
                pid=conn.pid,
            )
        if self.dependencies == "allow" and "requirements" not in props:
            raise VerificationFailed(
                "dependencies='allow' but the send tool does not offer `requirements`; stopped before any call",
                server=SERVER,
                pid=conn.pid,
            )
        description = str(tool.get("description") or "")
        try:
            advertised = parse_sandbox_description(description)
        except SandboxTextError as exc:
            raise SandboxMismatch(
                f"the advertised sandbox could not be verified ({exc}); the bridge fails closed. The server was "
                "stopped before any call.",
                server=SERVER,
                pid=conn.pid,
            ) from None
        expected = self._expected
        assert expected is not None
        if advertised != expected:
            raise SandboxMismatch(
                f"the server advertises [{advertised.describe()}] but profile {self._profile.name!r} requires "
                f"[{expected.describe()}]; it was stopped before any call. Check the project config and "
                "writable_roots (mcp-console refuses workspace writes when the workspace is the home folder).",
                server=SERVER,
                pid=conn.pid,
                details={"advertised": advertised.as_dict(), "expected": expected.as_dict()},
            )
        self._advertised = advertised
        self._send_schema = dict(schema)
        self._description = description

    async def _probe(self, base: Path) -> None:
        """Prove the deny rules: a probe cell must fail to read every canary and denied place."""
        language = next(lang for lang in ("python", "sql", "r") if lang in self.languages)
        writable = self._expected.writable if self._expected is not None else frozenset()
        workspace_writable = str(self.workspace) in writable or "workspace" in writable
        code = await anyio.to_thread.run_sync(lambda: self._confined.probe_cell(base, workspace_writable, language))
        conn = self._require("probe")
        began = time.perf_counter()
        result = await self._call({language: code, "timeout_ms": int(self.startup_timeout * 1000)})
        self._probe_ms = (time.perf_counter() - began) * 1000
        if result.running:
            raise CallTimeout(
                f"the confinement probe did not finish within startup_timeout={self.startup_timeout:g}s; the "
                "server was stopped before any user cell. Raise startup_timeout on a slow host.",
                server=SERVER,
                pid=conn.pid,
            )
        self._probe_checked = self._confined.check_probe(result.text, server=SERVER, pid=conn.pid)

    async def _teardown(self, *, cancel: bool) -> None:
        conn = self._conn
        if conn is not None:
            if cancel:
                await conn.cancel()
            else:
                await conn.close()
        if self._meter is not None:
            self._meter.close()
        self._cells.close()
        self._observer.events.close()
        if self._observer.outcomes is not None:
            self._observer.outcomes.close()
        await anyio.to_thread.run_sync(self._confined.release)
        self._state = "closed"

    async def close(self) -> None:
        """Close cleanly: the server's stdin is closed so the recording is finalized, then the
        tree is stopped within bounds and the private TMPDIR removed. Idempotent."""
        with anyio.CancelScope(shield=True):
            self._locate_recording()
            await self._teardown(cancel=False)

    async def cancel(self) -> None:
        """Kill the session's process tree at once (the recording is not finalized). Idempotent."""
        with anyio.CancelScope(shield=True):
            self._locate_recording()
            await self._teardown(cancel=True)

    # ---------------------------------------------------------------- status
    @property
    def version(self) -> str | None:
        return self._binary.version_text if self._binary else None

    @property
    def pid(self) -> int | None:
        return self._conn.pid if self._conn is not None else None

    @property
    def recording(self) -> Recording | None:
        """This session's recording, once the first send created it."""
        self._locate_recording()
        return self._recording

    def _locate_recording(self) -> None:
        if self._recording is None and self._conn is not None and self._conn.pid is not None:
            self._recording = find_recording(self.recordings_base, self._conn.pid)

    def status(self) -> ConsoleStatus:
        recording = self.recording
        return ConsoleStatus(
            connection=self._conn.status() if self._conn is not None else None,
            state=self._state if self._conn is None or self._state == "closed" else self._conn.status().state,
            version=self.version,
            command=str(self._binary.path) if self._binary else None,
            workspace=self.workspace,
            profile=self._profile.name,
            sandbox=self._advertised.as_dict() if self._advertised else None,
            dependencies=self.dependencies,
            languages=self.languages,
            poll_window=self.poll_window,
            recording=recording.path if recording else None,
            pid=self.pid,
            tmpdir=self._tmpdir,
            limits=self._confined.reports(),
            extra={"probe": {"checked": self._probe_checked, "ms": self._probe_ms}}
            | ({"notices": list(self._notices)} if self._notices else {}),
            session_id=self._confined.entry.id if self._confined.entry else None,
            supervisor_pid=self._confined.entry.supervisor_pid if self._confined.entry else None,
            deny_read=tuple(self._confined.deny),
            view=self._confined.view.describe() if self._confined.view is not None else [],
            host=self._confined.confinement.host.name if self._confined.confinement is not None else None,
            usage=self.usage(),
        )

    # ------------------------------------------------------------ hand-over
    def assign_owner(self, owner: Owner) -> None:
        """Give a started session to ``owner`` (a session manager does this at hand-over).

        Every later call is checked against ``owner``, and the audit log names it.
        """
        if not isinstance(owner, Owner):
            raise NotAllowed("owner must be an Owner")
        self.owner = owner
        if self._conn is not None:
            self._conn.owner = owner

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
        if self._state == "new":
            raise ConnectionClosed(f"{what}: the console is not started; use `async with` or await start()")
        if self._conn is None or self._state == "closed":
            raise ConnectionClosed(f"{what}: this console was {self._close_reason or 'closed'}; create a new one")
        return self._conn

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
            if lang == "sql" and self._sql_withheld is not None:
                raise NotAllowed(self._sql_withheld)
            if not isinstance(code, str):
                raise NotAllowed(f"{lang}= must be a string of code")
        return given

    async def _call(self, args: dict[str, Any], *, errors_as_results: bool = False) -> CellResult:
        """One ``send``. An error result raises :class:`ServerError`, except a worker exit (a
        result with ``worker_exited``) and, with ``errors_as_results``, any error result."""
        conn = self._require("send")
        language = next((lang for lang in LANGUAGES if lang in args), None)
        mark = self._observer.mark(language)
        started = time.monotonic()
        meter = self._meter
        running_cell, running_meter = self._cell, meter.state() if meter is not None else None
        if language is not None:
            self._confined.mark()
            if meter is not None:
                meter.start()
            if self._log_cells:
                self._cell = (language, str(args[language]), [])
        try:
            result = await conn.call_tool("send", args)
        except ConnectionClosed as exc:
            if self._close_reason is None:
                raise
            raise type(exc)(f"send: this console was {self._close_reason}", server=SERVER, pid=exc.pid) from None
        except ServerError as exc:
            if exc.result is None:
                raise
            text = exc.result.text
            if text.lstrip().startswith((BUSY, BEING_POLLED)):
                # Nothing was submitted: the running cell keeps its log record and its meter.
                self._cell = running_cell
                if meter is not None and running_meter is not None:
                    meter.restore(running_meter)
                raise Busy(
                    "a cell is still running in this console; poll() for its output, interrupt() it, or wait "
                    "(nothing was queued)",
                    server=SERVER,
                ) from None
            self._observer.submitted(language, mark)
            cell = await self._observer.observe(exc.result, started, is_error=True)
            restart = self._observer.last_notice.restart_required
            if cell.worker_exited or restart or errors_as_results:
                if restart:
                    await self._restart_worker()
                    cell = reword_restart(cell)
                return self._measured(cell)
            raise ServerError(f"mcp-console refused the call: {text[:2000]}", result=cell, server=SERVER) from None
        self._observer.submitted(language, mark)
        return self._measured(await self._observer.observe(result, started))

    def _measured(self, cell: CellResult) -> CellResult:
        """The observation that ends a cell carries what the cell used; the cell goes to the log."""
        if cell.running or cell.waiting_for_input:
            if self._cell is not None and len(self._cell[2]) < 10_000:
                self._cell[2].append(cell)
            return cell
        meter = self._meter
        if meter is not None and meter.active:
            cell = dataclasses.replace(cell, usage=meter.stop())
        if self._cell is not None:
            language, code, chunks = self._cell
            self._cell = None
            recording = self.recording
            whole = merge([*chunks, cell], sum(chunk.elapsed for chunk in [*chunks, cell])) if chunks else cell
            self._cells.write(recording.path if recording is not None else None, language, code, whole)
        return cell

    def usage(self) -> SessionUsage | None:
        """What the session used so far: from its cgroups where it has them, else its processes."""
        if self._meter is None or self._tree is None or self._state == "closed":
            return None
        group = self._meter.group
        cpu = group.cpu_seconds() if group is not None else None
        memory = group.memory_now() if group is not None else None
        peak = group.session_peak() if group is not None else None
        processes = group.processes() if group is not None else None
        if cpu is None or memory is None or processes is None:
            tree_cpu, tree_memory, tree_peak, tree_processes = self._cached("tree", self._tree.read)
            cpu = cpu if cpu is not None else tree_cpu
            if memory is None:
                memory, peak = tree_memory, tree_peak
            processes = processes if processes is not None else tree_processes
        recording = self.recording
        return SessionUsage(
            cpu_seconds=cpu,
            memory=memory,
            memory_peak=peak,
            processes=processes,
            tmpdir_bytes=self._confined.tmpdir_bytes(),
            writes_bytes=self._confined.writes_bytes(),
            recording_bytes=self._cached("recording", lambda: recording.size_bytes) if recording is not None else None,
        )

    def _cached(self, key: str, read: Callable[[], Any]) -> Any:
        """What ``read`` returned, re-read at most every ``usage_refresh`` seconds (a walk of the
        recording or the process tree; status() is called often, the counter files are read each time)."""
        now = time.monotonic()
        hit = self._usage_cache.get(key)
        if hit is not None and now - hit[0] < self.usage_refresh:
            return hit[1]
        value = read()
        self._usage_cache[key] = (now, value)
        return value

    def _note_recording(self, recording: Recording) -> None:
        """Write the recording's sidecar: which workspace, profile and owner it belongs to (no secrets)."""
        import getpass

        from console_bridge import __version__

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

    async def _restart_worker(self) -> None:
        """Start a fresh worker and wait (bounded) until it is up: a cell sent while the restart
        is still under way would be refused as Busy."""
        conn = self._require("restart")
        with contextlib.suppress(ServerError):
            await conn.call_tool("send", {"control": "restart", "timeout_ms": 5000})

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
        return await self._call(args)

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
        ``poll_window`` is); chunks never hold server notices. ``check=True`` raises
        :class:`CellError` when the cell failed (see :meth:`CellResult.raise_for_error`).
        """
        code = self._code_args(python, r, sql)
        if not code:
            raise NotAllowed("run() needs code: python=, r= or sql=")
        if timeout is not None and (not isinstance(timeout, int | float) or timeout <= 0):
            raise NotAllowed(f"timeout must be a positive number of seconds, not {timeout!r}")
        started = time.monotonic()
        startup_deadline = started + self.startup_timeout
        deadline: float | None = None
        cell_started = saw_phase = False
        chunks: list[CellResult] = []
        args: dict[str, Any] = dict(code)
        reason = ""
        while True:
            now = time.monotonic()
            window = self.poll_window
            if on_output is not None or (timeout is not None and not cell_started):
                window = min(window, self.stream_window)
            limit = deadline if deadline is not None else (startup_deadline if not cell_started else None)
            if limit is not None:
                window = max(0.0, min(window, limit - now))
            args["timeout_ms"] = int(window * 1000)
            chunk = await self._call(args)
            chunks.append(chunk)
            # The cell started: the recording says so (0.0.6), output came, it ended, or (0.0.5, which
            # records no start) the server no longer reports a worker-preparation phase.
            starting = self._observer.last_notice.starting
            saw_phase = saw_phase or starting
            # A worker that was prepared runs the bridge's Python startup code before the cell: its
            # "ready" note (last_started_at) marks the start then, not the end of the phase.
            no_phase = self.version == "0.0.5" and not starting and not (saw_phase and "python" in self.languages)
            if not cell_started and (
                self._observer.last_started_at is not None
                or chunk.text
                or chunk.stderr
                or not chunk.running
                or no_phase
            ):
                cell_started = True
                begun = time.monotonic()
                if self._observer.last_started_at is not None:
                    begun -= max(0.0, time.time() - self._observer.last_started_at)
                if timeout is not None:
                    deadline = begun + timeout
            if on_output is not None and (chunk.text or chunk.stderr or chunk.images or not chunk.running):
                for piece in split_chunk(chunk):
                    outcome = on_output(piece)
                    if isinstance(outcome, Awaitable):
                        await outcome
            if not chunk.running:
                result = merge(chunks, time.monotonic() - started)
                return result.raise_for_error() if check else result
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                reason = f"the cell ran past timeout={timeout:g}s; it was interrupted and the session lives on"
                break
            if not cell_started and now >= startup_deadline:
                reason = (
                    f"the worker did not start the cell within startup_timeout={self.startup_timeout:g}s (the cell "
                    "never ran); it was stopped and the session lives on. Raise startup_timeout on a slow machine."
                )
                break
            args = {}
        chunks.extend(await self._stop_cell())
        chunks.extend(await self._stop_leftover_work())
        partial = merge(chunks, time.monotonic() - started)
        raise CellTimeout(
            f"{reason} (the output so far is on .result)",
            result=partial,
            server=SERVER,
            details={"cell_started": cell_started},
        )

    async def _stop_cell(self, grace_ms: int = 5000) -> list[CellResult]:
        """Interrupt the running cell; restart the worker if the interrupt does not take."""
        # An interrupt that lands in worker startup comes back as an error result
        # ("worker startup interrupted"): that is still a stopped cell, not a failure.
        chunks = [await self._call({"control": "interrupt", "timeout_ms": grace_ms}, errors_as_results=True)]
        if chunks[-1].running:
            chunks.append(await self._call({"timeout_ms": grace_ms}, errors_as_results=True))
        if chunks[-1].running or (chunks[0].is_error and chunks[0].error is None):
            # Still running, or the interrupt broke worker startup: a fresh worker makes the
            # session usable again (a worker that never started held no state).
            chunks.append(await self._call({"control": "restart", "timeout_ms": grace_ms}, errors_as_results=True))
        return chunks

    async def _stop_leftover_work(self) -> list[CellResult]:
        """After a timed-out cell was interrupted: if threads or processes it started still burn
        CPU, restart the worker (the only way to stop a thread); its state is lost, and the
        result says so."""
        busy = self._confined.cpu_busy()
        if busy is None or not await busy():
            return []
        restart = await self._call({"control": "restart", "timeout_ms": 5000}, errors_as_results=True)
        note = (
            "[console-bridge: the timed-out cell left threads or processes running; the worker was restarted "
            "to stop them (its state is lost)]\n"
        )
        return [dataclasses.replace(restart, text="", stderr=note, segments=(("stderr", note),), content=[])]

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
        interrupted = False
        with anyio.move_on_after(bound):
            while True:
                try:
                    if not interrupted:
                        result = await self._interrupt_cell(1000)
                        interrupted = True
                    else:
                        result = await self._call({"timeout_ms": 1000})
                except Busy:
                    await anyio.sleep(0.05)
                    continue
                if on_output is not None:
                    outcome = on_output(result)
                    if isinstance(outcome, Awaitable):
                        await outcome
                if not result.running:
                    return result
        return None

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
        return await self._interrupt_cell()

    async def _interrupt_cell(self, timeout_ms: int = 5000) -> CellResult:
        """Interrupt; when that breaks a worker still starting (an error result), start a fresh one.

        A worker that never finished starting held no state, and without the restart every
        later call would fail (the model cannot restart by itself).
        """
        result = await self._call({"control": "interrupt", "timeout_ms": timeout_ms}, errors_as_results=True)
        if result.is_error and result.error is None:
            # A server error result (not the cell's KeyboardInterrupt, not a worker exit).
            await self._restart_worker()
        return result

    async def restart(self) -> CellResult:
        """Host-only: stop the worker and start a fresh one (in-memory state lost)."""
        self._host_only("restart()")
        return await self._call({"control": "restart", "timeout_ms": 5000})

    # ------------------------------------------------------ files in and out
    def _tmp_files(self) -> TmpdirFiles:
        return TmpdirFiles(self._confined.open_tmp_root, self._confined.tmpdir)

    async def put_file(self, name: str, data: bytes) -> str:
        """Write ``data`` to ``name`` in the session's private TMPDIR; return the path a cell opens.

        ``name`` is relative without ``..``; nothing is followed through a symlink, nothing
        existing is replaced. Raises :class:`NotAllowed` for a bad name or an existing file.
        """
        self._require("put_file")
        if not isinstance(data, bytes | bytearray | memoryview):
            raise NotAllowed("put_file data must be bytes")
        payload = bytes(data)
        try:
            return await anyio.to_thread.run_sync(lambda: self._tmp_files().put(name, payload))
        except OSError as exc:
            raise NotAllowed(f"put_file({name!r}) failed: {exc.strerror or exc}; pick a new name") from None

    async def get_file(self, name: str, *, max_bytes: int = 100_000_000) -> bytes:
        """The bytes of ``name`` in the session's private TMPDIR (written by a cell), never through a
        symlink; larger than ``max_bytes`` raises :class:`NotAllowed`."""
        self._require("get_file")
        try:
            return await anyio.to_thread.run_sync(lambda: self._tmp_files().get(name, max_bytes))
        except OSError as exc:
            raise NotAllowed(f"get_file({name!r}) failed: {exc.strerror or exc}; check the name") from None

    async def list_files(self, pattern: str = "**") -> list[str]:
        """The names (relative, sorted) of the regular files in the session's private TMPDIR that
        match the glob ``pattern`` (``*.csv``, ``out/**/*.png``; ``**`` any folders; hidden names
        only when the pattern names them). Symlinks are neither followed nor listed; the bridge's
        own folder is never listed. Raises :class:`NotAllowed` for a bad pattern."""
        self._require("list_files")
        check_glob(pattern)
        try:
            found = await anyio.to_thread.run_sync(self._tmp_files().list)
        except OSError as exc:
            raise NotAllowed(f"list_files({pattern!r}) failed: {exc.strerror or exc}") from None
        private = outcome_dir_name(self._nonce) + "/"
        return sorted(name for name, _ in found if not name.startswith(private) and glob_match(pattern, name))

    # ------------------------------------------------------- the model's tool
    def tools(self) -> list[ToolHandle]:
        """The model-facing ``send`` tool, governed: no restart, clamped windows, no installs under
        ``deny``, approval through ``policy.approve`` when set, audited."""
        self._require("tools()")
        cap = int(self.poll_window * 1000)
        schema = {k: v for k, v in self._send_schema.items()}
        props = dict(schema.get("properties") or {})
        if self.dependencies == "deny":
            props.pop("requirements", None)
        if "control" in props:
            control = dict(props["control"])
            control["enum"] = ["interrupt"]
            control.pop("oneOf", None)
            props["control"] = control
        if "timeout_ms" in props:
            props["timeout_ms"] = {**props["timeout_ms"], "maximum": cap}
        schema["properties"] = props
        deps = " Package installs (`requirements`) are disabled." if self.dependencies == "deny" else ""
        description = self._description + _BRIDGE_NOTE.format(cap=cap, deps=deps)
        return [
            ToolHandle(
                name="send",
                tool="send",
                server=SERVER,
                description=description,
                input_schema=schema,
                annotations={},
                requires_approval=self.policy.approve is not None,
                owner=self.owner,
                invoke=self._model_send,
            )
        ]

    async def _model_send(self, arguments: dict[str, Any]) -> CellResult:
        if arguments.get("control") == "restart":
            self._audit_refusal(arguments, "restart is host-only")
            raise NotAllowed('control: "restart" is reserved for the host; send control: "interrupt" to stop a cell')
        if "requirements" in arguments and self.dependencies == "deny":
            self._audit_refusal(arguments, "requirements under dependencies='deny'")
            raise DependenciesRefused(
                "package installs (`requirements`) are disabled for this console; use the packages already installed",
                server=SERVER,
            )
        props = set((self._send_schema.get("properties") or {}).keys())
        unknown = sorted(set(arguments) - props)
        if unknown:
            raise NotAllowed(f"send does not take {', '.join(unknown)}; allowed fields: {', '.join(sorted(props))}")
        args = dict(arguments)
        args["timeout_ms"] = self._window_ms(args.get("timeout_ms"))
        approve = self.policy.approve
        if approve is not None:
            request = ApprovalRequest(
                tool="send",
                arguments=args,
                annotations={},
                reason="runs code",
                owner=current_owner() or self.owner,
                server=SERVER,
            )
            approved, error = await run_approver(approve, request)
            log = self.policy.audit_log
            if log is not None:
                from console_bridge._governance._audit import sha256_json

                log.write(
                    "approval",
                    owner=str(request.owner),
                    server=SERVER,
                    tool="send",
                    args_sha256=sha256_json(args),
                    approved=approved,
                    error=error,
                    reason=request.reason,
                )
            if not approved:
                why = f"the approval gate raised {error}" if error else "the approval gate said no"
                raise ApprovalDenied(f"send was not approved: {why}; nothing was run", server=SERVER)
        try:
            if args.get("control") == "interrupt" and not any(k in args for k in ("python", "r", "sql", "stdin")):
                return for_model(await self._interrupt_cell(args["timeout_ms"]))
            return for_model(await self._call(args))
        except Busy:
            # The model drives the cell through send alone: say it in send's terms, not the Python API's.
            raise Busy(
                "a cell is still running; call send({}) to keep watching it, or send with "
                'control: "interrupt" to stop it (nothing was queued)',
                server=SERVER,
            ) from None

    def _audit_refusal(self, arguments: Mapping[str, Any], reason: str) -> None:
        log = self.policy.audit_log
        if log is not None:
            owner = current_owner() or self.owner
            log.write("refusal", owner=str(owner), server=SERVER, tool="send", reason=reason)
