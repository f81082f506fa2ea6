"""The final check that nothing survived, and the watchdog of a whole run."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
import threading
import time
from typing import Any

import psutil

from .processes import _alive, describe
from .sessions import Bench
from .settings import REAP_GRACE


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
