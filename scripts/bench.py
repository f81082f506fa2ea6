#!/usr/bin/env python3
"""Side-by-side benchmark: ``console_bridge.AsyncConsole`` against the raw ``mcp_console.AsyncMCPConsole``.

Both clients run in ONE process, against the SAME ``mcp-console`` binary, with the SAME ``serve``
arguments (taken from the command line of a real bridge server, so they cannot drift from what
``AsyncConsole`` launches) and the same kind of environment and workspace: every session gets a
fresh temporary workspace, its own ``TMPDIR`` and its own ``MCP_CONSOLE_HOME``, all under one
temporary root that is removed at the end.

Usage::

    .venv/bin/python scripts/bench.py                    # the full run (a few minutes)
    .venv/bin/python scripts/bench.py --quick            # a smoke run (under a minute)
    .venv/bin/python scripts/bench.py --json bench.json  # also write every figure as JSON
    .venv/bin/python scripts/bench.py --manager          # the session manager section only
    .venv/bin/python scripts/bench.py --serve            # `console-bridge serve` vs library vs raw
    .venv/bin/python scripts/bench.py --ray              # sessions on a 2-node Ray cluster (bench_ray.py)

What is measured (docs/performance.md explains each figure):

1. cold start to the first result of the cell ``1`` (median);
2. warm round trip of ``1`` (median, p95), raw and bridge calls interleaved;
3. completion lag of a 2 s cell polled with 0.5 s windows (bridge ``run()`` vs a raw poll loop);
4. close latency (idle, busy), ``cancel()`` and interrupt latency, and when the tree is gone;
5. Python-side memory per session (tracemalloc) and processes per session (psutil);
6. N concurrent sessions each running M trivial cells: per-call latency against one session.

``--manager`` runs the session manager section instead (scripts/bench_manager.py): warm-claim
latency against a cold start, churn, memory per warm session. ``--serve`` runs the
``console-bridge serve`` section (scripts/bench_serve.py): warm round trip of ``1`` through serve
(stdio, the MCP SDK client) against the library in-process and the raw client. ``--ray`` runs the Ray section
(scripts/bench_ray.py): the round trip added by a remote session, throughput across 2 nodes.

Exit status: 0 when every phase ran and nothing survived the cleanup; 1 when a phase failed or a
process or temporary folder survived; 2 on usage errors.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import gc
import itertools
import json
import math
import os
import platform
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

SCRIPT = Path(__file__).resolve()
RUNNING = "[running; poll with an empty send]"
TRIVIAL = "1"
LAG_CELL = "import time\ntime.sleep(2)\nprint('CELL_END', repr(time.time()))"
BUSY_CELL = "import time\ntime.sleep(30)"
END_RE = re.compile(r"CELL_END (\d+(?:\.\d+)?)")
#: The ``serve`` arguments console_bridge documents for the read-only profile (checked, not used).
DOCUMENTED_ARGS = [
    "serve",
    "--no-config",
    "-c",
    "python={python}",
    "-c",
    "sandbox.network=restricted",
    "-c",
    "sandbox.profile=read_only",
    "-c",
    "sandbox.tempdir=managed",
    "-c",
    "languages=[python, sql]",
    "-c",
    "tool.parameters.requirements.enabled=false",
]
#: Upper bound of any single benchmark step; a hang becomes an error, never a stuck run.
STEP_TIMEOUT = 180.0
#: How long the final check waits for sandbox children to die with their parent.
REAP_GRACE = 10.0
#: Hard wall-clock limits of a whole run: past them a watchdog thread kills everything and exits 1.
HARD_LIMIT = {"quick": 540.0, "full": 3600.0}


@dataclass(frozen=True)
class Plan:
    cold: int
    warm: int
    lag: int
    close: int
    memory: int
    sessions: int
    cells: int
    rounds: int  # concurrency rounds, both kinds' sessions open, order alternating (raw, bridge, bridge, raw, ...)
    fresh: int  # cold starts in a fresh interpreter, per client
    idle_window: float  # seconds of idle-CPU probing with N sessions open


QUICK = Plan(cold=3, warm=30, lag=2, close=1, memory=1, sessions=4, cells=10, rounds=2, fresh=1, idle_window=1.0)
PLAN_FIELDS = tuple(f.name for f in dataclasses.fields(Plan))
PHASE_NAMES = ("cold", "fresh", "warm", "lag", "close", "memory", "concurrency")
FULL = Plan(cold=10, warm=300, lag=5, close=5, memory=3, sessions=16, cells=50, rounds=2, fresh=3, idle_window=3.0)

TARGETS: dict[str, tuple[str, str, float]] = {
    # key: (description, metric key + column, threshold); issue 23's targets
    "warm_rtt_ratio": ("warm round trip, median, bridge/raw <= 1.03", "warm_rtt_median_ms:ratio", 1.03),
    "warm_rtt_p95_ratio": ("warm round trip, p95, bridge/raw <= 1.05", "warm_rtt_p95_ms:ratio", 1.05),
    "cold_start_ratio": ("cold start, median, bridge/raw <= 1.00 (same launch)", "cold_start_median_ms:ratio", 1.00),
    "concurrency_ratio": (
        "N sessions at once, per-call latency, bridge/raw <= 1.05",
        "concurrent_n_per_call_ms:ratio",
        1.05,
    ),
    "run_completion_lag": ("run() completion lag, median <= 10 ms", "completion_lag_median_ms:bridge", 10.0),
    "idle_close": ("idle close, median <= 100 ms", "close_idle_median_ms:bridge", 100.0),
    "cancel": ("cancel() of a busy session, median <= 50 ms", "cancel_busy_median_ms:bridge", 50.0),
}


# ----------------------------------------------------------------------------- statistics
def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile, ``q`` in (0, 1]."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def p95(values: list[float]) -> float | None:
    return percentile(values, 0.95)


def to_ms(values: Iterable[float]) -> list[float]:
    return [round(v * 1000.0, 4) for v in values]


# ----------------------------------------------------------------------------- processes
def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def tree_of(pid: int) -> list[psutil.Process]:
    """``pid`` and every live descendant (psutil reads /proc; sandboxed ones are included)."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def child_pids() -> set[int]:
    return {p.pid for p in psutil.Process().children()}


class Tracker:
    """Every process any session ever had, keyed by (pid, create time) so a reused pid never counts."""

    def __init__(self) -> None:
        self.procs: dict[tuple[int, float], psutil.Process] = {}

    def add(self, procs: Iterable[psutil.Process]) -> list[psutil.Process]:
        kept = []
        for proc in procs:
            try:
                key = (proc.pid, proc.create_time())
            except psutil.Error:
                continue
            self.procs.setdefault(key, proc)
            kept.append(proc)
        return kept

    def survivors(self) -> list[psutil.Process]:
        return [p for p in self.procs.values() if _alive(p)]


def describe(proc: psutil.Process) -> str:
    try:
        return f"{proc.pid} {proc.name()} {' '.join(proc.cmdline())[:160]}"
    except psutil.Error:
        return f"{proc.pid} (gone)"


async def wait_gone(procs: list[psutil.Process], limit: float) -> float | None:
    """Seconds until none of ``procs`` is alive (polled every 2 ms), or None past ``limit``."""
    start = time.perf_counter()
    while any(_alive(p) for p in procs):
        if time.perf_counter() - start > limit:
            return None
        await asyncio.sleep(0.002)
    return time.perf_counter() - start


# ----------------------------------------------------------------------------- sessions
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


# ----------------------------------------------------------------------------- phases
async def phase_cold_start(bench: Bench) -> None:
    """Cold start to the first result of ``1``; the idle close of the same sessions is timed too."""
    plan = bench.plan
    first: dict[str, float] = {}
    cold: dict[str, list[float]] = {"raw": [], "bridge": []}
    close: dict[str, list[float]] = {"raw": [], "bridge": []}
    gone: dict[str, list[float]] = {"raw": [], "bridge": []}
    left: dict[str, list[int]] = {"raw": [], "bridge": []}
    probe_ms: list[float] = []

    async def once(kind: str) -> tuple[float, float, float | None, int]:
        started = time.perf_counter()
        session: Session = bench.bridge() if kind == "bridge" else bench.raw()
        await session.open()
        _check_one(await session.cell(TRIVIAL))
        ready = time.perf_counter() - started
        if isinstance(session, BridgeSession):
            # The probe as it ran in start() also booted the worker (which the first cell would
            # otherwise do); its own cost is a second run on the booted worker.
            await session.client._probe(session.client.recordings_base)
            probe = session.client.status().extra.get("probe", {}).get("ms")
            if probe is not None:
                probe_ms.append(probe)
        tree = session.snapshot()
        if kind == "bridge" and bench.serve_args is None:
            take_serve_args(bench, session)
        if kind == "raw" and "raw_env_keys" not in bench.details.setdefault("parity", {}):
            bench.details["parity"]["raw_env_keys"] = _env_keys(session.pid)
        begin = time.perf_counter()
        await session.close()
        closed = time.perf_counter() - begin
        survivors = sum(1 for p in tree if _alive(p))
        after = await wait_gone(tree, 15.0)
        return ready, closed, None if after is None else closed + after, survivors

    # The first session of each kind pays one-off costs (lazy imports, the bridge's cached
    # `--version` check): reported apart, not in the medians. The bridge goes first: its server's
    # command line gives the raw client its arguments.
    for kind in ("bridge", "raw"):
        first[kind] = (await once(kind))[0]
    for rep in range(plan.cold):
        order = ("raw", "bridge") if rep % 2 == 0 else ("bridge", "raw")
        for kind in order:
            ready, closed, tree_gone, survivors = await once(kind)
            cold[kind].append(ready)
            close[kind].append(closed)
            left[kind].append(survivors)
            if tree_gone is not None:
                gone[kind].append(tree_gone)
        bench.log(f"  cold start rep {rep + 1}/{plan.cold}")
    for kind in ("raw", "bridge"):
        bench.sample("cold_start_ms", kind, to_ms(cold[kind]))
        bench.sample("close_idle_ms", kind, to_ms(close[kind]))
        bench.sample("close_idle_tree_gone_ms", kind, to_ms(gone[kind]))
    ms = {k: to_ms(v) for k, v in cold.items()}
    bench.record(
        "cold_start_median_ms",
        "cold start to first result of `1`, median",
        "ms",
        median(ms["raw"]),
        median(ms["bridge"]),
    )
    import bench_confinement  # beside this script

    bench_confinement.record(bench, probe_ms, median(ms["bridge"]), reps=5 if bench.quick else 20)
    bench.details["first_session_in_process_ms"] = {
        "raw": first["raw"] * 1000,
        "bridge": first["bridge"] * 1000,
        "note": "not comparable: the bridge session runs first and also warms the OS caches (binary, worker "
        "imports) and the shared imports (mcp); see fresh_process_cold_start_median_ms instead",
    }
    cm = {k: to_ms(v) for k, v in close.items()}
    bench.record("close_idle_median_ms", "close(), idle session, median", "ms", median(cm["raw"]), median(cm["bridge"]))
    gm = {k: to_ms(v) for k, v in gone.items()}
    bench.record(
        "close_idle_tree_gone_median_ms",
        "idle close: until every process of the tree is gone, median",
        "ms",
        median(gm["raw"]),
        median(gm["bridge"]),
    )
    bench.record(
        "close_idle_survivors_at_return",
        "idle close: processes still alive when close() returns, total",
        "count",
        float(sum(left["raw"])),
        float(sum(left["bridge"])),
    )


def _env_keys(pid: int | None) -> list[str]:
    if pid is None:
        return []
    try:
        return sorted(psutil.Process(pid).environ())
    except psutil.Error:
        return []


def take_serve_args(bench: Bench, session: Session) -> None:
    """Give the raw client exactly the arguments the bridge launched its server with."""
    if session.pid is None:
        raise RuntimeError("the bridge session has no server pid")
    cmdline = psutil.Process(session.pid).cmdline()
    if Path(cmdline[0]).resolve() != bench.binary.resolve():
        raise RuntimeError(f"the bridge ran {cmdline[0]!r}, not the benchmarked binary {str(bench.binary)!r}")
    args = cmdline[1:]
    if any(str(session.workspace) in arg for arg in args):
        raise RuntimeError("the bridge's serve arguments name its workspace; they cannot be reused as they are")
    bench.serve_args = args
    hidden: list[str] = []
    if not bench.raw_host_path:
        bench.raw_path, hidden = mirror_server_path(bench, session.pid)
    python = next((a.partition("=")[2] for a in args if a.startswith("python=")), "?")
    documented = [a.format(python=python) for a in DOCUMENTED_ARGS]
    bench.details["parity"] = {
        "serve_args": args,
        "matches_documented_args": args == documented,
        "bridge_env_keys": _env_keys(session.pid),
        "raw_path": "host PATH" if bench.raw_path is None else "a copy of the bridge server's PATH folder",
        "commands_hidden_from_both": hidden,
    }


async def _fresh_once(bench: Bench, kind: str) -> dict[str, float]:
    """Spawn this script as a child that imports one client, opens a session and runs ``1``."""
    assert bench.serve_args is not None
    workspace, home, tmp = bench.scratch.session(f"fresh-{kind}")
    if kind == "bridge":
        tmp = bench.scratch.bridge_tmp  # the bridge makes its own TMPDIR in there (and must remove it)
    command = [
        sys.executable,
        str(SCRIPT),
        "--binary",
        str(bench.binary),
        "--child",
        kind,
        "--child-setup",
        json.dumps(
            {"dirs": [str(workspace), str(home), str(tmp)], "serve_args": bench.serve_args, "path": bench.raw_path}
        ),
    ]
    errors = workspace.parent / "child-stderr.txt"
    with errors.open("wb") as stderr:
        started = time.perf_counter()
        proc = await asyncio.create_subprocess_exec(
            *command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=stderr
        )
        bench.tracker.add(tree_of(proc.pid))
        try:
            assert proc.stdout is not None and proc.stdin is not None
            async with asyncio.timeout(120):
                line = await proc.stdout.readline()
            wall = time.perf_counter() - started
            if not line:
                raise RuntimeError(f"the {kind} child exited early: {errors.read_text(errors='replace')[-500:]}")
            info = json.loads(line)
            bench.tracker.add(tree_of(int(info["pid"])))
            proc.stdin.write(b"close\n")
            await proc.stdin.drain()
            proc.stdin.close()
            async with asyncio.timeout(60):
                status = await proc.wait()
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    if status != 0:
        raise RuntimeError(f"the {kind} child exited with {status}: {errors.read_text(errors='replace')[-500:]}")
    return {"wall": wall, "import": float(info["import_s"]), "session": float(info["session_s"])}


async def phase_fresh(bench: Bench) -> None:
    """Cold start as a new program sees it: interpreter start, imports, open, first result of ``1``."""
    got: dict[str, dict[str, list[float]]] = {k: {"wall": [], "import": [], "session": []} for k in ("raw", "bridge")}
    for rep in range(bench.plan.fresh):
        for kind in ("raw", "bridge") if rep % 2 == 0 else ("bridge", "raw"):
            for measure, value in (await _fresh_once(bench, kind)).items():
                got[kind][measure].append(value)
    for kind in got:
        for measure, values in got[kind].items():
            bench.sample(f"fresh_{measure}_ms", kind, to_ms(values))
    wall = {k: to_ms(v["wall"]) for k, v in got.items()}
    imports = {k: to_ms(v["import"]) for k, v in got.items()}
    bench.record(
        "fresh_process_cold_start_median_ms",
        "cold start in a fresh interpreter (start + imports + open + `1`), median",
        "ms",
        median(wall["raw"]),
        median(wall["bridge"]),
    )
    bench.record(
        "fresh_process_import_median_ms",
        "import of the client in a fresh interpreter, median",
        "ms",
        median(imports["raw"]),
        median(imports["bridge"]),
        "raw: mcp_console + mcp.Client (imported lazily by connect); bridge: console_bridge",
    )


def child_main(kind: str, binary: Path, setup_json: str) -> int:
    """The child of phase_fresh: report timings on stdout, close on a line on stdin."""
    started = time.perf_counter()
    setup = json.loads(setup_json)
    workspace, home, tmp = (Path(d) for d in setup["dirs"])
    if kind == "bridge":
        from console_bridge import AsyncConsole
    else:
        from mcp import Client  # noqa: F401  (AsyncMCPConsole imports it inside connect(); count it here)
        from mcp_console import AsyncMCPConsole
    imported = time.perf_counter()

    async def session() -> None:
        if kind == "bridge":
            tempfile.tempdir = str(tmp)
            console = AsyncConsole(workspace, command=binary, recordings_dir=home)
            await console.start()
            _check_one((await console.send(python=TRIVIAL)).text)
            pid = console.pid
            close = console.close
        else:
            before = child_pids()
            env = host_env(setup.get("path")) | {"TMPDIR": str(tmp), "MCP_CONSOLE_HOME": str(home)}
            raw = AsyncMCPConsole(
                command=str(binary), args=setup["serve_args"], server_parameters={"env": env, "cwd": str(workspace)}
            )
            await raw.connect()
            _check_one(await raw.send(python=TRIVIAL))
            pid = next(iter(child_pids() - before), None)
            close = raw.close
        ready = time.perf_counter()
        print(json.dumps({"pid": pid, "import_s": imported - started, "session_s": ready - imported}), flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        await close()

    asyncio.run(session())
    return 0


async def phase_warm(bench: Bench) -> None:
    """Warm round trip of ``1``: raw send, bridge send and bridge run() interleaved in rotation."""
    raw, bridge = bench.raw(), bench.bridge()
    await raw.open()
    await bridge.open()
    try:
        for _ in range(5):
            _check_one(await raw.cell(TRIVIAL))
            _check_one(await bridge.cell(TRIVIAL))
            _check_one((await bridge.client.run(python=TRIVIAL)).text)
        raw_send = raw.client.send
        bridge_send = bridge.client.send
        bridge_run = bridge.client.run
        times: dict[str, list[float]] = {"raw": [], "bridge": [], "bridge_run": []}

        async def call_raw() -> str:
            return await raw_send(python=TRIVIAL)

        async def call_bridge() -> str:
            return (await bridge_send(python=TRIVIAL)).text

        async def call_run() -> str:
            return (await bridge_run(python=TRIVIAL)).text

        series: list[tuple[str, Callable[[], Awaitable[str]]]] = [
            ("raw", call_raw),
            ("bridge", call_bridge),
            ("bridge_run", call_run),
        ]
        gc.collect()
        for i in range(bench.plan.warm):
            shift = i % len(series)
            for name, call in series[shift:] + series[:shift]:
                started = time.perf_counter()
                text = await call()
                times[name].append(time.perf_counter() - started)
                _check_one(text)
        raw.snapshot()
        bridge.snapshot()
    finally:
        await raw.close()
        await bridge.close()
    ms = {k: to_ms(v) for k, v in times.items()}
    for name, values in ms.items():
        bench.sample("warm_rtt_ms", name, values)
    bench.record(
        "warm_rtt_median_ms", "warm round trip of `1` (send), median", "ms", median(ms["raw"]), median(ms["bridge"])
    )
    bench.record("warm_rtt_p95_ms", "warm round trip of `1` (send), p95", "ms", p95(ms["raw"]), p95(ms["bridge"]))
    bench.record(
        "warm_rtt_run_median_ms",
        "warm round trip of `1`, bridge run() vs raw send, median",
        "ms",
        median(ms["raw"]),
        median(ms["bridge_run"]),
    )
    bench.record(
        "warm_rtt_run_p95_ms",
        "warm round trip of `1`, bridge run() vs raw send, p95",
        "ms",
        p95(ms["raw"]),
        p95(ms["bridge_run"]),
    )


def _end_time(text: str) -> float:
    match = END_RE.search(text)
    if match is None:
        raise RuntimeError(f"the 2 s cell printed no end time: {text[-300:]!r}")
    return float(match.group(1))


async def phase_completion_lag(bench: Bench) -> None:
    """A 2 s cell polled with 0.5 s windows: time from the cell's end to the caller having the result."""
    raw, bridge = bench.raw(), bench.bridge(poll_window=0.5)
    await raw.open()
    await bridge.open()
    lags: dict[str, list[float]] = {"raw": [], "bridge": []}
    polls: dict[str, list[float]] = {"raw": [], "bridge": []}
    try:
        _check_one(await raw.cell(TRIVIAL))
        # run(), not send(): the first cell starts the worker, which can outlast one 0.5 s window.
        _check_one((await bridge.client.run(python=TRIVIAL)).text)

        async def run_raw() -> tuple[float, int]:
            first = await raw.client.send(python=LAG_CELL, timeout_ms=500)
            chunks = await raw.poll_until_done(first, 500)
            seen = time.time()
            return seen - _end_time("".join(chunks)), len(chunks)

        async def run_bridge() -> tuple[float, int]:
            count = 0

            def counted(_chunk: object) -> None:
                nonlocal count
                count += 1

            result = await bridge.client.run(python=LAG_CELL, on_output=counted)
            seen = time.time()
            return seen - _end_time(result.text), count

        for rep in range(bench.plan.lag):
            order = [("raw", run_raw), ("bridge", run_bridge)]
            if rep % 2:
                order.reverse()
            for name, runner in order:
                lag, calls = await runner()
                lags[name].append(lag)
                polls[name].append(float(calls))
            bench.log(f"  completion lag rep {rep + 1}/{bench.plan.lag}")
        raw.snapshot()
        bridge.snapshot()
    finally:
        await raw.close()
        await bridge.close()
    ms = {k: to_ms(v) for k, v in lags.items()}
    for name in ms:
        bench.sample("completion_lag_ms", name, ms[name])
        bench.sample("completion_lag_calls", name, polls[name])
    bench.record(
        "completion_lag_median_ms",
        "2 s cell, 0.5 s windows: cell end -> caller has result, median",
        "ms",
        median(ms["raw"]),
        median(ms["bridge"]),
        "raw: send + empty-send loop; bridge: run(poll_window=0.5)",
    )
    bench.record(
        "completion_lag_max_ms",
        "2 s cell, 0.5 s windows: completion lag, max",
        "ms",
        max(ms["raw"]),
        max(ms["bridge"]),
    )
    bench.record(
        "completion_lag_calls",
        "2 s cell, 0.5 s windows: send calls per cell, median",
        "calls",
        median(polls["raw"]),
        median(polls["bridge"]),
    )


async def _start_busy(session: Session) -> None:
    text = await session.cell(BUSY_CELL, timeout_ms=100)
    if not text.rstrip().endswith(RUNNING):
        raise RuntimeError(f"the 30 s cell was not running after its 100 ms window: {text!r}")


async def phase_close_cancel(bench: Bench) -> None:
    """Interrupt latency and busy close (both clients); cancel(), busy and idle (the bridge only)."""
    got: dict[str, list[float]] = {}

    def add(key: str, seconds: float | None) -> None:
        if seconds is not None:
            got.setdefault(key, []).append(seconds)

    async def busy_close(kind: str) -> None:
        session: Session = bench.bridge() if kind == "bridge" else bench.raw()
        await session.open()
        _check_one(await session.cell(TRIVIAL))
        await _start_busy(session)
        session.snapshot()
        # Interrupt the running cell and wait until it is reported finished.
        started = time.perf_counter()
        if isinstance(session, RawSession):
            out = await session.client.send(control="interrupt", timeout_ms=5000)
            chunks = await session.poll_until_done(out, 5000)
            text = "".join(chunks)
        else:
            assert isinstance(session, BridgeSession)
            result = await session.client.interrupt()
            if result.running:
                raise RuntimeError("the bridge interrupt left the cell running")
            text = result.combined  # the traceback is stderr (CellResult.text is stdout only)
        add(f"interrupt:{kind}", time.perf_counter() - started)
        if "KeyboardInterrupt" not in text:
            raise RuntimeError(f"the interrupt did not reach the cell: {text[-300:]!r}")
        # A second busy cell, then close while it runs.
        await _start_busy(session)
        tree = session.snapshot()
        started = time.perf_counter()
        await session.close()
        closed = time.perf_counter() - started
        add(f"close_busy:{kind}", closed)
        add(f"close_busy_survivors:{kind}", float(sum(1 for p in tree if _alive(p))))
        after = await wait_gone(tree, 15.0)
        add(f"close_busy_tree_gone:{kind}", None if after is None else closed + after)

    async def cancel(busy: bool) -> None:
        session = bench.bridge()
        await session.open()
        _check_one(await session.cell(TRIVIAL))
        if busy:
            await _start_busy(session)
        tree = session.snapshot()
        started = time.perf_counter()
        await session.cancel()
        took = time.perf_counter() - started
        label = "busy" if busy else "idle"
        add(f"cancel_{label}:bridge", took)
        add(f"cancel_{label}_survivors:bridge", float(sum(1 for p in tree if _alive(p))))
        after = await wait_gone(tree, 15.0)
        add(f"cancel_{label}_tree_gone:bridge", None if after is None else took + after)

    for rep in range(bench.plan.close):
        kinds = ("raw", "bridge") if rep % 2 == 0 else ("bridge", "raw")
        for kind in kinds:
            await busy_close(kind)
        await cancel(busy=True)
        await cancel(busy=False)
        bench.log(f"  close/cancel rep {rep + 1}/{bench.plan.close}")

    def pair(key: str) -> tuple[list[float], list[float]]:
        raw = to_ms(got.get(f"{key}:raw", []))
        bridge = to_ms(got.get(f"{key}:bridge", []))
        if raw:
            bench.sample(f"{key}_ms", "raw", raw)
        if bridge:
            bench.sample(f"{key}_ms", "bridge", bridge)
        return raw, bridge

    raw, bridge = pair("interrupt")
    bench.record(
        "interrupt_median_ms",
        "interrupt a running cell until reported done, median",
        "ms",
        median(raw),
        median(bridge),
        "raw: send(control='interrupt') + polls; bridge: interrupt()",
    )
    raw, bridge = pair("close_busy")
    bench.record("close_busy_median_ms", "close(), busy session, median", "ms", median(raw), median(bridge))
    raw, bridge = pair("close_busy_tree_gone")
    bench.record(
        "close_busy_tree_gone_median_ms",
        "busy close: until every process of the tree is gone, median",
        "ms",
        median(raw),
        median(bridge),
    )
    bench.record(
        "close_busy_survivors_at_return",
        "busy close: processes still alive when close() returns, total",
        "count",
        sum(got.get("close_busy_survivors:raw", [])),
        sum(got.get("close_busy_survivors:bridge", [])),
    )
    for label in ("busy", "idle"):
        _, bridge = pair(f"cancel_{label}")
        bench.record(
            f"cancel_{label}_median_ms",
            f"cancel(), {label} session, median",
            "ms",
            None,
            median(bridge),
            "the raw client has no cancel (n/a)",
        )
        _, bridge = pair(f"cancel_{label}_tree_gone")
        bench.record(
            f"cancel_{label}_tree_gone_median_ms",
            f"{label} cancel: until every process of the tree is gone, median",
            "ms",
            None,
            median(bridge),
        )


async def phase_memory(bench: Bench) -> None:
    """tracemalloc deltas to open one session and run one cell; processes per session."""
    results: dict[str, dict[str, list[float]]] = {
        kind: {"current": [], "peak": [], "retained": []} for kind in ("raw", "bridge")
    }
    procs: dict[str, list[dict[str, Any]]] = {}
    for rep in range(bench.plan.memory):
        order = ("raw", "bridge") if rep % 2 == 0 else ("bridge", "raw")
        for kind in order:
            gc.collect()
            tracemalloc.start()
            try:
                base = tracemalloc.get_traced_memory()[0]
                tracemalloc.reset_peak()
                session: Session = bench.bridge() if kind == "bridge" else bench.raw()
                await session.open()
                _check_one(await session.cell(TRIVIAL))
                current, peak = tracemalloc.get_traced_memory()
                tree = session.snapshot()
                procs.setdefault(kind, [])
                if not procs[kind]:
                    procs[kind] = [_proc_info(p) for p in tree]
                results[kind]["current"].append(current - base)
                results[kind]["peak"].append(peak - base)
                await session.close()
                del session
                gc.collect()
                results[kind]["retained"].append(tracemalloc.get_traced_memory()[0] - base)
            finally:
                tracemalloc.stop()
    kib = {k: {m: [v / 1024 for v in vs] for m, vs in d.items()} for k, d in results.items()}
    for kind, by in kib.items():
        for measure, values in by.items():
            bench.sample(f"memory_{measure}_kib", kind, values)
    bench.record(
        "memory_current_kib",
        "Python memory held by an open session after one cell (tracemalloc)",
        "KiB",
        median(kib["raw"]["current"]),
        median(kib["bridge"]["current"]),
    )
    bench.record(
        "memory_peak_kib",
        "Python peak memory to open a session and run one cell (tracemalloc)",
        "KiB",
        median(kib["raw"]["peak"]),
        median(kib["bridge"]["peak"]),
    )
    bench.record(
        "memory_retained_kib",
        "Python memory still held after close() + gc (tracemalloc)",
        "KiB",
        median(kib["raw"]["retained"]),
        median(kib["bridge"]["retained"]),
    )
    bench.record(
        "processes_per_session",
        "processes per session after a cell (server + all descendants)",
        "count",
        float(len(procs.get("raw", []))),
        float(len(procs.get("bridge", []))),
    )
    bench.details["processes"] = procs


def _proc_info(proc: psutil.Process) -> dict[str, Any]:
    try:
        return {"pid": proc.pid, "ppid": proc.ppid(), "name": proc.name(), "cmdline": proc.cmdline()[:6]}
    except psutil.Error:
        return {"pid": proc.pid, "gone": True}


_Cells = Callable[[Session, list[float]], Awaitable[None]]


class _Pool:
    """N sessions of one kind, each living in its own task (open to close: the raw client must be
    entered and closed in the same task), driven by commands: run M cells, or close."""

    def __init__(self, bench: Bench, kind: str, n: int) -> None:
        make: Callable[[], Session] = bench.bridge if kind == "bridge" else bench.raw
        self.kind = kind
        self.sessions = [make() for _ in range(n)]
        self.inbox: list[asyncio.Queue[tuple[str, list[float] | None]]] = [asyncio.Queue() for _ in range(n)]
        self.ready = [asyncio.Event() for _ in range(n)]
        self.done: list[asyncio.Event] = [asyncio.Event() for _ in range(n)]
        self.tasks: list[asyncio.Task[None]] = []

    async def _life(self, index: int, cells: _Cells) -> None:
        session = self.sessions[index]
        await session.open()
        try:
            _check_one(await session.cell(TRIVIAL))
            session.snapshot()
            self.ready[index].set()
            while True:
                command, out = await self.inbox[index].get()
                if command == "close":
                    break
                assert out is not None
                await cells(session, out)
                self.done[index].set()
        finally:
            await session.close()

    async def open(self, tg: asyncio.TaskGroup, indices: range, cells: _Cells) -> float:
        started = time.perf_counter()
        for index in indices:
            self.tasks.append(tg.create_task(self._life(index, cells)))
        for index in indices:
            await self.ready[index].wait()
        return time.perf_counter() - started

    async def run(self, indices: range) -> tuple[list[float], float]:
        """M cells in each of these sessions at once: the latencies and the wall time."""
        outs: list[list[float]] = [[] for _ in indices]
        started = time.perf_counter()
        for index, out in zip(indices, outs, strict=True):
            self.done[index].clear()
            self.inbox[index].put_nowait(("cells", out))
        for index in indices:
            await self.done[index].wait()
        return [v for out in outs for v in out], time.perf_counter() - started

    async def close(self) -> float:
        started = time.perf_counter()
        for queue in self.inbox:
            queue.put_nowait(("close", None))
        await asyncio.gather(*self.tasks)
        return time.perf_counter() - started


async def idle_probe(window: float) -> dict[str, float]:
    """While nothing is asked of the sessions: this process's CPU time (one plain sleep), then the
    event loop's wake-up delays (1 ms sleeps), each over ``window`` seconds."""
    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.sleep(window)
    cpu_ms_per_s = (time.process_time() - cpu) * 1000 / (time.perf_counter() - wall)
    lags: list[float] = []
    end = time.perf_counter() + window
    while (now := time.perf_counter()) < end:
        await asyncio.sleep(0.001)
        lags.append(time.perf_counter() - now - 0.001)
    return {
        "cpu_ms_per_s": cpu_ms_per_s,
        "loop_lag_max_ms": max(lags) * 1000 if lags else 0.0,
        "loop_lag_p99_ms": (percentile(lags, 0.99) or 0.0) * 1000,
    }


async def phase_concurrency(bench: Bench) -> None:
    """N sessions each running M trivial cells at once, against one session alone.

    Both clients' N sessions are open at the same time (idle between rounds) and the rounds
    alternate raw, bridge, bridge, raw, ...: the two kinds meet the same machine load, minutes
    apart at most, instead of each in its own stretch of a shared, loaded machine."""
    n, m = bench.plan.sessions, bench.plan.cells
    details: dict[str, Any] = {"sessions": n, "cells_per_session": m, "rounds": bench.plan.rounds}

    async def cells(session: Session, out: list[float]) -> None:
        for _ in range(m):
            started = time.perf_counter()
            text = await session.cell(TRIVIAL)
            out.append(time.perf_counter() - started)
            _check_one(text)

    pools = {kind: _Pool(bench, kind, n) for kind in ("raw", "bridge")}
    results: dict[str, dict[str, Any]] = {
        kind: {"single_ms": [], "concurrent_ms": [], "wall_s": 0.0, "round_walls_s": []} for kind in pools
    }
    first, others = range(1), range(1, n)
    async with asyncio.TaskGroup() as tg:
        for pool in pools.values():
            await pool.open(tg, first, cells)
        for round_ in range(bench.plan.rounds):  # the baseline: one session alone
            for kind in ("raw", "bridge") if round_ % 2 == 0 else ("bridge", "raw"):
                single, _ = await pools[kind].run(first)
                results[kind]["single_ms"].extend(to_ms(single))
        idle_before = await idle_probe(bench.plan.idle_window)
        for kind in ("raw", "bridge"):
            results[kind]["open_others_s"] = await pools[kind].open(tg, others, cells)
            # The idle probe with this kind's N sessions open (and the other kind's one or N): what
            # this kind's sessions add to the process's idle CPU is the difference.
            results[kind]["idle"] = await idle_probe(bench.plan.idle_window)
        everyone = range(n)
        for round_ in range(bench.plan.rounds):
            for kind in ("raw", "bridge") if round_ % 2 == 0 else ("bridge", "raw"):
                latencies, wall = await pools[kind].run(everyone)
                results[kind]["concurrent_ms"].extend(to_ms(latencies))
                results[kind]["wall_s"] += wall
                results[kind]["round_walls_s"].append(round(wall, 3))
                bench.log(f"  concurrency round {round_ + 1}/{bench.plan.rounds}: {kind} done")
        for kind in ("raw", "bridge"):
            results[kind]["close_all_s"] = await pools[kind].close()
    raw_idle, bridge_idle = results["raw"]["idle"], results["bridge"]["idle"]
    raw_idle["cpu_ms_per_s"] = max(0.0, raw_idle["cpu_ms_per_s"] - idle_before["cpu_ms_per_s"])
    bridge_idle["cpu_ms_per_s"] = max(
        0.0, bridge_idle["cpu_ms_per_s"] - raw_idle["cpu_ms_per_s"] - idle_before["cpu_ms_per_s"]
    )
    for kind, r in results.items():
        bench.sample("concurrent_single_ms", kind, r["single_ms"])
        bench.sample("concurrent_many_ms", kind, r["concurrent_ms"])
        r["rounds"] = [{"wall_s": w} for w in r["round_walls_s"]]
    raw, bridge = results["raw"], results["bridge"]
    calls = n * m * bench.plan.rounds

    def mean(values: list[float]) -> float:
        return statistics.fmean(values)

    bench.record(
        "concurrent_1_per_call_ms",
        f"1 session alone, {m} cells: per-call latency, mean",
        "ms",
        mean(raw["single_ms"]),
        mean(bridge["single_ms"]),
    )
    bench.record(
        "concurrent_n_per_call_ms",
        f"{n} sessions at once, {m} cells each: per-call latency, mean",
        "ms",
        mean(raw["concurrent_ms"]),
        mean(bridge["concurrent_ms"]),
    )
    bench.record(
        "concurrent_n_p95_ms",
        f"{n} sessions at once: per-call latency, p95",
        "ms",
        p95(raw["concurrent_ms"]),
        p95(bridge["concurrent_ms"]),
    )
    bench.record(
        "concurrent_overhead_factor",
        f"per-call latency, {n} sessions / 1 session",
        "x",
        mean(raw["concurrent_ms"]) / mean(raw["single_ms"]),
        mean(bridge["concurrent_ms"]) / mean(bridge["single_ms"]),
    )
    bench.record(
        "concurrent_n_wall_per_call_ms",
        f"{n} sessions at once: wall time / calls",
        "ms",
        raw["wall_s"] * 1000 / calls,
        bridge["wall_s"] * 1000 / calls,
    )
    bench.record(
        "concurrent_n_throughput",
        f"{n} sessions at once: calls per second",
        "calls/s",
        calls / raw["wall_s"],
        calls / bridge["wall_s"],
    )
    bench.record(
        "concurrent_open_ms",
        f"open {n - 1} sessions at once (wall)",
        "ms",
        raw["open_others_s"] * 1000,
        bridge["open_others_s"] * 1000,
    )
    bench.record(
        "concurrent_close_all_ms",
        f"close {n} sessions at once (wall)",
        "ms",
        raw["close_all_s"] * 1000,
        bridge["close_all_s"] * 1000,
    )
    bench.record(
        "idle_cpu_per_session",
        f"{n} idle sessions open: client-process CPU per session",
        "ms CPU/s",
        raw["idle"]["cpu_ms_per_s"] / n,
        bridge["idle"]["cpu_ms_per_s"] / n,
        "time.process_time() of the benchmark process over the idle window once this kind's N sessions "
        "opened, less the window before (both kinds' sessions stay open), divided by N",
    )
    bench.record(
        "idle_loop_lag_max_ms",
        f"{n} idle sessions open: worst event-loop wake-up delay",
        "ms",
        raw["idle"]["loop_lag_max_ms"],
        bridge["idle"]["loop_lag_max_ms"],
    )
    details.update({k: {"rounds": v["rounds"], "idle": v["idle"]} for k, v in results.items()})
    bench.details["concurrency"] = details


# ----------------------------------------------------------------------------- cleanup
async def cleanup(bench: Bench) -> dict[str, Any]:
    """Stop whatever is still live, wait for every process ever seen, remove the scratch root."""
    report: dict[str, Any] = {"stopped_live_sessions": len(bench.live)}
    for session in list(bench.live):
        with contextlib.suppress(Exception):
            async with asyncio.timeout(30):
                await session.emergency_stop()
    # Sandboxed children die with their parent (bwrap --die-with-parent); give them a bounded grace.
    deadline = time.monotonic() + REAP_GRACE
    while bench.tracker.survivors() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    survivors = bench.tracker.survivors()
    ours = [p for p in psutil.Process().children(recursive=True) if _alive(p)]
    report["tracked_processes"] = len(bench.tracker.procs)
    report["survivors"] = [describe(p) for p in survivors]
    report["descendants_of_bench"] = [describe(p) for p in ours]
    for proc in {p.pid: p for p in [*survivors, *ours]}.values():
        with contextlib.suppress(psutil.Error):
            proc.kill()
    # Every bridge session removes its own TMPDIR on close; anything left there is a finding.
    report["bridge_tmpdirs_left"] = sorted(p.name for p in bench.scratch.bridge_tmp.iterdir())
    shutil.rmtree(bench.scratch.root, ignore_errors=True)
    report["scratch_root"] = str(bench.scratch.root)
    report["scratch_root_left"] = bench.scratch.root.exists()
    report["ok"] = not (survivors or ours or report["bridge_tmpdirs_left"] or report["scratch_root_left"] or bench.live)
    return report


def start_watchdog(bench: Bench, limit: float) -> threading.Timer:
    """A last resort against a hung event loop: kill every process seen, remove the scratch root, exit 1."""

    def fire() -> None:
        print(f"bench: watchdog: the run passed {limit:g}s; killing everything and exiting 1", file=sys.stderr)
        procs = [*bench.tracker.procs.values()]
        with contextlib.suppress(psutil.Error):
            procs += psutil.Process().children(recursive=True)
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        shutil.rmtree(bench.scratch.root, ignore_errors=True)
        os._exit(1)

    timer = threading.Timer(limit, fire)
    timer.daemon = True
    timer.start()
    return timer


# ----------------------------------------------------------------------------- output
def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    if unit == "count" or unit == "calls":
        return f"{value:g}"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def table(metrics: dict[str, dict[str, Any]]) -> str:
    rows = [("metric", "raw", "bridge", "ratio bridge/raw")]
    for m in metrics.values():
        ratio = "n/a" if m["ratio"] is None else f"{m['ratio']:.3f}"
        rows.append((f"{m['label']} [{m['unit']}]", fmt(m["raw"], m["unit"]), fmt(m["bridge"], m["unit"]), ratio))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = []
    for index, row in enumerate(rows):
        lines.append(
            "| "
            + " | ".join(cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(row))
            + " |"
        )
        if index == 0:
            lines.append("|" + "|".join("-" * (w + 1) + (":" if i else "-") for i, w in enumerate(widths)) + "|")
    return "\n".join(lines)


def evaluate_targets(metrics: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {}
    for key, (description, where, threshold) in TARGETS.items():
        metric, _, column = where.partition(":")
        value = metrics.get(metric, {}).get(column)
        out[key] = {
            "description": description,
            "metric": metric,
            "column": column,
            "threshold": threshold,
            "value": value,
            "met": None if value is None else value <= threshold,
        }
    return out


# ----------------------------------------------------------------------------- main
def default_binary() -> Path:
    beside = Path(sys.executable).parent / "mcp-console"
    if beside.exists():
        return beside
    return SCRIPT.parents[1] / ".venv" / "bin" / "mcp-console"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Benchmark console_bridge.AsyncConsole against the raw mcp_console.AsyncMCPConsole, "
        "side by side in one run.",
    )
    parser.add_argument("--quick", action="store_true", help="few repetitions (a smoke run, under a minute)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write every figure to PATH as JSON")
    parser.add_argument(
        "--binary",
        type=Path,
        default=default_binary(),
        metavar="PATH",
        help="the mcp-console executable (default: the one in this venv)",
    )
    parser.add_argument(
        "--manager", action="store_true", help="run the session manager section (scripts/bench_manager.py) instead"
    )
    parser.add_argument(
        "--serve", action="store_true", help="run the `console-bridge serve` section (scripts/bench_serve.py) instead"
    )
    parser.add_argument(
        "--ray", action="store_true", help="run the Ray section (scripts/bench_ray.py) instead; needs the [ray] extra"
    )
    parser.add_argument(
        "--phases",
        metavar="LIST",
        help=f"run only these phases, comma-separated, in the usual order ({', '.join(PHASE_NAMES)}); "
        "without the cold phase one bridge session is opened first to take the serve arguments",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=N",
        help=f"override one repetition count of the plan, e.g. --set sessions=16 (fields: {', '.join(PLAN_FIELDS)})",
    )
    parser.add_argument(
        "--raw-host-path",
        action="store_true",
        help="give the raw client the host's PATH (its default launch: R is discovered where installed) "
        "instead of the same PATH as the bridge's server (which hides R from a session that does not ask for it)",
    )
    parser.add_argument("--child", choices=("raw", "bridge"), help=argparse.SUPPRESS)
    parser.add_argument("--child-setup", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.phases is not None:
        args.phases = [name.strip() for name in args.phases.split(",") if name.strip()]
        unknown = sorted(set(args.phases) - set(PHASE_NAMES))
        if unknown:
            parser.error(f"--phases: unknown {', '.join(unknown)} (known: {', '.join(PHASE_NAMES)})")
    overrides: dict[str, float] = {}
    for item in args.set:
        field_name, _, value = item.partition("=")
        if field_name not in PLAN_FIELDS:
            parser.error(f"--set {item!r}: unknown field (known: {', '.join(PLAN_FIELDS)})")
        try:
            overrides[field_name] = float(value) if field_name == "idle_window" else int(value)
        except ValueError:
            parser.error(f"--set {item!r}: not a number")
    args.overrides = overrides
    if not args.binary.exists():
        parser.error(f"--binary {str(args.binary)!r} does not exist")
    args.binary = args.binary.absolute()
    return args


def source_state() -> dict[str, Any]:
    """The commit benchmarked and whether the work tree had local changes (figures depend on both)."""
    import subprocess

    root = SCRIPT.parents[1]
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=False
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--", "console_bridge"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "library_changes": None}
    return {"commit": head or None, "library_changes": dirty}


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("console-bridge", "mcp-console", "mcp", "anyio", "psutil"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "?"
    return out


async def phase_setup(bench: Bench) -> None:
    """Without the cold phase: one bridge session, only to take its serve arguments."""
    session = bench.bridge()
    await session.open()
    try:
        _check_one(await session.cell(TRIVIAL))
        session.snapshot()
        take_serve_args(bench, session)
    finally:
        await session.close()


PHASES: dict[str, tuple[str, Callable[[Bench], Awaitable[None]]]] = {
    "cold": ("cold start (+ idle close)", phase_cold_start),
    "fresh": ("cold start in a fresh interpreter", phase_fresh),
    "warm": ("warm round trip", phase_warm),
    "lag": ("completion lag", phase_completion_lag),
    "close": ("interrupt, busy close, cancel", phase_close_cancel),
    "memory": ("memory and processes", phase_memory),
    "concurrency": ("concurrency", phase_concurrency),
}


async def run(args: argparse.Namespace) -> int:
    plan = dataclasses.replace(QUICK if args.quick else FULL, **getattr(args, "overrides", {}))

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    bench = Bench(args.binary, plan, args.quick, log)
    bench.raw_host_path = bool(getattr(args, "raw_host_path", False))
    watchdog = start_watchdog(bench, HARD_LIMIT["quick" if args.quick else "full"])
    load_at_start = list(os.getloadavg())
    started_at = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    source = source_state()
    processes_at_start = len(psutil.pids())
    # The bridge makes each session's private TMPDIR with tempfile.mkdtemp(): keep those inside the scratch root.
    saved_tempdir = tempfile.tempdir
    tempfile.tempdir = str(bench.scratch.bridge_tmp)
    started = time.perf_counter()
    selected = getattr(args, "phases", None) or list(PHASES)
    phases = [PHASES[name] for name in PHASES if name in selected]
    if "cold" not in selected:
        phases.insert(0, ("setup (serve arguments)", phase_setup))
    timings: dict[str, float] = {}
    try:
        for name, phase in phases:
            log(f"phase: {name}")
            t0 = time.perf_counter()
            try:
                async with asyncio.timeout(STEP_TIMEOUT * (1 if args.quick else 5)):
                    await phase(bench)
            except Exception as exc:  # a failed phase is reported; the others still run
                bench.errors.append(f"{name}: {type(exc).__name__}: {exc}")
                log(f"  FAILED: {type(exc).__name__}: {exc}")
                if bench.serve_args is None:
                    break  # nothing else can run without the bridge's serve arguments
            timings[name] = time.perf_counter() - t0
    finally:
        tempfile.tempdir = saved_tempdir
        clean = await cleanup(bench)
        watchdog.cancel()
    total = time.perf_counter() - started
    targets = evaluate_targets(bench.metrics)
    report = {
        "meta": {
            "started_at": started_at,
            "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "quick": args.quick,
            "binary": str(args.binary),
            "versions": versions(),
            "source": source,
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
            "load_average_at_start": load_at_start,
            "load_average_at_end": list(os.getloadavg()),
            "host_processes_at_start": processes_at_start,
            "plan": asdict(plan),
            "duration_s": round(total, 2),
            "phase_s": {k: round(v, 2) for k, v in timings.items()},
        },
        "parity": bench.details.pop("parity", {}),
        "metrics": bench.metrics,
        "targets": targets,
        "details": bench.details,
        "samples": bench.samples,
        "cleanup": clean,
        "errors": bench.errors,
    }
    print()
    print(table(bench.metrics))
    print()
    for key, t in targets.items():
        state = "n/a" if t["met"] is None else ("met" if t["met"] else "MISSED")
        value = "n/a" if t["value"] is None else f"{t['value']:.3f}"
        print(f"target {key}: {t['description']}: {value} -> {state}")
    parity = report["parity"]
    if parity:
        hidden = parity["commands_hidden_from_both"]
        named = ", ".join(name for name in ("R", "Rscript") if name in hidden) or "neither R nor Rscript"
        print(f"raw client's PATH: {parity['raw_path']} ({len(hidden)} host commands left out, {named} among them)")
        shown = [a if len(a) <= 100 else f"{a[:60]}...({len(a)} chars; see --json)" for a in parity["serve_args"]]
        print(f"serve args (both clients): {' '.join(shown)}")
    meta = report["meta"]
    print(
        "load average (1/5/15 min) at start "
        + "/".join(f"{v:.2f}" for v in meta["load_average_at_start"])
        + ", at end "
        + "/".join(f"{v:.2f}" for v in meta["load_average_at_end"])
        + f" ({os.cpu_count()} CPUs)"
    )
    print(f"cleanup: {'ok' if clean['ok'] else 'FAILED ' + json.dumps(clean)}; took {total:.1f}s")
    for error in bench.errors:
        print(f"error: {error}")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    return 0 if clean["ok"] and not bench.errors else 1


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child is not None:
        return child_main(args.child, args.binary, args.child_setup)
    if args.manager:
        return run_manager(args)
    if args.serve:
        return run_serve(args)
    if args.ray:
        return run_section(args, "bench_ray")
    return asyncio.run(run(args))


def run_serve(args: argparse.Namespace) -> int:
    """The ``--serve`` section: serve vs library vs raw warm round trips (see bench_serve.py)."""
    import bench_serve  # beside this script

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    log("phase: serve warm round trip")
    report = asyncio.run(bench_serve.run(args.binary, args.quick, log))
    report["meta"] = {"quick": args.quick, "binary": str(args.binary), "versions": versions(), "source": source_state()}
    print(bench_serve.table(report))
    target = report.get("target")
    if target is not None:
        state = "met" if target["met"] else "MISSED"
        print(f"target serve/raw warm round trip median: <= {target['threshold']:g}: {target['value']} -> {state}")
    print(f"cleanup: {'ok' if report['cleanup']['ok'] else 'FAILED ' + json.dumps(report['cleanup'])}")
    for error in report["errors"]:
        print(f"error: {error}")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0 if report["cleanup"]["ok"] and not report["errors"] else 1


def run_manager(args: argparse.Namespace) -> int:
    """The ``--manager`` section: its own figures, targets and cleanup check (see bench_manager.py)."""
    return run_section(args, "bench_manager")


def run_section(args: argparse.Namespace, module: str) -> int:
    """A section in its own module beside this script (``run``, ``table``, targets, cleanup check)."""
    import importlib

    section = importlib.import_module(module)

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    report = asyncio.run(section.run(args.binary, args.quick, log))
    report["meta"] = {"quick": args.quick, "binary": str(args.binary), "versions": versions(), "source": source_state()}
    print(section.table(report))
    for key, target in report["targets"].items():
        state = "met" if target["met"] else "MISSED"
        print(f"target {key}: <= {target['threshold']:g} ms: {target['value']} -> {state}")
    print(f"cleanup: {'ok' if report['cleanup']['ok'] else 'FAILED ' + json.dumps(report['cleanup'])}")
    for error in report["errors"]:
        print(f"error: {error}")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0 if report["cleanup"]["ok"] and not report["errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
