"""Finding the mcp-console binary and qualifying its version (the qualified set lives here only)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from console_bridge._errors import VersionRefused

__all__ = ["QUALIFIED_VERSIONS", "Binary", "check_binary", "resolve_command"]

#: The mcp-console versions console-bridge is qualified against. Nothing else runs.
QUALIFIED_VERSIONS: tuple[str, ...] = ("0.0.5", "0.0.6")
ENV_VAR = "CONSOLE_BRIDGE_MCP_CONSOLE"
_INSTALL = 'pip install "mcp-console==0.0.6"'
_VERSION_LINE = re.compile(r"^mcp-console (\S+)\s*$")


@dataclass(frozen=True, slots=True)
class Binary:
    """A qualified mcp-console executable."""

    path: Path
    version: Version

    @property
    def version_text(self) -> str:
        return str(self.version)


_cache: dict[tuple[str, int, int], Version] = {}


def resolve_command(command: str | os.PathLike[str] | None) -> Path:
    """The executable to run: ``command``, else ``$CONSOLE_BRIDGE_MCP_CONSOLE``, else the
    ``mcp-console`` beside the running interpreter, else the one on PATH."""
    if command is not None:
        text = os.fspath(command)
        found = shutil.which(text) if os.sep not in text else text
        if found is None:
            raise VersionRefused(
                f"mcp-console command {text!r} was not found on PATH; pass an absolute path or install a "
                f"qualified version ({', '.join(QUALIFIED_VERSIONS)}) with `{_INSTALL}`"
            )
        return Path(found).absolute()
    from_env = os.environ.get(ENV_VAR)
    if from_env:
        return Path(from_env).expanduser().absolute()
    beside = Path(sys.executable).parent / "mcp-console"
    if beside.exists():
        return beside
    on_path = shutil.which("mcp-console")
    if on_path is None:
        raise VersionRefused(
            "mcp-console is not installed (not beside this Python, not on PATH, "
            f"${ENV_VAR} unset); install a qualified version with `{_INSTALL}`"
        )
    return Path(on_path).absolute()


def check_binary(path: Path, *, timeout: float = 10.0) -> Binary:
    """Run ``path --version`` (bounded by ``timeout``) and refuse anything not qualified.

    A success is cached by path, size and mtime, so a second session does not spawn
    ``--version`` again. Raises :class:`VersionRefused` naming what was found, the
    qualified versions and the install command.
    """
    qualified = ", ".join(QUALIFIED_VERSIONS)
    try:
        stat = path.stat()
    except OSError:
        raise VersionRefused(
            f"mcp-console binary {str(path)!r} does not exist; install a qualified version ({qualified}) "
            f"with `{_INSTALL}`"
        ) from None
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key in _cache:
        return Binary(path, _cache[key])
    if not os.access(path, os.X_OK) or not path.is_file():
        raise VersionRefused(
            f"mcp-console binary {str(path)!r} is not an executable file; install a qualified version "
            f"({qualified}) with `{_INSTALL}`"
        )
    try:
        # Its own process group, so a hang is killed with whatever it started (a shim that forks).
        proc = subprocess.Popen(
            [str(path), "--version"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"},
            start_new_session=True,
        )
    except OSError as exc:
        raise VersionRefused(
            f"`{path} --version` could not run ({exc.strerror or exc}); install a qualified version "
            f"({qualified}) with `{_INSTALL}`"
        ) from None
    try:
        stdout, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)  # not reaped yet: the group id is still ours
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        raise VersionRefused(
            f"`{path} --version` did not answer within {timeout:g}s; this is not a working mcp-console. "
            f"Install a qualified version ({qualified}) with `{_INSTALL}`"
        ) from None
    output = stdout.decode("utf-8", errors="replace").strip()
    match = _VERSION_LINE.match(output)
    found = match.group(1) if match else None
    try:
        version = Version(found) if found else None
    except InvalidVersion:
        version = None
    if proc.returncode != 0 or version is None:
        raise VersionRefused(
            f"`{path} --version` printed {output[:200]!r} (exit status {proc.returncode}), which is not an "
            f"mcp-console version; qualified versions are {qualified}. Install one with `{_INSTALL}`"
        )
    if str(version) not in QUALIFIED_VERSIONS:
        raise VersionRefused(
            f"mcp-console at {str(path)!r} is version {version}, which console-bridge is not qualified "
            f"against (qualified: {qualified}); install one with `{_INSTALL}`"
        )
    _cache[key] = version
    return Binary(path, version)
