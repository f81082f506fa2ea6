"""The warm round trip of ``1`` and the completion lag of a 2 s cell."""

from __future__ import annotations

import gc
import time
from collections.abc import Awaitable, Callable

from .sessions import Bench, _check_one
from .settings import END_RE, LAG_CELL, TRIVIAL
from .stats import median, p95, to_ms


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
