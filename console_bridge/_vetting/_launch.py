"""Everything decided before an mcp-console server starts: arguments on an allowlist, writable
roots that cannot widen the sandbox, no project config unless opted in, the worker's Python."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import platformdirs

from console_bridge._errors import LaunchRefused

__all__ = [
    "check_project_config",
    "find_r",
    "shared_temp_dirs",
    "split_args",
    "validate_root",
    "worker_python",
]

#: System folders no writable root may be, or lie inside.
SYSTEM_DIRS = (
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/proc",
    "/run",
    "/sbin",
    "/sys",
    "/usr",
    "/var",
    "/opt",
    "/srv",
    "/snap",
)
#: Folders inside SYSTEM_DIRS that are ordinary scratch space.
SCRATCH_DIRS = ("/var/tmp",)
_ALLOWED_C = ("sandbox.network=restricted",)
_REFUSED_HINT = {
    "--no-sandbox": "disables the sandbox",
    "--no-config": "is decided by the bridge (project_config=)",
    "--no-global-config": "is decided by the bridge",
    "--no-project-config": "is decided by the bridge (project_config=)",
    "--config-file": "would load an unreviewed configuration file",
    "--default-config": "would inject settings below the bridge's",
}


def shared_temp_dirs() -> set[Path]:
    """Temporary folders every user shares: ``/tmp``, ``/var/tmp``, ``/dev/shm`` and ``$TMPDIR``'s folder."""
    found = {Path("/tmp"), Path("/dev/shm"), *(Path(s) for s in SCRATCH_DIRS)}
    with contextlib.suppress(OSError, RuntimeError):
        found.add(Path(tempfile.gettempdir()).resolve())
    return found


def _bad_text(value: str) -> bool:
    return any(ch in value for ch in "\x00\n\r")


def validate_root(raw: str | os.PathLike[str], *, what: str = "writable root") -> Path:
    """Make a writable root absolute and refuse ``/``, home, their ancestors, and system folders."""
    text = os.fspath(raw)
    if not text or _bad_text(text):
        raise LaunchRefused(f"{what} {text!r} is empty or contains a NUL byte or a line break; give a plain path")
    try:  # `~unknown-user`, a name too long, an unreadable parent: refused, never a crash
        path = Path(text).expanduser()
        exists, is_dir = path.exists(), path.is_dir()
        resolved = path.resolve() if is_dir else path
    except (OSError, RuntimeError) as exc:
        shown = text if len(text) <= 200 else text[:200] + "..."
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise LaunchRefused(f"{what} {shown!r} cannot be checked ({why}); give a plain existing path") from None
    if not exists:
        raise LaunchRefused(f"{what} {text!r} does not exist; create it first (writable roots are never created)")
    if not is_dir:
        raise LaunchRefused(f"{what} {text!r} is not a directory")
    home = Path.home().resolve()
    if resolved == Path("/") or resolved == home or resolved in home.parents:
        raise LaunchRefused(
            f"{what} {text!r} resolves to {str(resolved)!r}, which is the root, the home directory or an ancestor "
            "of it; grant a specific project folder instead"
        )
    for system in SYSTEM_DIRS:
        inside = resolved == Path(system) or Path(system) in resolved.parents
        scratch = any(resolved == Path(s) or Path(s) in resolved.parents for s in SCRATCH_DIRS)
        if inside and not (scratch and resolved != Path(system)):
            raise LaunchRefused(
                f"{what} {text!r} resolves to {str(resolved)!r}, inside the system folder {system}; "
                "grant a specific project folder instead"
            )
    if resolved in shared_temp_dirs():
        raise LaunchRefused(
            f"{what} {text!r} is the shared temporary folder {str(resolved)!r}; grant a folder inside it instead"
        )
    return resolved


def split_args(args: Sequence[str]) -> tuple[list[Path], list[str]]:
    """Validate extra ``serve`` arguments against the allowlist.

    Accepted: ``--writable-root PATH`` (also ``--writable-root=PATH``) and
    ``-c sandbox.network=restricted``. Returns the writable roots and the accepted
    ``-c`` arguments; anything else raises :class:`LaunchRefused` naming it.
    """
    if isinstance(args, str) or not all(isinstance(a, str) for a in args):
        raise LaunchRefused("args must be a sequence of strings, e.g. ['--writable-root', '/data/out']")
    roots: list[Path] = []
    extra: list[str] = []
    items = list(args)
    index = 0
    while index < len(items):
        arg = items[index]
        if _bad_text(arg):
            raise LaunchRefused(f"argument {arg!r} contains a NUL byte or a line break; it was refused")
        flag, has_eq, inline = arg.partition("=")
        if flag == "--writable-root":
            if has_eq:
                value = inline
            elif index + 1 < len(items):
                index += 1
                value = items[index]
            else:
                raise LaunchRefused("--writable-root needs a PATH after it")
            roots.append(validate_root(value))
        elif arg in ("-c", "--config") or arg.startswith(("-c", "--config=")):
            if arg in ("-c", "--config"):
                if index + 1 >= len(items):
                    raise LaunchRefused(f"{arg} needs KEY=VALUE after it")
                index += 1
                setting = items[index]
            else:
                setting = arg[2:] if arg.startswith("-c") else arg.partition("=")[2]
            if _bad_text(setting):
                raise LaunchRefused(f"setting {setting!r} contains a NUL byte or a line break; it was refused")
            if setting.replace(" ", "") not in _ALLOWED_C:
                key = setting.partition("=")[0].strip()
                raise LaunchRefused(
                    f"argument `-c {setting}` was refused: the setting {key!r} can widen or change the sandbox, "
                    "the worker or the tool, which the bridge controls. Only `-c sandbox.network=restricted` and "
                    "`--writable-root PATH` are accepted; use the profile and writable_roots= for the rest."
                )
            extra += ["-c", "sandbox.network=restricted"]
        else:
            hint = _REFUSED_HINT.get(flag, "is not on the allowlist")
            raise LaunchRefused(
                f"argument {arg!r} was refused: {flag} {hint}. Accepted extra arguments are "
                "`--writable-root PATH` and `-c sandbox.network=restricted`."
            )
        index += 1
    return roots, extra


def check_project_config(workspace: Path, allowed: bool) -> Path | None:
    """Refuse a workspace whose ``.agents/console/config.yaml`` exists unless ``allowed``."""
    config = workspace / ".agents" / "console" / "config.yaml"
    if config.exists() and not allowed:
        raise LaunchRefused(
            f"the workspace has a project config {str(config)!r}; mcp-console would load it, and it can widen "
            "the sandbox (network, filesystem, environment, executables). Review it, then opt in with "
            "project_config=True (command line: --project-config; the advertised sandbox is still verified), "
            "or remove it."
        )
    return config if config.exists() else None


def _is_venv(prefix: Path) -> bool:
    return (prefix / "pyvenv.cfg").is_file()


def worker_python(python: str | os.PathLike[str] | None, *, venv_timeout: float = 120.0) -> Path:
    """The environment the Python worker runs in.

    ``python=`` when given (it must be a standard venv with ``pyvenv.cfg``); else the
    running interpreter's environment when it is a venv; else a worker venv made once
    with ``--system-site-packages`` in the user cache folder and reused.
    """
    if python is not None:
        prefix = Path(python).expanduser().absolute()
        if prefix.is_file():  # an interpreter inside a venv: bin/python -> the venv
            prefix = prefix.parent.parent
        if not prefix.exists():
            raise LaunchRefused(
                f"python={os.fspath(python)!r} (CLI: --python) does not exist; create the venv with "
                f"`python3 -m venv {os.fspath(python)}` and install what the cells import into it, or pass another"
            )
        if not _is_venv(prefix):
            raise LaunchRefused(
                f"python={os.fspath(python)!r} is not a standard venv (no pyvenv.cfg); mcp-console refuses a bare "
                "interpreter prefix. Create one with `python -m venv DIR` and pass DIR."
            )
        return prefix
    current = Path(sys.prefix)
    if _is_venv(current):
        return current
    cache = Path(platformdirs.user_cache_dir("console-bridge"))
    target = cache / f"worker-venv-py{sys.version_info.major}.{sys.version_info.minor}"
    if not _is_venv(target):
        cache.mkdir(parents=True, exist_ok=True)
        try:
            subprocess.run(
                [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(target)],
                check=True,
                capture_output=True,
                timeout=venv_timeout,
            )
        except (subprocess.SubprocessError, OSError) as exc:
            raise LaunchRefused(
                f"could not create the worker venv {str(target)!r} ({exc}); pass python= pointing at a venv"
            ) from None
    return target


def find_r() -> Path | None:
    """The ``R`` executable on PATH, or None."""
    found = shutil.which("R")
    return Path(found) if found else None


#: Project settings that could forge what verification reads, so they are never accepted.
FORGING_KEYS = ("description", "name")


def check_project_overrides(binary: Path, workspace: Path, *, timeout: float) -> None:
    """With ``project_config=True``: refuse a project config that rewrites the tool's description.

    The sandbox is verified from the ``send`` description's last paragraph; a project
    ``tool.description`` could forge it. Asks ``mcp-console config resolve`` (bounded)
    what the project sets, without starting anything.
    """
    try:
        proc = subprocess.run(
            [str(binary), "config", "resolve", "--no-global-config", "--format", "json"],
            cwd=workspace,
            capture_output=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(Path.home()), "LANG": "C.UTF-8"},
            check=False,
        )
    except (subprocess.SubprocessError, OSError) as exc:
        raise LaunchRefused(f"could not check the project config with `mcp-console config resolve` ({exc})") from None
    if proc.returncode != 0:
        detail = proc.stderr.decode("utf-8", errors="replace").strip()[-500:]
        raise LaunchRefused(f"mcp-console rejects the project config in {str(workspace)!r}: {detail}")
    try:
        resolved = json.loads(proc.stdout or b"{}")
    except json.JSONDecodeError:
        raise LaunchRefused("`mcp-console config resolve` printed something that is not JSON; refusing") from None
    tool = resolved.get("tool") if isinstance(resolved, dict) else None
    if isinstance(tool, dict):
        for key in FORGING_KEYS:
            if key in tool:
                raise LaunchRefused(
                    f"the project config sets tool.{key}, which could forge the sandbox statement the bridge "
                    "verifies; remove it from .agents/console/config.yaml"
                )
