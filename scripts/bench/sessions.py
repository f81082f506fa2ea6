"""The two clients side by side: the raw ``mcp_console`` session and ``AsyncConsole``, with the same
serve arguments, environment and workspace."""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from .processes import Tracker, _alive, child_pids, tree_of
from .settings import RUNNING, Plan


def host_env(path: str | None = None) -> dict[str, str]:
    """What the bridge passes through from the host (PATH, HOME, LANG, LC_*); ``path`` replaces PATH."""
    env = {key: os.environ[key] for key in ("PATH", "HOME", "LANG") if key in os.environ}
    env.update({k: v for k, v in os.environ.items() if k.startswith("LC_")})
    if path is not None:
        env["PATH"] = path
    return env


#: Where the bridge's server finds its commands when the bridge hides some (R when a session does
#: not ask for it): a folder of symlinks inside the session's view (see _confinement/_view.py).
BRIDGE_SHIM = "/.console-bridge/path"


def mirror_server_path(bench: Bench, pid: int) -> tuple[str | None, list[str]]:
    """The same PATH for the raw client as the bridge's server had: a copy of its shim folder (read
    through /proc/PID/root) in the scratch root, or None when the server had the host's PATH. Also
    the host's commands the shim leaves out."""
    try:
        path = psutil.Process(pid).environ().get("PATH", "")
    except psutil.Error:
        return None, []
    if path != BRIDGE_SHIM:
        return None, []
    source = f"/proc/{pid}/root{BRIDGE_SHIM}"
    target = bench.scratch.root / "raw-path"
    target.mkdir()
    names = set(os.listdir(source))
    for name in names:
        os.symlink(os.readlink(os.path.join(source, name)), target / name)
    host: set[str] = set()
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        with contextlib.suppress(OSError):
            host.update(os.listdir(folder))
    return str(target), sorted(host - names)


class Scratch:
    """One temporary root for everything: workspaces, TMPDIRs, MCP_CONSOLE_HOMEs."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="console-bridge-bench-"))
        self.bridge_tmp = self.root / "bridge-tmpdirs"
        self.bridge_tmp.mkdir()
        self._counter = itertools.count()

    def session(self, kind: str) -> tuple[Path, Path, Path]:
        """A fresh (workspace, MCP_CONSOLE_HOME, TMPDIR) for one session."""
        base = self.root / f"{kind}-{next(self._counter):04d}"
        dirs = (base / "workspace", base / "home", base / "tmp")
        for folder in dirs:
            folder.mkdir(parents=True)
        return dirs


class Bench:
    """Shared state of one run: the binary, the settings, the scratch root, what is live."""

    def __init__(self, binary: Path, plan: Plan, quick: bool, log: Callable[[str], None]) -> None:
        self.binary = binary
        self.plan = plan
        self.quick = quick
        self.log = log
        self.scratch = Scratch()
        self.tracker = Tracker()
        self.live: set[Session] = set()
        self.serve_args: list[str] | None = None  # taken from the first bridge server's command line
        self.raw_path: str | None = None  # the raw client's PATH (None: the host's)
        self.raw_host_path = False  # --raw-host-path: the raw client keeps the host's PATH
        self.errors: list[str] = []
        self.samples: dict[str, dict[str, list[float]]] = {}
        self.metrics: dict[str, dict[str, Any]] = {}
        self.details: dict[str, Any] = {}

    def raw(self) -> RawSession:
        return RawSession(self)

    def bridge(self, poll_window: float = 30.0) -> BridgeSession:
        return BridgeSession(self, poll_window)

    def record(self, key: str, label: str, unit: str, raw: float | None, bridge: float | None, note: str = "") -> None:
        ratio = None
        if raw is not None and bridge is not None and raw > 0:
            ratio = bridge / raw
        self.metrics[key] = {"label": label, "unit": unit, "raw": raw, "bridge": bridge, "ratio": ratio, "note": note}

    def sample(self, key: str, kind: str, values: list[float]) -> None:
        self.samples.setdefault(key, {}).setdefault(kind, []).extend(values)


class Session:
    kind = "?"
    workspace: Path

    def __init__(self, bench: Bench) -> None:
        self.bench = bench
        self.pid: int | None = None
        self.tree: list[psutil.Process] = []

    def snapshot(self) -> list[psutil.Process]:
        """Record the server and all its descendants now (call after a cell has run)."""
        if self.pid is not None:
            self.tree = self.bench.tracker.add(tree_of(self.pid)) or self.tree
        return self.tree

    async def open(self) -> None:
        raise NotImplementedError

    async def cell(self, code: str, timeout_ms: int | None = None) -> str:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    async def emergency_stop(self) -> None:
        await self.close()


class RawSession(Session):
    """``mcp_console.AsyncMCPConsole`` launched with the bridge's exact serve arguments."""

    kind = "raw"

    def __init__(self, bench: Bench) -> None:
        super().__init__(bench)
        from mcp_console import AsyncMCPConsole

        if bench.serve_args is None:
            raise RuntimeError("the serve arguments are taken from a bridge server; open a bridge session first")
        workspace, home, tmp = bench.scratch.session("raw")
        self.workspace = workspace
        env = host_env(bench.raw_path) | {"TMPDIR": str(tmp), "MCP_CONSOLE_HOME": str(home)}
        self.client = AsyncMCPConsole(
            command=str(bench.binary),
            args=list(bench.serve_args),
            server_parameters={"env": env, "cwd": str(workspace)},
        )

    async def open(self) -> None:
        before = child_pids()
        self.bench.live.add(self)
        await self.client.connect()
        new = [
            p for p in psutil.Process().children() if p.pid not in before and _alive(p) and "serve" in _safe_cmdline(p)
        ]
        if len(new) == 1:
            self.pid = new[0].pid
            self.snapshot()

    async def cell(self, code: str, timeout_ms: int | None = None) -> str:
        return await self.client.send(python=code, timeout_ms=timeout_ms)

    async def poll_until_done(self, first: str, timeout_ms: int) -> list[str]:
        chunks = [first]
        while chunks[-1].rstrip().endswith(RUNNING):
            chunks.append(await self.client.send(timeout_ms=timeout_ms))
        return chunks

    async def close(self) -> None:
        try:
            await self.client.close()
        finally:
            self.bench.live.discard(self)


def _as_text(result: Any) -> str:
    """A bridge result as the raw client's text: the bridge keeps the running notice in a field."""
    return str(getattr(result, "combined", result.text)) + (("\n" + RUNNING) if result.running else "")


class BridgeSession(Session):
    """``console_bridge.AsyncConsole`` with its defaults (read-only profile, dependencies denied)."""

    kind = "bridge"

    def __init__(self, bench: Bench, poll_window: float = 30.0) -> None:
        super().__init__(bench)
        from console_bridge import AsyncConsole

        workspace, home, _ = bench.scratch.session("bridge")
        self.workspace = workspace
        self.client = AsyncConsole(workspace, command=bench.binary, recordings_dir=home, poll_window=poll_window)

    async def open(self) -> None:
        self.bench.live.add(self)
        await self.client.start()
        self.pid = self.client.pid
        self.snapshot()

    async def cell(self, code: str, timeout_ms: int | None = None) -> str:
        return _as_text(await self.client.send(python=code, timeout_ms=timeout_ms))

    async def poll_until_done(self, first: str, timeout_ms: int) -> list[str]:
        chunks = [first]
        while chunks[-1].rstrip().endswith(RUNNING):
            chunks.append(_as_text(await self.client.send(timeout_ms=timeout_ms)))
        return chunks

    async def close(self) -> None:
        try:
            await self.client.close()
        finally:
            self.bench.live.discard(self)

    async def cancel(self) -> None:
        try:
            await self.client.cancel()
        finally:
            self.bench.live.discard(self)

    async def emergency_stop(self) -> None:
        await self.cancel()


def _safe_cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except psutil.Error:
        return []


#: The bridge's startup code frames rich results and stderr with Unicode noncharacters (the bridge
#: strips them); the raw client, launched with the same startup code, shows them as they are.
_FRAMES = re.compile("\ufdd2[^\ufdd3]*\ufdd3|[\ufdd0\ufdd1\ufdd4]")


def _check_one(text: str) -> None:
    if _FRAMES.sub("", text).strip() != "1":
        raise RuntimeError(f"the trivial cell returned {text!r}, not '1'")
