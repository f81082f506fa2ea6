"""The command line (``python scripts/bench.py --help``) and the sections in modules of their own."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import psutil

from .cleanup import cleanup, start_watchdog
from .output import evaluate_targets, table
from .phase_calls import phase_completion_lag, phase_warm
from .phase_close import phase_close_cancel, phase_memory
from .phase_concurrency import phase_concurrency
from .phase_start import child_main, phase_cold_start, phase_fresh, take_serve_args
from .sessions import Bench, _check_one
from .settings import FULL, HARD_LIMIT, PHASE_NAMES, PLAN_FIELDS, QUICK, SCRIPT, STEP_TIMEOUT, TRIVIAL


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
        "--connection",
        action="store_true",
        help="run the McpConnection section (scripts/bench_connection.py) instead: its own work over the SDK client",
    )
    parser.add_argument(
        "--ray", action="store_true", help="run the Ray section (scripts/bench_ray.py) instead; needs the [ray] extra"
    )
    parser.add_argument(
        "--density",
        type=int,
        metavar="N",
        help="run the density section (scripts/bench_density.py) instead: N idle sessions live at once",
    )
    parser.add_argument(
        "--density-modes",
        default="manager,direct",
        metavar="LIST",
        help="with --density: how the sessions are started, comma-separated: manager (AsyncSessionManager), "
        "direct (AsyncConsole); default both, one after the other",
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
    if args.density is not None and args.density < 1:
        parser.error(f"--density {args.density}: at least 1 session")
    args.density_modes = tuple(name.strip() for name in args.density_modes.split(",") if name.strip())
    unknown = sorted(set(args.density_modes) - {"manager", "direct"})
    if unknown or not args.density_modes:
        parser.error(f"--density-modes: unknown {', '.join(unknown) or 'nothing given'} (known: manager, direct)")
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
    if args.connection:
        return run_connection(args)
    if args.density is not None:
        return run_section(args, "bench_density", n=args.density, modes=args.density_modes)
    return asyncio.run(run(args))


def run_connection(args: argparse.Namespace) -> int:
    """The ``--connection`` section: McpConnection's own work per call over the SDK client it wraps."""
    import bench_connection  # beside this script

    print("phase: McpConnection warm call", file=sys.stderr, flush=True)
    report = asyncio.run(bench_connection.run(args.quick, lambda m: print(m, file=sys.stderr, flush=True)))
    print(bench_connection.table(report))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2), encoding="utf-8")
    return 0


def run_serve(args: argparse.Namespace) -> int:
    """The ``--serve`` section: serve vs library vs raw warm round trips (see bench_serve.py)."""
    import bench_serve  # beside this script

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    log("phase: serve warm round trip")
    report = asyncio.run(bench_serve.run(args.binary, args.quick, log))
    report["meta"] = {"quick": args.quick, "binary": str(args.binary), "versions": versions(), "source": source_state()}
    print(bench_serve.table(report))
    for key, shown in (("target", "serve"), ("target_http", "serve-http")):
        target = report.get(key)
        if target is not None:
            state = "met" if target["met"] else "MISSED"
            print(
                f"target {shown}/raw warm round trip median: <= {target['threshold']:g}: {target['value']} -> {state}"
            )
    if report.get("hop_ms"):
        print(
            "the second MCP hop (serve less library, medians): "
            + ", ".join(f"{k} +{v:.2f} ms" for k, v in report["hop_ms"].items())
        )
    if report.get("serve_own_ms"):
        print(
            "of which the client and transport alone (a server that does nothing): "
            + ", ".join(f"{k} {v:.2f} ms" for k, v in report["floor_ms"].items())
            + "; serve's own work: "
            + ", ".join(f"{k} {v:+.2f} ms" for k, v in report["serve_own_ms"].items())
        )
        print(
            f"the target leaves {report['budget_ms']:.2f} ms over raw; with serve's own work at zero the least "
            "reachable is (library + floor) / raw: "
            + ", ".join(f"{k} x{v:.3f}" for k, v in report["best_ratio"].items())
        )
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


def run_section(args: argparse.Namespace, module: str, **options: Any) -> int:
    """A section in its own module beside this script (``run``, ``table``, targets, cleanup check);
    ``options`` go to its ``run``."""
    import importlib

    section = importlib.import_module(module)

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    report = asyncio.run(section.run(args.binary, args.quick, log, **options))
    report["meta"] = {"quick": args.quick, "binary": str(args.binary), "versions": versions(), "source": source_state()}
    print(section.table(report))
    for key, target in report["targets"].items():
        state = "met" if target["met"] else "MISSED"
        bound = f"{target.get('op', '<=')} {target['threshold']:g}{target.get('unit', ' ms')}"
        print(f"target {key}: {bound}: {target['value']} -> {state}")
    print(f"cleanup: {'ok' if report['cleanup']['ok'] else 'FAILED ' + json.dumps(report['cleanup'])}")
    for error in report["errors"]:
        print(f"error: {error}")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0 if report["cleanup"]["ok"] and not report["errors"] else 1
