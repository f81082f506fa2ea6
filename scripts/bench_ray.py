"""The ``--ray`` section of scripts/bench.py: sessions on a Ray cluster against in-process ones.

A real 2-node Ray cluster is started on this machine (loopback only, no dashboard, no usage
stats), each node declaring ``console_sessions``. Figures:

1. warm round trip of ``1``: ``RayConsole.run`` (driver -> node host actor -> AsyncConsole)
   against ``AsyncConsole.run`` in this process, interleaved A/B; the added ms at p50 and p95;
2. throughput: ``sessions`` sessions x ``cells`` cells of ``1`` (each session runs its cells one
   after the other, all sessions at once), spread over the 2 nodes by ``RaySessionManager``,
   against the same on a local ``AsyncSessionManager``: cells per second and the ratio;
3. cleanup: no process of the sessions survives (nodes and local).

Target: added warm round trip p50 <= 2 ms.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import psutil

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # read at import: loopback node addresses
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

from bench.stats import percentile  # scripts/bench/, beside this script

from console_bridge import AsyncConsole, AsyncSessionManager, Owner  # noqa: E402, RUF100

TARGETS = {"added_round_trip_p50_ms": 2.0}
PLANS = {
    "quick": {"round_trips": 30, "sessions": 4, "cells": 5},
    "full": {"round_trips": 200, "sessions": 32, "cells": 20},
}
NODE = {"num_cpus": 1, "node_ip_address": "127.0.0.1", "object_store_memory": 80 * 1024 * 1024}


def _servers(binary: Path) -> set[int]:
    """Servers of this binary (other checkouts on the machine run their own)."""
    out = set()
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info.get("cmdline") or []
        if str(binary) in cmdline[:2] and "serve" in cmdline:
            out.add(proc.pid)
    return out


async def _cells(consoles: list[Any], cells: int) -> float:
    """Every console runs ``cells`` cells of ``1`` one after the other, all at once; the wall time."""

    async def one(console: Any) -> None:
        for _ in range(cells):
            result = await console.run(python="1")
            assert result.text.strip() == "1", result.text

    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for console in consoles:
            tg.start_soon(one, console)
    return time.perf_counter() - started


async def _open_all(open_one: Callable[[int], Any], n: int, batch: int = 4) -> list[Any]:
    """Open ``n`` sessions, ``batch`` cold starts at a time (a 2-core machine cannot start 32 at once)."""
    out: list[Any] = [None] * n

    async def opener(i: int) -> None:
        out[i] = await open_one(i)

    for first in range(0, n, batch):
        async with anyio.create_task_group() as tg:
            for i in range(first, min(n, first + batch)):
                tg.start_soon(opener, i)
    return out


async def run(binary: Path, quick: bool, log: Callable[[str], None]) -> dict[str, Any]:
    import ray
    from ray.cluster_utils import Cluster

    from console_bridge.ray import RaySessionManager

    plan = PLANS["quick" if quick else "full"]
    per_node = -(-plan["sessions"] // 2)
    before = _servers(binary)
    scratch = Path(tempfile.mkdtemp(prefix="cb-bench-ray-"))
    os.environ["CONSOLE_BRIDGE_STATE_DIR"] = str(scratch / "state")
    os.makedirs("/tmp/ray", exist_ok=True)
    report: dict[str, Any] = {"plan": plan, "errors": [], "targets": {}}
    # The recordings and the workspace beside the state folder, not around it (a session's private
    # folder inside its own recordings folder is hidden from its server: mcp-console then cannot
    # create its cache there, "Read-only file system").
    recordings, workspace = scratch / "recordings", scratch / "workspace"
    recordings.mkdir()
    workspace.mkdir()
    options = {"command": str(binary), "recordings_dir": str(recordings), "warm": 0}
    started = time.perf_counter()
    node = {**NODE, "resources": {"console_sessions": per_node}}
    cluster = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False})
    session_dir = cluster.head_node.get_session_dir_path()  # Ray keeps it under /tmp/ray: removed below
    try:
        cluster.add_node(**node)
        ray.init(address=cluster.address, log_to_driver=False)
        cluster.wait_for_nodes()
        report["cluster_start_s"] = round(time.perf_counter() - started, 2)
        log(f"cluster up in {report['cluster_start_s']} s")

        # 1. warm round trip, interleaved
        async with (
            RaySessionManager(**options) as manager,
            manager.session(owner=Owner("bench")) as remote,
            AsyncConsole(workspace, command=binary, recordings_dir=recordings) as local,
        ):
            for console in (remote, local):
                for _ in range(5):
                    await console.run(python="1")
            remote_ms: list[float] = []
            local_ms: list[float] = []
            for _ in range(plan["round_trips"]):
                for console, samples in ((remote, remote_ms), (local, local_ms)):
                    t0 = time.perf_counter()
                    await console.run(python="1")
                    samples.append((time.perf_counter() - t0) * 1000)
        rt = {
            "remote_p50_ms": round(statistics.median(remote_ms), 3),
            "local_p50_ms": round(statistics.median(local_ms), 3),
            "remote_p95_ms": round(percentile(remote_ms, 0.95) or 0.0, 3),
            "local_p95_ms": round(percentile(local_ms, 0.95) or 0.0, 3),
        }
        rt["added_p50_ms"] = round(rt["remote_p50_ms"] - rt["local_p50_ms"], 3)
        rt["added_p95_ms"] = round(rt["remote_p95_ms"] - rt["local_p95_ms"], 3)
        report["round_trip"] = rt
        log(f"round trip: {rt}")

        # 2. throughput
        n, cells = plan["sessions"], plan["cells"]
        async with RaySessionManager(**options, max_sessions=n, start_timeout=300) as manager:
            t0 = time.perf_counter()
            remotes = await _open_all(lambda i: manager.open(owner=Owner(f"r{i}")), n)
            ray_open = time.perf_counter() - t0
            nodes = sorted({c.node_id for c in remotes})
            ray_wall = await _cells(remotes, cells)
        log(f"ray: {n} sessions opened in {ray_open:.1f} s on {len(nodes)} nodes; cells in {ray_wall:.2f} s")
        async with AsyncSessionManager(workspace, max_sessions=n, **options) as local_manager:
            t0 = time.perf_counter()
            locals_ = await _open_all(lambda i: local_manager.open(owner=Owner(f"l{i}")), n)
            local_open = time.perf_counter() - t0
            local_wall = await _cells(locals_, cells)
        log(f"local: {n} sessions opened in {local_open:.1f} s; cells in {local_wall:.2f} s")
        report["throughput"] = {
            "sessions": n,
            "cells_per_session": cells,
            "nodes": len(nodes),
            "ray_cells_per_s": round(n * cells / ray_wall, 1),
            "local_cells_per_s": round(n * cells / local_wall, 1),
            "ratio_ray_over_local": round(local_wall / ray_wall, 3),
            "ray_open_s": round(ray_open, 1),
            "local_open_s": round(local_open, 1),
        }
    except Exception as exc:
        report["errors"].append(f"{type(exc).__name__}: {exc}")
    finally:
        ray.shutdown()
        cluster.shutdown()
        shutil.rmtree(session_dir, ignore_errors=True)
        latest = Path(session_dir).parent / "session_latest"
        if latest.is_symlink() and os.readlink(latest) == session_dir:
            latest.unlink()
    deadline = time.monotonic() + 30
    while (_servers(binary) - before) and time.monotonic() < deadline:
        await anyio.sleep(0.2)
    left = sorted(_servers(binary) - before)
    shutil.rmtree(scratch, ignore_errors=True)
    report["cleanup"] = {"ok": not left, "servers_left": left}
    rt = report.get("round_trip")
    if rt is not None:
        value = rt["added_p50_ms"]
        report["targets"]["added_round_trip_p50_ms"] = {
            "value": value,
            "threshold": TARGETS["added_round_trip_p50_ms"],
            "met": value <= TARGETS["added_round_trip_p50_ms"],
        }
    return report


def table(report: dict[str, Any]) -> str:
    rows = ["| figure | value |", "|---|--:|"]
    rt = report.get("round_trip")
    if rt:
        rows.append(
            f"| warm round trip of `1`, in-process, p50 (p95) | {rt['local_p50_ms']} ({rt['local_p95_ms']}) ms |"
        )
        rows.append(
            f"| warm round trip of `1`, Ray session, p50 (p95) | {rt['remote_p50_ms']} ({rt['remote_p95_ms']}) ms |"
        )
        rows.append(f"| added by Ray, p50 (p95) | {rt['added_p50_ms']} ({rt['added_p95_ms']}) ms |")
    tp = report.get("throughput")
    if tp:
        rows.append(
            f"| {tp['sessions']} sessions x {tp['cells_per_session']} cells, Ray ({tp['nodes']} nodes) "
            f"| {tp['ray_cells_per_s']} cells/s |"
        )
        rows.append(f"| same, local AsyncSessionManager | {tp['local_cells_per_s']} cells/s |")
        rows.append(f"| throughput ratio Ray / local | {tp['ratio_ray_over_local']} |")
        rows.append(f"| opening the sessions, Ray / local | {tp['ray_open_s']} / {tp['local_open_s']} s |")
    if "cluster_start_s" in report:
        rows.append(f"| 2-node cluster start | {report['cluster_start_s']} s |")
    return "\n".join(rows)
