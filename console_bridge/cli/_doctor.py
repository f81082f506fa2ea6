"""``console-bridge doctor``: check everything a ``run`` needs, on this machine, for real."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import click

from console_bridge._cells._recordings import Recordings, default_recordings_root
from console_bridge._confinement._host import detect_host
from console_bridge._confinement._idmap import session_ids
from console_bridge._confinement._limits import Limits, Mechanism
from console_bridge._confinement._namespaces_check import check_namespaces
from console_bridge._confinement._plan import TREE_WIDE, plan_confinement
from console_bridge._confinement._unconfinable import host_gap
from console_bridge._confinement._view import build_view
from console_bridge._console._session import AsyncConsole
from console_bridge._errors import BridgeError, LaunchRefused
from console_bridge._extras import install_hint
from console_bridge._vetting._environments import session_environments
from console_bridge._vetting._launch import worker_python
from console_bridge._vetting._profiles import load_profile
from console_bridge._vetting._version import QUALIFIED_VERSIONS, Binary, check_binary, resolve_command
from console_bridge._vetting._worker_env import inspect_venv, missing_modules
from console_bridge._vetting._workspace import vet_workspace
from console_bridge.cli._common import FiniteFloat, error_text, human_size, table
from console_bridge.cli._doctor_capacity import capacity_text, capacity_walls

__all__ = ["doctor_command"]

_PROBE_TIMEOUT = 30.0  # seconds for `python -c "import duckdb"` and `R --version`


@dataclass
class Check:
    name: str
    status: str  # ok | warn | fail | info | skip
    detail: str
    required: bool = True
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return self.required and self.status == "fail"

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "required": self.required,
            "detail": self.detail,
            **self.data,
        }


def _check_binary(command: str | None) -> tuple[Check, Binary | None]:
    qualified = ", ".join(QUALIFIED_VERSIONS)
    try:
        binary = check_binary(resolve_command(command))
    except BridgeError as exc:
        return Check(
            "mcp-console", "fail", error_text(exc), data={"qualified_versions": list(QUALIFIED_VERSIONS)}
        ), None
    return (
        Check(
            "mcp-console",
            "ok",
            f"{binary.path}, version {binary.version_text} (qualified: {qualified})",
            data={
                "path": str(binary.path),
                "version": binary.version_text,
                "qualified": True,
                "qualified_versions": list(QUALIFIED_VERSIONS),
            },
        ),
        binary,
    )


def _check_python(python: str | None) -> tuple[Check, Path | None]:
    try:
        prefix = worker_python(python)
    except BridgeError as exc:
        return Check("worker python", "fail", error_text(exc)), None
    exe = prefix / "bin" / "python"
    try:
        proc = subprocess.run(
            [str(exe), "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
            capture_output=True,
            text=True,
            timeout=_PROBE_TIMEOUT,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        version = proc.stdout.strip() if proc.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        version = None
    if version is None:
        return Check("worker python", "fail", f"{prefix}: its python ({exe}) does not run"), None
    return Check(
        "worker python", "ok", f"{prefix} (Python {version})", data={"venv": str(prefix), "version": version}
    ), prefix


def _check_duckdb(prefix: Path | None) -> Check:
    if prefix is None:
        return Check("duckdb", "skip", "no worker python", required=False)
    try:
        proc = subprocess.run(
            [str(prefix / "bin" / "python"), "-c", "import duckdb; print(duckdb.__version__)"],
            capture_output=True,
            text=True,
            timeout=_PROBE_TIMEOUT,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return Check("duckdb", "warn", f"could not check ({exc}); SQL cells may not work", required=False)
    if proc.returncode != 0:
        return Check(
            "duckdb",
            "warn",
            f"not importable in {prefix}; SQL is withheld (Python cells work). Install it there: "
            f"{prefix}/bin/pip install duckdb",
            required=False,
            data={"importable": False},
        )
    version = proc.stdout.strip()
    return Check(
        "duckdb",
        "ok",
        f"{version} importable in the worker's venv (SQL cells work)",
        required=False,
        data={"importable": True, "version": version},
    )


_DATA_PACKAGES = ("pandas", "pyarrow", "matplotlib")


def _check_packages(prefix: Path | None) -> Check:
    """What an analysis usually imports (console-bridge's [datascience] extra); informational."""
    if prefix is None:
        return Check("data packages", "skip", "no worker python", required=False)
    missing = missing_modules(prefix, _DATA_PACKAGES, timeout=_PROBE_TIMEOUT)
    if missing is None:
        return Check("data packages", "warn", "could not check the worker's venv", required=False)
    if not missing:
        return Check("data packages", "ok", f"{', '.join(_DATA_PACKAGES)} importable", required=False)
    return Check(
        "data packages",
        "info",
        f"not in the worker's venv: {', '.join(missing)} (cells that import them fail). Add them with "
        f"{install_hint('datascience', missing, pip=f'{prefix}/bin/pip')}, or the packages you need",
        required=False,
        data={"missing": list(missing)},
    )


def _check_embedding(prefix: Path | None) -> Check:
    """mcp-console embeds Python from the worker's libpython3.X.so (Debian: libpython3.X-dev)."""
    if prefix is None:
        return Check("python embedding", "skip", "no worker python")
    facts = inspect_venv(prefix, timeout=_PROBE_TIMEOUT)
    if facts is None:
        return Check("python embedding", "warn", f"could not ask {prefix}'s interpreter", required=False)
    if facts.embedding_library is None:
        return Check("python embedding", "ok", "a statically linked Python (nothing to load)")
    if facts.embedding_missing:
        return Check("python embedding", "fail", facts.embedding_fix(), data={"library": str(facts.embedding_library)})
    return Check("python embedding", "ok", f"{facts.embedding_library}", data={"library": str(facts.embedding_library)})


def _check_namespaces() -> list[Check]:
    """Can a session's view be built here: the host's facts, then a real user+mount namespace."""
    host = detect_host(refresh=True)
    gap = host_gap(host)
    shown = host.name if host.linux else (gap.platform if gap is not None else host.platform)
    inside = host.container.runtime if host.container is not None else None
    checks = [
        Check(
            "host",
            "info",
            shown,
            required=False,
            data={"platform": host.platform, "uid": host.uid, "container": inside},
        )
    ]
    if gap is not None:
        # the same words as the LaunchRefused every entry point raises here
        checks.append(
            Check(
                "namespaces",
                "fail",
                gap.text(),
                data={"platform": host.platform, "missing": gap.missing, "fix": gap.fix},
            )
        )
        return checks
    ids = None
    if host.namespace_mode == "mapped":
        try:
            ids = session_ids()
        except BridgeError as exc:
            checks.append(Check("session ids", "fail", error_text(exc)))
            return checks
        kind = f"user namespace mapping root to unprivileged host ids ({ids.text()}), mount, UTS and IPC namespaces"
    else:
        kind = f"user namespace mapping uid {host.uid} to itself, mount, UTS and IPC namespaces"
    result = check_namespaces(host.namespace_mode, ids.config() if ids is not None else None, timeout=_PROBE_TIMEOUT)
    problem = result.error or result.isolated
    if problem is not None:
        checks.append(
            Check(
                "namespaces",
                "fail",
                f"building a {kind} failed: {problem}. "
                + (
                    f"In this {host.container.label}: {host.container.fix()}"
                    if host.container is not None
                    else "A container may need a seccomp profile that allows unshare and mount (this package's "
                    "sandbox_profiles/seccomp-container.json); a host may need "
                    "`sysctl kernel.unprivileged_userns_clone=1`"
                ),
            )
        )
        return checks
    checks.append(Check("namespaces", "ok", f"{kind}: a session's read view can be built"))
    if ids is not None:
        checks.append(
            Check(
                "session ids",
                "ok",
                f"a session's root was host uid {result.facts.get('root_is')} "
                f"(uid_map {result.facts.get('uid_map')!r}); what it wrote through an idmapped mount landed owned "
                "by root",
                data={"range": ids.text(), "uid_map": result.facts.get("uid_map")},
            )
        )
    checks.append(
        Check(
            "host privilege",
            "ok",
            "no global sysctl writable, a UTS namespace (host name) and a session keyring of its own",
            data={key: result.facts.get(key) for key in ("sysctl_writable", "uts", "uid")},
        )
    )
    return checks


def _check_limits() -> list[Check]:
    """Each default limit and the mechanism that holds it on this host (a dry run of a session's plan)."""
    host = detect_host()
    if host.namespace_problem is not None:
        return [Check("limits", "skip", "no session can start here (see namespaces)")]
    cgroups = "cgroup v2" if host.cgroup_v2 else "cgroup v1"
    systemd = f"; systemd {host.systemd} manager (transient scopes)" if host.systemd else "; no systemd manager"
    checks = [Check("cgroups", "info", cgroups + systemd, required=False)]
    try:
        # a session whose cells may write the workspace (``--profile workspace``): the writes limit's mechanism
        plan = plan_confinement(Limits(enforce="best_effort"), f"doctor-{os.getpid()}", host, writable=True)
    except BridgeError as exc:
        return [*checks, Check("limits", "fail", error_text(exc))]
    plan.release()
    for name, report in plan.reports.items():
        value = report.value
        if value is None:
            checks.append(Check(f"limit {name}", "info", "not set by default", required=False))
            continue
        shown = human_size(int(value)) if name in ("memory", "tmpdir", "recording", "writes") else str(value)
        if report.enforced_by is None:
            checks.append(
                Check(
                    f"limit {name}",
                    "fail",
                    f"{shown}: cannot be enforced here ({report.note})",
                    data={"value": value, "enforced_by": None},
                )
            )
            continue
        strength = {
            "recording": "the session's total",
            "writes": "bridge accounting; read-only profiles: nothing to write",
            "files": "bridge accounting; read-only profiles: nothing to write",
        }.get(name) or (
            "whole tree"
            if report.enforced_by in TREE_WIDE
            else "the bridge's watch of the whole sandbox"
            if report.enforced_by == Mechanism.WATCHED
            else "per process"
        )
        note = f"; {report.note}" if report.note else ""
        checks.append(
            Check(
                f"limit {name}",
                "ok",
                f"{shown} by {report.enforced_by} ({strength}){note}",
                data={"value": value, "enforced_by": report.enforced_by.value},
            )
        )
    return checks


def _check_capacity() -> Check:
    """How many sessions this user can hold at once, and the kernel setting that stops them first."""
    walls = capacity_walls()
    data = {
        "walls": [
            {"setting": w.setting, "value": w.value, "per_session": w.per_session, "sessions": w.sessions}
            for w in walls
        ]
    }
    return Check("capacity", "info", capacity_text(walls), required=False, data=data)


def _check_view(binary: Binary | None, prefix: Path | None) -> Check:
    """What a cell of a session started here would see of the host (besides the workspace and TMPDIR)."""
    if host_gap(detect_host()) is not None:
        return Check("read view", "skip", "no session can start here (see namespaces)", required=False)
    if binary is None or prefix is None:
        return Check("read view", "skip", "needs a qualified mcp-console and a worker python")
    environments = session_environments(prefix, binary.path, ("python", "sql"))
    # (the workspace is whatever a run names: left out here, as are read roots)
    view = build_view(
        root="/nonexistent", workspace="/nonexistent/workspace", workspace_writable=False, environments=environments
    )
    paths = [entry.path for entry in view.entries]
    return Check(
        "read view",
        "ok",
        f"{', '.join(paths)} (+ the workspace, read roots and TMPDIR); {len(view.masks)} unreadable /etc "
        "entries masked; nothing else of the host exists for cells. Names hidden inside a tree shown (/etc "
        "entries not everyone may read, the workspace's .git, deny_read) are 'watched': masked again within "
        "milliseconds when the host renames, recreates or creates them, a weaker mechanism than a mount made "
        "before start (a read in that moment can get through)",
        required=False,
        data={"paths": paths, "masks": list(view.masks)},
    )


def _check_r() -> Check:
    found = shutil.which("R")
    if found is None:
        return Check(
            "R",
            "info",
            "not installed (no R on PATH): .R files cannot run; install it, e.g. apt-get install r-base-core",
            required=False,
            data={"path": None},
        )
    version = ""
    try:
        proc = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=_PROBE_TIMEOUT, check=False)
        version = (proc.stdout.splitlines() or [""])[0].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return Check("R", "ok", f"{found}" + (f" ({version})" if version else ""), required=False, data={"path": found})


_SANDBOX_PROBE = """\
import errno as _e, os as _o, socket as _s
_r = []
try:
    _k = _s.socket(_s.AF_INET, _s.SOCK_STREAM)
    _k.settimeout(5)
    _k.connect(("127.0.0.1", {port}))
    _r.append("tcp=connected")
except OSError as _x:
    _r.append("tcp=refused:" + (_e.errorcode.get(_x.errno, str(_x.errno)) if _x.errno else type(_x).__name__))
try:
    with open(_o.path.join({workspace!r}, "doctor-probe.txt"), "w") as _f:
        _f.write("x")
    _r.append("workspace=writable")
except OSError as _x:
    _r.append("workspace=read-only:" + _e.errorcode.get(_x.errno or 0, "error"))
print("doctor " + " ".join(_r))
"""


async def _sandbox_probe(binary: Binary, python: Path, workspace: Path, recordings: Path, timeout: float) -> str:
    listener = socket.create_server(("127.0.0.1", 0))
    try:
        port = listener.getsockname()[1]
        code = _SANDBOX_PROBE.format(port=port, workspace=str(workspace))
        with anyio.fail_after(timeout):
            async with AsyncConsole(
                workspace,
                command=binary.path,
                python=python,
                recordings_dir=recordings,
                startup_timeout=timeout,
            ) as console:
                trivial = await console.run(python="print(6 * 7)", timeout=timeout)
                if trivial.text.strip() != "42":
                    raise RuntimeError(f"the trivial cell `print(6 * 7)` printed {trivial.text[:200]!r}, not 42")
                probe = await console.run(python=code, timeout=timeout)
                sandbox = console.status().sandbox or {}
        return probe.text.strip() + " | " + json.dumps(sandbox)
    finally:
        listener.close()


def _check_sandbox(binary: Binary | None, python: Path | None, timeout: float) -> Check:
    if host_gap(detect_host()) is not None:
        return Check("sandbox", "skip", "no session can start here (see namespaces)")
    if binary is None or python is None:
        return Check("sandbox", "skip", "needs a qualified mcp-console and a worker python (see above)")
    scratch = Path(tempfile.mkdtemp(prefix="console-bridge-doctor-"))
    workspace = scratch / "workspace"
    workspace.mkdir()
    started = time.monotonic()
    try:
        text = anyio.run(_sandbox_probe, binary, python, workspace, scratch / "recordings", timeout)
    except TimeoutError:
        return Check("sandbox", "fail", f"the check did not finish within {timeout:g}s")
    except BridgeError as exc:
        return Check("sandbox", "fail", f"a session could not start or run: {error_text(exc)}")
    except (RuntimeError, OSError) as exc:
        return Check("sandbox", "fail", str(exc))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    elapsed = time.monotonic() - started
    probe, _sep, sandbox = text.partition(" | ")
    fields = dict(item.split("=", 1) for item in probe.removeprefix("doctor ").split() if "=" in item)
    tcp, ws = fields.get("tcp", "?"), fields.get("workspace", "?")
    data = {"tcp_127_0_0_1": tcp, "workspace_write": ws, "advertised": json.loads(sandbox or "{}")}
    if not tcp.startswith("refused"):
        return Check("sandbox", "fail", f"code in the sandbox reached 127.0.0.1 over TCP ({tcp})", data=data)
    if not ws.startswith("read-only"):
        return Check("sandbox", "fail", f"code could write the workspace under the read-only profile ({ws})", data=data)
    return Check(
        "sandbox",
        "ok",
        f"verified session started and ran a cell in {elapsed:.1f}s; TCP to 127.0.0.1 {tcp}; "
        f"workspace {ws} under the read-only profile",
        data=data,
    )


def _check_recordings(root: Path) -> Check:
    existing = root
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        return Check("recordings dir", "fail", f"{root} is not writable (checked {existing})", data={"path": str(root)})
    if root.is_dir():
        try:
            with tempfile.NamedTemporaryFile(dir=root, prefix=".doctor-"):
                pass
        except OSError as exc:
            return Check("recordings dir", "fail", f"{root} is not writable ({exc})", data={"path": str(root)})
        recordings = Recordings(root).list()
        size = sum(rec.size_bytes for rec in recordings)
        detail = f"{root} (writable; {len(recordings)} recordings, {human_size(size)})"
        return Check("recordings dir", "ok", detail, data={"path": str(root), "count": len(recordings), "bytes": size})
    return Check("recordings dir", "ok", f"{root} (will be created; {existing} is writable)", data={"path": str(root)})


def _check_configs(cwd: Path) -> list[Check]:
    checks = []
    try:
        vet_workspace(cwd.resolve(), load_profile("read-only"))
    except LaunchRefused as exc:
        checks.append(
            Check("workspace", "warn", f"`run` here is refused: {exc.message}", required=False, data={"path": str(cwd)})
        )
    project = cwd / ".agents" / "console" / "config.yaml"
    if project.exists():
        checks.append(
            Check(
                "project config",
                "warn",
                f"{project} exists: `run` with this folder as the workspace is refused (it could widen the sandbox); "
                "remove it or pass --workspace elsewhere",
                required=False,
                data={"path": str(project)},
            )
        )
    else:
        local = cwd / ".agents" / "console"
        note = f"; recordings of sessions here go to {local}" if local.is_dir() else ""
        checks.append(Check("project config", "ok", f"none in {cwd}{note}", required=False, data={"path": None}))
    home = os.environ.get("MCP_CONSOLE_HOME")
    candidates = [Path(home) / "config.yaml"] if home else []
    candidates.append(Path.home() / ".agents" / "console" / "config.yaml")
    found = [str(path) for path in candidates if path.exists()]
    if found:
        detail = f"{', '.join(found)}: present, ignored by console-bridge (it launches with --no-config)"
    else:
        detail = "none (console-bridge would ignore one anyway)"
    checks.append(Check("global config", "info", detail, required=False, data={"paths": found}))
    return checks


DOCTOR_HELP = """Check that `console-bridge run` can work here, for real.

\b
Checks: the mcp-console binary and whether its version is qualified; the host
(user namespaces and the AppArmor setting, cgroup version and delegation, a
systemd manager) and the mechanism that holds each limit; that a
verified session starts in a temporary workspace, runs a cell, cannot reach
127.0.0.1 over TCP and cannot write the workspace; the worker's Python and
whether duckdb imports there (SQL cells) and its embedding library
(libpython3.X.so); the read view; R (for .R files); the recordings
folder; a project config in the current folder (refused by `run`) and a global
mcp-console config (ignored). Exits 1 when a required check fails.

\b
Examples:
  console-bridge doctor
  console-bridge doctor --json
  console-bridge doctor --command ~/.venvs/mc/bin/mcp-console --python ~/.venvs/work
"""


@click.command("doctor", help=DOCTOR_HELP)
@click.option("--json", "json_output", is_flag=True, help="Print the checks as one JSON document.")
@click.option("--command", metavar="PATH", help="The mcp-console binary to check (default: as `run` finds it).")
@click.option("--python", metavar="VENV", help="The worker venv to check (default: as `run` picks it).")
@click.option(
    "--recordings-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="The recordings folder to check (default: the user data folder).",
)
@click.option(
    "--timeout",
    type=FiniteFloat(min=1),
    default=60.0,
    show_default=True,
    metavar="SECONDS",
    help="Bound on the sandbox check.",
)
@click.pass_context
def doctor_command(
    ctx: click.Context,
    json_output: bool,
    command: str | None,
    python: str | None,
    recordings_dir: Path | None,
    timeout: float,
) -> None:
    from console_bridge import __version__

    binary_check, binary = _check_binary(command)
    python_check, prefix = _check_python(python)
    checks = [
        binary_check,
        *_check_namespaces(),
        *_check_limits(),
        _check_capacity(),
        _check_sandbox(binary, prefix, timeout),
        python_check,
        _check_embedding(prefix),
        _check_view(binary, prefix),
        _check_duckdb(prefix),
        _check_packages(prefix),
        _check_r(),
        _check_recordings(recordings_dir.absolute() if recordings_dir else default_recordings_root()),
        *_check_configs(Path.cwd()),
    ]
    ok = not any(check.failed for check in checks)
    if json_output:
        document = {
            "console_bridge": __version__,
            "python": sys.executable,
            "ok": ok,
            "checks": [check.as_dict() for check in checks],
        }
        click.echo(json.dumps(document, indent=2))
    else:
        click.echo(f"console-bridge {__version__} doctor\n")
        rows = [[check.status.upper() if check.failed else check.status, check.name, check.detail] for check in checks]
        click.echo(table(["status", "check", "detail"], rows))
        failed = [check.name for check in checks if check.failed]
        click.echo("\n" + ("All required checks passed." if ok else f"Required checks failed: {', '.join(failed)}."))
    ctx.exit(0 if ok else 1)
