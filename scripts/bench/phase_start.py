"""Cold start (in this process, and in a fresh interpreter), and the serve arguments both clients use."""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

import psutil

from .processes import _alive, child_pids, tree_of, wait_gone
from .sessions import Bench, BridgeSession, Session, _check_one, host_env, mirror_server_path
from .settings import DOCUMENTED_ARGS, SCRIPT, TRIVIAL
from .stats import median, to_ms


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
            await session.client._launcher.probe(session.client.recordings_base)
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
