"""The ``--connection`` section of scripts/bench.py: ``McpConnection``'s own work per call.

One warm ``tools/call`` against ``scripts/bench/floor_server.py`` (a server that answers every call
with ``1`` at once), over stdio and over Streamable HTTP on 127.0.0.1, by two clients interleaved
in rotation, each with a server process of its own:

- sdk: the MCP SDK's ``ClientSession`` (``call_tool``), what ``McpConnection`` wraps;
- bridge: ``AsyncMcpConnection.call_tool`` under a read-write policy without approval and
  ``pin_schemas="on_change"`` (the allowlist, the busy slot, the deadline, the output cap and the
  result's framing all run);
- strict: the same with the default ``pin_schemas="strict"``, which re-lists the tools before every
  call (a second round trip, by design: a server that swaps a tool's schema is caught at the call).

``own_ms`` is bridge median less sdk median: the gate's own work per call. Target: at most
``TARGET_MS`` (issue 32).
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any

from bench.stats import percentile  # scripts/bench/, beside this script
from bench_serve import FLOOR_SERVER, start_floor_http
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from console_bridge import AsyncMcpConnection, Owner, Policy

TARGET_MS = 0.10
PLANS = {"quick": {"warmup": 20, "calls": 200}, "full": {"warmup": 50, "calls": 2000}}


async def _sdk(stack: AsyncExitStack, transport: str, url: str | None) -> Callable[[], Awaitable[Any]]:
    if transport == "stdio":
        params = StdioServerParameters(command=sys.executable, args=[str(FLOOR_SERVER), "stdio"])
        read, write = await stack.enter_async_context(stdio_client(params))
    else:
        assert url is not None
        read, write = await stack.enter_async_context(streamable_http_client(url))
    session = await stack.enter_async_context(ClientSession(read, write))
    await session.initialize()
    return lambda: session.call_tool("send", {})


async def _bridge(
    stack: AsyncExitStack, transport: str, url: str | None, pins: str = "on_change"
) -> Callable[[], Awaitable[Any]]:
    entry: dict[str, Any] = (
        {"command": sys.executable, "args": [str(FLOOR_SERVER), "stdio"]} if transport == "stdio" else {"url": url}
    )
    policy = Policy(mode="read_write", approve_writes=False, pin_schemas=pins)  # type: ignore[arg-type]
    conn = AsyncMcpConnection(
        {"mcpServers": {"floor": entry}}, "floor", owner=Owner("bench"), tools=["send"], policy=policy
    )
    await stack.enter_async_context(conn)
    return lambda: conn.call_tool("send", {})


async def run(quick: bool, log: Callable[[str], None]) -> dict[str, Any]:
    plan = PLANS["quick" if quick else "full"]
    report: dict[str, Any] = {"target_ms": TARGET_MS, "plan": plan, "transports": {}}
    http, url = start_floor_http()
    try:
        for transport in ("stdio", "http"):
            log(f"  McpConnection vs the SDK client over {transport}")
            async with AsyncExitStack() as stack:
                clients = {
                    "sdk": await _sdk(stack, transport, url),
                    "bridge": await _bridge(stack, transport, url),
                    "strict": await _bridge(stack, transport, url, "strict"),
                }
                times: dict[str, list[float]] = {name: [] for name in clients}
                for i in range(plan["warmup"] + plan["calls"]):
                    for name, call in clients.items():
                        started = time.perf_counter()
                        await call()
                        if i >= plan["warmup"]:
                            times[name].append((time.perf_counter() - started) * 1000)
            row = {name: {"p50": statistics.median(v), "p95": percentile(v, 0.95)} for name, v in times.items()}
            row["own_ms"] = row["bridge"]["p50"] - row["sdk"]["p50"]
            row["ok"] = row["own_ms"] <= TARGET_MS
            report["transports"][transport] = row
    finally:
        http.terminate()
        http.wait(10)
    return report


def table(report: dict[str, Any]) -> str:
    lines = [
        "transport  sdk p50/p95 ms     bridge p50/p95 ms  strict p50/p95 ms  "
        f"own ms (target <= {report['target_ms']:.2f})"
    ]
    for transport, row in report["transports"].items():
        cells = "    ".join(f"{row[k]['p50']:6.3f} / {row[k]['p95']:6.3f}" for k in ("sdk", "bridge", "strict"))
        lines.append(f"{transport:<10} {cells}    {row['own_ms']:+.3f} {'ok' if row['ok'] else 'OVER'}")
    return "\n".join(lines)
