"""A part of :class:`AsyncConsole`: the launcher. The binary and its version, the launch
arguments, the worker's checks, the governed connection, the verification of the server and its
sandbox, the confinement probe; and teardown (``close``, ``cancel``). It owns the session's
lifecycle state; the facade asks it before every call.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import anyio
import psutil

from console_bridge._cells._observe import CellObserver
from console_bridge._cells._outcome import OutcomeLog, python_startup_code, r_profile_text, yaml_string
from console_bridge._confinement._host import detect_host
from console_bridge._confinement._shared_roots import protected_roots
from console_bridge._connection._async import AsyncMcpConnection
from console_bridge._console._call_path import CallPath
from console_bridge._console._confined import SessionConfinement
from console_bridge._console._model_tool import ModelTool
from console_bridge._console._status import LANGUAGES, SERVER
from console_bridge._console._usage import CellMeter, TreeMeter, WorkerMeter, group_meter
from console_bridge._console._worker_boot import WorkerBoot
from console_bridge._errors import (
    BridgeError,
    CallTimeout,
    ConnectionClosed,
    DependenciesRefused,
    LaunchRefused,
    SandboxMismatch,
    ServerError,
    VerificationFailed,
)
from console_bridge._governance._policy import Policy
from console_bridge._identity import Owner, check_owner
from console_bridge._transport._stdio import base_environment
from console_bridge._vetting._font_cache import font_startup_code
from console_bridge._vetting._launch import check_project_config, check_project_overrides, worker_python
from console_bridge._vetting._profiles import Profile, translate
from console_bridge._vetting._sandbox import SandboxPolicy, SandboxTextError, parse_sandbox_description
from console_bridge._vetting._version import Binary, check_binary, resolve_command
from console_bridge._vetting._worker_env import checked_venv

__all__ = ["LaunchInputs", "LaunchOptions", "Launcher", "sandbox_refusal", "vanished_mount_point"]


class LaunchOptions(Protocol):
    """What the launcher reads of the console's checked options (``AsyncConsole`` has them as
    attributes; they are read at start, as they are then)."""

    @property
    def workspace(self) -> Path: ...
    @property
    def languages(self) -> tuple[str, ...]: ...
    @property
    def dependencies(self) -> str: ...
    @property
    def project_config(self) -> bool: ...
    @property
    def owner(self) -> Owner: ...
    @property
    def policy(self) -> Policy: ...
    @property
    def recordings_base(self) -> Path: ...
    @property
    def poll_window(self) -> float: ...
    @property
    def timeout(self) -> float: ...
    @property
    def startup_timeout(self) -> float: ...
    @property
    def version_timeout(self) -> float: ...
    @property
    def shutdown_grace(self) -> float: ...


@dataclass(frozen=True, slots=True)
class LaunchInputs:
    """What only the launch uses, checked by the console: the profile, the writable and read
    roots, the allowlisted extra ``serve`` arguments, the environment, the binary and the worker's
    Python as given, and the session's nonce (the outcome hooks' folder)."""

    profile: Profile
    roots: Sequence[Path]
    read_roots: Sequence[Path]
    extra_args: Sequence[str]
    env: Mapping[str, str]
    command: str | os.PathLike[str] | None
    python: str | os.PathLike[str] | None
    nonce: str


class Launcher:
    """Starting and stopping one session; what it learnt on the way (the binary, the connection,
    the verified sandbox, the probe's figures) and the session's lifecycle ``state``.

    It reads the console's options (``options``, read at start) and the launch inputs; it hands
    the other parts what start learnt: the worker's facts to ``boot``, the meter to ``calls``, the
    outcome log to ``observer``, the verified ``send`` to ``model``. ``require(what)`` is the
    console's check before a call; ``locate_recording`` finds the recording before a stop.
    """

    def __init__(
        self,
        options: LaunchOptions,
        inputs: LaunchInputs,
        *,
        confined: SessionConfinement,
        observer: CellObserver,
        boot: WorkerBoot,
        calls: CallPath,
        model: ModelTool,
        require: Callable[[str], AsyncMcpConnection],
        locate_recording: Callable[[], None],
    ) -> None:
        self._options = options
        self._inputs = inputs
        self._confined = confined
        self._observer = observer
        self._boot = boot
        self._calls = calls
        self._model = model
        self._require = require
        self._locate_recording = locate_recording
        #: new, connecting, ready or closed (a closed console never reopens)
        self.state = "new"
        self.conn: AsyncMcpConnection | None = None
        self.binary: Binary | None = None
        self.tmpdir: Path | None = None
        #: the sandbox the profile requires, and the one the server advertised (verified equal)
        self.expected: SandboxPolicy | None = None
        self.advertised: SandboxPolicy | None = None
        self.probe_checked = 0
        self.probe_ms: float | None = None
        #: the session's process tree, measured where no cgroup counts it
        self.tree: TreeMeter | None = None
        #: why SQL is withheld (the worker's Python cannot import duckdb), if it is
        self.sql_withheld: str | None = None

    @property
    def server_languages(self) -> tuple[str, ...]:
        """The languages the server offers: ``languages`` minus SQL when it is withheld."""
        languages = self._options.languages
        if self.sql_withheld is not None:
            return tuple(lang for lang in languages if lang != "sql")
        return languages

    def _profile_writable(self) -> list[Path]:
        """The profile's ``sandbox.filesystem.read_write`` entries, as host paths."""
        out = []
        for item in self._inputs.profile.read_write:
            path = Path(item).expanduser()
            out.append(path if path.is_absolute() else self._options.workspace / path)
        return out

    def _serve_args(self, binary: Binary, python: Path) -> tuple[list[str], SandboxPolicy]:
        c_args, expected = translate(
            self._inputs.profile, binary.version, self._options.workspace, self._inputs.roots, deny=self._confined.deny
        )
        argv = ["serve", "--no-global-config" if self._options.project_config else "--no-config"]
        argv += ["-c", f"python={python}", *c_args, *self._inputs.extra_args]
        langs = ", ".join(self.server_languages)
        argv += ["-c", f"languages=[{langs}]"]
        if "r" in self._options.languages:
            argv += ["-c", "r.resolution=disabled", "-c", "r.packages=[]"]
        if "python" in self._options.languages:
            # One startup entry does both: the outcome hooks (see _outcome) and, for SQL, a
            # DuckDB connection that Python owns (with R installed SQL would go to R's DuckDB).
            sql = "sql" in self.server_languages
            offline = expected.network == "restricted"
            code = python_startup_code(self._inputs.nonce, sql=sql, offline=offline, fonts=font_startup_code())
            argv += ["-c", "startup.language=python", "-c", f"startup.code={yaml_string(code)}"]
        if self._options.dependencies == "deny":
            argv += ["-c", "tool.parameters.requirements.enabled=false"]
        for root in self._inputs.roots:
            argv += ["--writable-root", str(root)]
        return argv, expected

    def _check_worker_env(self, python: Path) -> None:
        """The worker's Python must have its embedding library (refused otherwise: mcp-console would
        fail later with a less helpful message); SQL needs duckdb there, else SQL is withheld with
        one notice."""
        if "python" not in self._options.languages:
            return
        needed = ("duckdb",) if "sql" in self._options.languages else ()
        facts = checked_venv(python, needed, timeout=self._options.version_timeout)
        if facts is None:
            return
        self._boot.facts, self._boot.environment = facts, python  # what the worker's links and fonts come from
        if facts.embedding_missing:
            raise LaunchRefused(f"the worker's Python ({python}) cannot run Python cells: {facts.embedding_fix()}")
        if "duckdb" in facts.missing:
            self.sql_withheld = (
                f"SQL is withheld: the worker's Python ({python}) cannot import duckdb. Install it there "
                "(`pip install 'duckdb>=1.0'`) or pass python= (CLI: --python) pointing at "
                "an environment that has it; Python cells are unaffected."
            )
            self._observer.notices.append(self.sql_withheld)

    def _outcome_env(self) -> dict[str, str]:
        """The R hook: an R_PROFILE_USER file (it sources the user's own), outside the denied
        session folders so the sandboxed worker can read it; removed when the session ends."""
        if "r" not in self._options.languages:
            return {}
        text = r_profile_text(self._inputs.nonce, self._inputs.env.get("R_PROFILE_USER"))
        return {"R_PROFILE_USER": str(self._confined.write_r_profile(text))}

    async def start(self) -> None:
        """Check, launch and verify; raise before any call when anything does not check out.

        Raises :class:`VersionRefused`/:class:`LaunchRefused` (nothing started),
        :class:`SandboxMismatch`, :class:`DependenciesRefused`, :class:`VerificationFailed`
        (started, verified, stopped before any call), :class:`CallTimeout`.
        """
        check_owner(self._options.owner, "console")
        if self.state != "new":
            if self.state == "closed":
                raise ConnectionClosed("this console is closed; create a new AsyncConsole")
            return
        self.state = "connecting"
        try:
            binary = await anyio.to_thread.run_sync(
                lambda: check_binary(resolve_command(self._inputs.command), timeout=self._options.version_timeout)
            )
            self.binary = binary
            if check_project_config(self._options.workspace, self._options.project_config) is not None:
                await anyio.to_thread.run_sync(
                    lambda: check_project_overrides(
                        binary.path, self._options.workspace, timeout=self._options.version_timeout
                    )
                )
            python = await anyio.to_thread.run_sync(lambda: worker_python(self._inputs.python))
            await anyio.to_thread.run_sync(lambda: self._check_worker_env(python))
            self._abort_if_closed()
            base = self._options.recordings_base
            base.mkdir(parents=True, exist_ok=True)
            await anyio.to_thread.run_sync(
                lambda: self._confined.prepare(
                    owner=str(self._options.owner),
                    profile=self._inputs.profile.name,
                    recording_base=base,
                    writable=self._inputs.profile.base == "workspace"
                    or bool(self._inputs.roots)
                    or bool(self._profile_writable()),
                )
            )
            self._boot.link()  # overlaps the view's build; waited for before the server starts
            supervision = await anyio.to_thread.run_sync(
                lambda: self._confined.supervision(
                    recording_base=base,
                    python=python,
                    binary=binary.path,
                    languages=self._options.languages,
                    workspace_writable=self._inputs.profile.base == "workspace",
                    writable_roots=[*self._inputs.roots, *self._profile_writable()],
                    read_roots=list(self._inputs.read_roots),
                    search_path=self._inputs.env.get("PATH") or base_environment().get("PATH"),
                    protected=protected_roots(
                        binary.version,
                        self._options.workspace,
                        [*self._inputs.roots, *self._profile_writable()],
                        workspace_writable=self._inputs.profile.base == "workspace",
                    ),
                )
            )
            argv, self.expected = self._serve_args(binary, python)
            # mcp-console boots the worker, which runs the startup code, as soon as it starts: what
            # the startup code looks for (the font lists, the bytecode links) must be there first.
            await self._boot.wait()
            self._abort_if_closed()
            self.tmpdir = self._confined.tmpdir
            env = (
                base_environment()
                | dict(self._inputs.env)
                | self._outcome_env()
                | {
                    "TMPDIR": str(self.tmpdir),
                    "MCP_CONSOLE_HOME": str(base),
                    "MCP_CONSOLE_CACHE_DIR": str(self._confined.cache_dir / "mcp-console"),  # see WorkerBoot.link
                    "XDG_CACHE_HOME": str(self._confined.cache_dir),
                }
                | self._confined.path_env()
            )
            config = {
                "mcpServers": {
                    SERVER: {"command": str(binary.path), "args": argv, "env": env, "cwd": str(self._options.workspace)}
                }
            }
            self.conn = AsyncMcpConnection(
                config,
                SERVER,
                owner=self._options.owner,
                tools=["send"],
                policy=Policy(
                    mode="read_write",
                    approve_writes=False,
                    pin_schemas=self._options.policy.pin_schemas,
                    sanitize_descriptions=False,
                    audit=self._options.policy.audit_log,
                    max_bytes=self._options.policy.max_bytes,
                ),
                timeout=self._options.poll_window + self._options.timeout,
                startup_timeout=self._options.startup_timeout,
                shutdown_grace=self._options.shutdown_grace,
                supervision=supervision,
                protocol="legacy",  # mcp-console speaks the 2025 handshake: no 2026-07-28 probe per start
            )
            try:
                await self.conn.connect()
            except ConnectionClosed as exc:
                raise self.confinement_refusal(exc) from None
            self._confined.attach(self.conn.supervisor_pid or 0, base, server_pid=self.conn.pid)
            groups, supervisor = self._confined.usage_sources()
            self._calls.meter = CellMeter(group_meter(groups), WorkerMeter(supervisor))
            self.tree = TreeMeter(supervisor)
            # The hooks write under the TMPDIR as the session's processes see it (a tmpfs of its own).
            self._observer.outcomes = OutcomeLog(self._confined.tmp_view(), self._inputs.nonce)
            await self._verify(self.conn, binary)
            self._abort_if_closed()
            await self.probe(base)
            self._boot.unlink()  # the worker booted with the probe
            self._abort_if_closed()
            self._calls.log_cells = True
            self._boot.armed = True
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
        self.state = "ready"

    def confinement_refusal(self, exc: ConnectionClosed) -> BridgeError:
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
            f"the session's confinement could not be set up: {lines[-1]}. Nothing ran.{_container_fix()} "
            "`console-bridge doctor` checks namespaces, cgroups and the systemd manager on this host.",
            server=SERVER,
            details={"stderr_tail": tail[-2000:]},
        )

    def _abort_if_closed(self) -> None:
        """``close()``/``cancel()`` ran while ``start()`` awaited: launch nothing more."""
        if self.state == "closed":
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
        if self._options.dependencies == "deny" and "requirements" in props:
            raise DependenciesRefused(
                "dependencies='deny' but the send tool still offers `requirements` (package installs); "
                "it was stopped before any call",
                server=SERVER,
                pid=conn.pid,
            )
        if self._options.dependencies == "allow" and "requirements" not in props:
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
        expected = self.expected
        assert expected is not None
        if advertised != expected:
            raise SandboxMismatch(
                f"the server advertises [{advertised.describe()}] but profile {self._inputs.profile.name!r} requires "
                f"[{expected.describe()}]; it was stopped before any call. Check the project config and "
                "writable_roots (mcp-console refuses workspace writes when the workspace is the home folder).",
                server=SERVER,
                pid=conn.pid,
                details={"advertised": advertised.as_dict(), "expected": expected.as_dict()},
            )
        self.advertised = advertised
        self._model.schema = dict(schema)
        self._model.description = description

    async def probe(self, base: Path) -> None:
        """Prove the deny rules: a probe cell must fail to read every canary and denied place."""
        language = next(lang for lang in ("python", "sql", "r") if lang in self._options.languages)
        writable = self.expected.writable if self.expected is not None else frozenset()
        workspace_writable = str(self._options.workspace) in writable or "workspace" in writable
        code = await anyio.to_thread.run_sync(lambda: self._confined.probe_cell(base, workspace_writable, language))
        conn = self._require("probe")
        began = time.perf_counter()
        for attempt in (1, 2):
            refused: BridgeError | None = None
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._adopt_during_probe)
                try:
                    result = await self._calls.call(
                        {language: code, "timeout_ms": int(self._options.startup_timeout * 1000)}
                    )
                except BridgeError as exc:  # (raised here, the task group would wrap it in an ExceptionGroup)
                    refused = exc
                tg.cancel_scope.cancel()  # (an adoption under way finishes first: its thread is not abandoned)
            if refused is None:
                break
            if attempt == 1 and vanished_mount_point(refused) is not None:
                # Another session on this workspace was closing: mcp-console removes the folders it made
                # to mount over (.agents, .git, ...) while this sandbox was being set up. The next
                # worker start makes them again.
                await anyio.sleep(0.2)
                continue
            raise sandbox_refusal(refused) from None
        self.probe_ms = (time.perf_counter() - began) * 1000
        if result.running:
            raise CallTimeout(
                f"the confinement probe did not finish within startup_timeout={self._options.startup_timeout:g}s; the "
                "server was stopped before any user cell. Raise startup_timeout on a slow host.",
                server=SERVER,
                pid=conn.pid,
            )
        self.probe_checked = self._confined.check_probe(result.text, server=SERVER, pid=conn.pid)

    async def _adopt_during_probe(self) -> None:
        """Look for the worker every 10 ms while the probe boots it; the first cell adopts it
        otherwise (``SessionConfinement.mark``)."""
        with contextlib.suppress(OSError, psutil.Error):  # (the first cell tries again, and says why)
            while not await anyio.to_thread.run_sync(self._confined.adopt_early):
                await anyio.sleep(0.01)

    async def _teardown(self, *, cancel: bool) -> None:
        conn = self.conn
        if conn is not None:
            if cancel:
                await conn.cancel()
            else:
                await conn.close()
        if self._calls.meter is not None:
            self._calls.meter.close()
        self._calls.cells.close()
        self._observer.events.close()
        if self._observer.outcomes is not None:
            self._observer.outcomes.close()
        await self._boot.close()  # (the links' thread works in the session's folder, which release removes)
        await anyio.to_thread.run_sync(self._confined.release)
        self.state = "closed"

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


def _container_fix() -> str:
    """In a container, a sentence naming its runtime's fix (see ``_confinement._container``), else ``""``."""
    container = detect_host().container
    return f" In this {container.label}: {container.fix()}." if container is not None else ""


def sandbox_refusal(exc: BridgeError) -> BridgeError:
    """mcp-console's own sandbox (bubblewrap) could not create its namespaces for the probe cell:
    a one-line refusal naming the fix (a container's profile may allow ``unshare`` but not ``clone``
    with namespace flags); any other error as it is."""
    text = str(exc)
    lines = [line.strip() for line in text.splitlines() if "bwrap:" in line]
    if not isinstance(exc, ServerError) or not lines:
        return exc
    said = lines[0][lines[0].index("bwrap:") :]
    vanished = vanished_mount_point(exc)
    if vanished is not None:
        fix = (
            f" The folder it mounts over ({vanished}) vanished while it started, twice: another session on this "
            "workspace closing removes it (mcp-console makes and removes such folders). Start again, or give "
            "concurrent sessions workspaces of their own."
        )
    else:  # a namespace or mount the host's profile forbids: a container's runtime names its fix
        fix = _container_fix() if _PERMISSION.search(said) else ""
    return LaunchRefused(
        f"mcp-console's sandbox could not start the probe cell: {said} Nothing ran.{fix} `console-bridge doctor` "
        "checks namespaces on this host.",
        server=SERVER,
        details={"server_text": text[-2000:]},
    )


_PERMISSION = re.compile(r"Operation not permitted|Permission denied|No permissions")
_VANISHED = re.compile(
    r"bwrap: Can't (?:mount \w+ on|bind mount \S+ on|create file at) (\S+): No such file or directory"
)


def vanished_mount_point(exc: BridgeError) -> str | None:
    """The path bubblewrap found missing as it mounted over it (a folder another session's close
    removed from a shared workspace), from the server's error; None for any other failure."""
    if not isinstance(exc, ServerError):
        return None
    found = _VANISHED.search(str(exc))
    return found.group(1).removeprefix("/newroot") if found else None
