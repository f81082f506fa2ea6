"""The ``--manager`` section of scripts/bench.py: ``AsyncSessionManager`` claims against cold starts.

Figures (all against the real binary, every session in its own scratch folders):

1. claim to the first result of ``1``: a warm hit (p50/p99), a miss (pool empty: a cold start
   through the manager) and a plain ``AsyncConsole`` cold start for reference;
2. churn: ``cycles`` claim/run/release cycles by two concurrent claimers on a manager with
   ``warm=2, max_sessions=4``: sessions per second, then leaked processes and folders;
3. memory per idle warm session: the RSS of its process tree (server, worker, sandbox helpers)
   and the Python-side allocations of the manager (tracemalloc), with ``warm=3``.

Targets: warm claim to first result p50 <= 10 ms, p99 <= 50 ms.
"""

from __future__ import annotations

import contextlib
import gc
import os
import shutil
import statistics
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import psutil
from bench.stats import percentile  # scripts/bench/, beside this script

from console_bridge import AsyncConsole, AsyncSessionManager, Owner

TARGETS = {"warm_claim_p50_ms": 10.0, "warm_claim_p99_ms": 50.0}
PLANS = {
    "quick": {"hits": 10, "misses": 1, "cold": 1, "churn": 12, "memory_warm": 2},
    "full": {"hits": 40, "misses": 3, "cold": 3, "churn": 200, "memory_warm": 3},
}
#: Seconds any single wait in this section may take before the section fails.
STEP_BOUND = 120.0


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


async def _until(condition: Callable[[], bool], bound: float = STEP_BOUND) -> None:
    with anyio.fail_after(bound):
        while not condition():
            await anyio.sleep(0.01)


def _servers() -> list[psutil.Process]:
    out = []
    for proc in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if proc.status() != psutil.STATUS_ZOMBIE:
                out.append(proc)
    return out


def _tree_memory(pid: int) -> tuple[int, int]:
    """(RSS, PSS) in bytes of a process tree; PSS splits shared pages among their users."""
    rss = pss = 0
    with contextlib.suppress(psutil.Error):
        root = psutil.Process(pid)
        for proc in [root, *root.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                info = proc.memory_full_info()
                rss += info.rss
                pss += getattr(info, "pss", info.rss)
    return rss, pss


class _Scratch:
    """A workspace, a recordings folder and a private temp root for the section's sessions."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="bench-manager-"))
        self.workspace = self.root / "ws"
        self.recordings = self.root / "recordings"
        self.tmp = self.root / "tmp"
        self.state = self.root / "state"  # CONSOLE_BRIDGE_STATE_DIR: sessions' private folders, where used
        for path in (self.workspace, self.recordings, self.tmp, self.state):
            path.mkdir()

    def leftovers(self) -> list[str]:
        sessions = self.state / "sessions"
        private = sorted(f"state/{p.name}" for p in sessions.iterdir()) if sessions.is_dir() else []
        return sorted(p.name for p in self.tmp.iterdir()) + private


async def _claim_to_first_result(manager: AsyncSessionManager, owner: Owner) -> float:
    started = time.perf_counter()
    async with manager.session(owner=owner) as console:
        result = await console.run(python="1")
        elapsed = time.perf_counter() - started
        if result.text.strip() != "1":
            raise RuntimeError(f"unexpected result of 1: {result.text!r}")
    return elapsed


async def latency(scratch: _Scratch, options: dict[str, Any], plan: dict[str, int], log: Callable[[str], None]) -> dict:
    hits: list[float] = []
    async with AsyncSessionManager(scratch.workspace, warm=1, max_sessions=2, **options) as manager:
        for index in range(plan["hits"]):
            await _until(lambda: manager.stats().warm == 1)
            hits.append(await _claim_to_first_result(manager, Owner(f"hit-{index}")))
        claim_only = manager.stats().warm_hits
    log(f"  warm hits: p50 {_ms(statistics.median(hits))} ms over {len(hits)}")
    misses: list[float] = []
    async with AsyncSessionManager(scratch.workspace, warm=0, max_sessions=2, **options) as manager:
        for index in range(plan["misses"]):
            misses.append(await _claim_to_first_result(manager, Owner(f"miss-{index}")))
    cold: list[float] = []
    for _ in range(plan["cold"]):
        started = time.perf_counter()
        plain = {k: v for k, v in options.items() if k != "check_interval"}
        async with AsyncConsole(scratch.workspace, **plain) as console:
            await console.run(python="1")
            cold.append(time.perf_counter() - started)
    log(f"  miss: {_ms(statistics.median(misses))} ms; plain cold start: {_ms(statistics.median(cold))} ms")
    return {
        "warm_claim_p50_ms": _ms(percentile(hits, 0.5) or 0.0),
        "warm_claim_p99_ms": _ms(percentile(hits, 0.99) or 0.0),
        "warm_claim_only_p50_ms": claim_only.p50_ms,
        "warm_claim_only_p99_ms": claim_only.p99_ms,
        "miss_claim_median_ms": _ms(statistics.median(misses)),
        "cold_start_median_ms": _ms(statistics.median(cold)),
        "samples_ms": {
            "hits": [_ms(v) for v in hits],
            "misses": [_ms(v) for v in misses],
            "cold": [_ms(v) for v in cold],
        },
    }


async def churn(scratch: _Scratch, options: dict[str, Any], cycles: int, log: Callable[[str], None]) -> dict:
    done = 0
    peak = 0
    started = time.perf_counter()
    async with AsyncSessionManager(
        scratch.workspace, warm=2, max_sessions=4, acquire_timeout=STEP_BOUND, **options
    ) as m:

        async def claimer(name: str) -> None:
            nonlocal done
            while done < cycles:
                done += 1
                async with m.session(owner=Owner(name)) as console:
                    await console.run(python="1")

        async def sample() -> None:
            nonlocal peak
            while True:
                peak = max(peak, len(m.sessions()))
                await anyio.sleep(0.05)

        async with anyio.create_task_group() as tg:
            tg.start_soon(sample)
            async with anyio.create_task_group() as workers:
                workers.start_soon(claimer, "churn-a")
                workers.start_soon(claimer, "churn-b")
            tg.cancel_scope.cancel()
        elapsed = time.perf_counter() - started
        stats = m.stats()
    with anyio.move_on_after(10):  # what a closed session leaves dies within bounds
        await _until(lambda: not _servers())
    survivors = [f"{p.pid} {p.name()}" for p in _servers()]
    rate = done / elapsed
    log(f"  churn: {done} cycles in {elapsed:.1f}s = {rate:.2f} sessions/s; peak live {peak}")
    return {
        "cycles": done,
        "seconds": round(elapsed, 2),
        "sessions_per_second": round(rate, 3),
        "peak_live": peak,
        "warm_hits": stats.warm_hits.count,
        "misses": stats.misses.count,
        "leaked_processes": survivors,
        "leaked_folders": scratch.leftovers(),
    }


async def memory(scratch: _Scratch, options: dict[str, Any], warm: int, log: Callable[[str], None]) -> dict:
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    async with AsyncSessionManager(scratch.workspace, warm=warm, max_sessions=warm, **options) as manager:
        await _until(lambda: manager.stats().warm == warm)
        await anyio.sleep(1.0)  # let the trees settle before sampling
        gc.collect()
        python_bytes = tracemalloc.get_traced_memory()[0] - before
        trees = [_tree_memory(info.pid) for info in manager.sessions() if info.pid is not None]
    tracemalloc.stop()
    rss_mib = statistics.mean(t[0] for t in trees) / 2**20
    pss_mib = statistics.mean(t[1] for t in trees) / 2**20
    python_kib = python_bytes / warm / 1024
    log(f"  memory per idle warm session: {pss_mib:.1f} MiB PSS ({rss_mib:.1f} RSS), {python_kib:.0f} KiB Python")
    return {
        "warm_sessions": warm,
        "tree_pss_mib_per_session": round(pss_mib, 1),
        "tree_rss_mib_per_session": round(rss_mib, 1),
        "python_kib_per_session": round(python_kib, 1),
    }


async def run(binary: Path, quick: bool, log: Callable[[str], None]) -> dict[str, Any]:
    """Every figure of the section, its targets, and the cleanup check."""
    plan = PLANS["quick" if quick else "full"]
    scratch = _Scratch()
    saved = tempfile.tempdir
    tempfile.tempdir = str(scratch.tmp)  # each session's private TMPDIR lands here: leftovers are leaks
    saved_state = os.environ.get("CONSOLE_BRIDGE_STATE_DIR")
    os.environ["CONSOLE_BRIDGE_STATE_DIR"] = str(scratch.state)
    options = {"command": binary, "recordings_dir": scratch.recordings, "check_interval": 0.5}
    report: dict[str, Any] = {"plan": plan, "errors": []}
    try:
        for name, section in (
            ("latency", lambda: latency(scratch, options, plan, log)),
            ("churn", lambda: churn(scratch, options, plan["churn"], log)),
            ("memory", lambda: memory(scratch, options, plan["memory_warm"], log)),
        ):
            log(f"phase: manager {name}")
            try:
                with anyio.fail_after(STEP_BOUND * (10 if name == "churn" and not quick else 3)):
                    report[name] = await section()
            except Exception as exc:
                report["errors"].append(f"{name}: {type(exc).__name__}: {exc}")
                log(f"  FAILED: {type(exc).__name__}: {exc}")
    finally:
        tempfile.tempdir = saved
        if saved_state is None:
            os.environ.pop("CONSOLE_BRIDGE_STATE_DIR", None)
        else:
            os.environ["CONSOLE_BRIDGE_STATE_DIR"] = saved_state
        with anyio.move_on_after(10):
            await _until(lambda: not _servers())
        survivors = _servers()
        for proc in survivors:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        leftovers = scratch.leftovers()
        shutil.rmtree(scratch.root, ignore_errors=True)
    lat = report.get("latency", {})
    report["targets"] = {
        key: {"threshold": limit, "value": lat.get(key), "met": lat.get(key) is not None and lat[key] <= limit}
        for key, limit in TARGETS.items()
    }
    report["cleanup"] = {
        "survivors": [p.pid for p in survivors],
        "leftover_folders": leftovers,
        "ok": not survivors and not leftovers and not scratch.root.exists(),
    }
    return report


def table(report: dict[str, Any]) -> str:
    lat, ch, mem = report.get("latency", {}), report.get("churn", {}), report.get("memory", {})
    leaks = f"{len(ch.get('leaked_processes', []))} / {len(ch.get('leaked_folders', []))}"
    memory = f"{mem.get('tree_pss_mib_per_session')} MiB ({mem.get('tree_rss_mib_per_session')} MiB)"
    rows = [
        (
            "warm claim to first result of `1`, p50 / p99",
            f"{lat.get('warm_claim_p50_ms')} / {lat.get('warm_claim_p99_ms')} ms",
        ),
        (
            "  of which the claim, p50 / p99",
            f"{lat.get('warm_claim_only_p50_ms')} / {lat.get('warm_claim_only_p99_ms')} ms",
        ),
        ("miss (pool empty) claim to first result, median", f"{lat.get('miss_claim_median_ms')} ms"),
        ("plain AsyncConsole cold start to first result, median", f"{lat.get('cold_start_median_ms')} ms"),
        ("churn (warm=2, max_sessions=4, 2 claimers)", f"{ch.get('cycles')} cycles, {ch.get('sessions_per_second')}/s"),
        ("churn leaks (processes / folders)", leaks),
        ("memory per idle warm session: tree PSS (RSS)", memory),
        ("memory per idle warm session: Python (tracemalloc)", f"{mem.get('python_kib_per_session')} KiB"),
    ]
    width = max(len(r[0]) for r in rows)
    return "\n".join(f"| {label.ljust(width)} | {value} |" for label, value in rows)
