"""Close, cancel and interrupt latency, and memory per session."""

from __future__ import annotations

import gc
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from typing import Any

import psutil

from .processes import _alive, wait_gone
from .sessions import Bench, BridgeSession, RawSession, Session, _check_one
from .settings import BUSY_CELL, RUNNING, TRIVIAL
from .stats import median, to_ms


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
