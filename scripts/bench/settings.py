"""The bench's settings: the cells it runs, the bounds of a step and a run, the quick and full plans,
and the targets."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "bench.py"  # the command: scripts/bench.py
RUNNING = "[running; poll with an empty send]"
TRIVIAL = "1"
LAG_CELL = "import time\ntime.sleep(2)\nprint('CELL_END', repr(time.time()))"
BUSY_CELL = "import time\ntime.sleep(30)"
END_RE = re.compile(r"CELL_END (\d+(?:\.\d+)?)")
#: The ``serve`` arguments console_bridge documents for the read-only profile (checked, not used).
DOCUMENTED_ARGS = [
    "serve",
    "--no-config",
    "-c",
    "python={python}",
    "-c",
    "sandbox.network=restricted",
    "-c",
    "sandbox.profile=read_only",
    "-c",
    "sandbox.tempdir=managed",
    "-c",
    "languages=[python, sql]",
    "-c",
    "tool.parameters.requirements.enabled=false",
]
#: Upper bound of any single benchmark step; a hang becomes an error, never a stuck run.
STEP_TIMEOUT = 180.0
#: How long the final check waits for sandbox children to die with their parent.
REAP_GRACE = 10.0
#: Hard wall-clock limits of a whole run: past them a watchdog thread kills everything and exits 1.
HARD_LIMIT = {"quick": 540.0, "full": 3600.0}


@dataclass(frozen=True)
class Plan:
    cold: int
    warm: int
    lag: int
    close: int
    memory: int
    sessions: int
    cells: int
    rounds: int  # concurrency rounds, both kinds' sessions open, order alternating (raw, bridge, bridge, raw, ...)
    fresh: int  # cold starts in a fresh interpreter, per client
    idle_window: float  # seconds of idle-CPU probing with N sessions open


QUICK = Plan(cold=3, warm=30, lag=2, close=1, memory=1, sessions=4, cells=10, rounds=2, fresh=1, idle_window=1.0)
PLAN_FIELDS = tuple(f.name for f in dataclasses.fields(Plan))
PHASE_NAMES = ("cold", "fresh", "warm", "lag", "close", "memory", "concurrency")
FULL = Plan(cold=10, warm=300, lag=5, close=5, memory=3, sessions=16, cells=50, rounds=2, fresh=3, idle_window=3.0)

TARGETS: dict[str, tuple[str, str, float]] = {
    # key: (description, metric key + column, threshold); issue 23's targets
    "warm_rtt_ratio": ("warm round trip, median, bridge/raw <= 1.03", "warm_rtt_median_ms:ratio", 1.03),
    "warm_rtt_p95_ratio": ("warm round trip, p95, bridge/raw <= 1.05", "warm_rtt_p95_ms:ratio", 1.05),
    "cold_start_ratio": ("cold start, median, bridge/raw <= 1.00 (same launch)", "cold_start_median_ms:ratio", 1.00),
    "concurrency_ratio": (
        "N sessions at once, per-call latency, bridge/raw <= 1.05",
        "concurrent_n_per_call_ms:ratio",
        1.05,
    ),
    "run_completion_lag": ("run() completion lag, median <= 10 ms", "completion_lag_median_ms:bridge", 10.0),
    "idle_close": ("idle close, median <= 100 ms", "close_idle_median_ms:bridge", 100.0),
    "cancel": ("cancel() of a busy session, median <= 50 ms", "cancel_busy_median_ms:bridge", 50.0),
}
