"""``bench.py`` section: what confinement adds to a session (the supervisor and the start-time probe)."""

from __future__ import annotations

import statistics
import subprocess
import time
from typing import Any

from console_bridge._confinement._plan import supervisor_command


def supervisor_overhead(reps: int) -> dict[str, float]:
    """Spawn-to-exit of ``/bin/true`` directly and under the supervisor (``python -I -S``), medians in ms."""
    direct: list[float] = []
    supervised: list[float] = []
    for _ in range(reps):
        for argv, out in (
            (["/bin/true"], direct),
            (supervisor_command(["/bin/true"], cwd=None, grace=1.0), supervised),
        ):
            began = time.perf_counter()
            subprocess.run(argv, stdin=subprocess.DEVNULL, check=True)
            out.append((time.perf_counter() - began) * 1000)
    return {"direct_ms": statistics.median(direct), "supervised_ms": statistics.median(supervised)}


def record(bench: Any, probe_ms: list[float], cold_bridge_ms: float | None, reps: int) -> None:
    """Add the confinement rows to ``bench`` (a ``bench.Bench``)."""
    costs = supervisor_overhead(reps)
    added = costs["supervised_ms"] - costs["direct_ms"]
    bench.record(
        "supervisor_start_added_ms", "supervisor start added per session (python -I -S), median", "ms", None, added
    )
    if probe_ms:
        probe = statistics.median(probe_ms)
        bench.record("probe_cell_ms", "start-time confinement probe cell on a booted worker, median", "ms", None, probe)
        if cold_bridge_ms:
            bench.record(
                "probe_share_of_cold_start",
                "probe cell as a share of the bridge's cold start",
                "%",
                None,
                100.0 * probe / cold_bridge_ms,
            )
