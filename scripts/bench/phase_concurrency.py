"""N concurrent sessions each running M trivial cells, and the CPU of idle sessions."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable
from typing import Any

from .phase_close import _Cells
from .sessions import Bench, Session, _check_one
from .settings import TRIVIAL
from .stats import p95, percentile, to_ms


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
