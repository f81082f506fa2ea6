"""The soak's bounds (seconds: passing one is a hang), the operations' weights, and the cells it runs."""

from __future__ import annotations

#: Per-operation bounds, in seconds. Passing one is a hang.
BOUNDS: dict[str, float] = {
    "open": 30.0,  # start(): version check, spawn, initialize, verification
    "warm": 30.0,  # any cell that has to start a worker first (~2-3 s idle, 5-8 s under load here)
    "trivial": 10.0,  # a trivial cell on a running worker
    "send": 10.0,  # submitting a long cell with a short observation window
    "interrupt": 10.0,  # host interrupt()
    "settle": 15.0,  # polling until a stopped cell is reported done
    "cancel": 5.0,  # console.cancel(), and the in-flight call failing
    "close": 10.0,  # close(), idle, busy or frozen (stdin, 3 s, SIGTERM, 3 s, SIGKILL), an in-flight call failing
    "dead_call": 10.0,  # the first call after a SIGKILL (must raise ConnectionClosed)
    "crash": 20.0,  # a cell that kills its worker, and the restart it causes
    "flood": 15.0,  # a cell printing 1 MB
    "stdin": 10.0,  # a cell waiting on input(), and the answer
    "restart": 20.0,  # host restart()
    "reap": 5.0,  # every process of a closed session gone
    "abandon": 2.0,  # a run() whose caller's cancel scope fired must return that long after it
}

#: Steps that run a cell: when the session has no running worker (cold open, after a crash, a restart),
#: the worker's startup comes first and the bound is at least BOUNDS["warm"].
CELL_STEPS = frozenset({"trivial", "send", "crash", "flood", "stdin"})
#: Steps after which the worker is known to be up (a cell ran to completion on it).
WARMING_STEPS = frozenset({"warm", "trivial", "flood", "stdin"})

#: How much longer than its bound a step may take before the watchdog ends the run.
WATCHDOG_SLACK = 30.0

#: Relative weights of the operations on an existing session.
WEIGHTS: dict[str, int] = {
    "trivial": 3,
    "interrupt": 2,
    "cancel": 1,
    "close_busy": 1,
    "close": 1,
    "sigkill": 1,
    "freeze": 1,
    "crash": 1,
    "flood": 1,
    "stdin": 2,
    "restart": 1,
    "abandon": 1,
}
OPERATIONS = ("open", *WEIGHTS)
BYSTANDER_PROBABILITY = 0.35
#: How an open goes (cumulative): 8 % aborted by the opener's own cancel scope, 7 % raced by close()
#: or cancel() from another task, 25 % cold (no first cell), the rest warm.
ABORT_OPEN_PROBABILITY = 0.08
RACE_OPEN_PROBABILITY = 0.15
COLD_OPEN_PROBABILITY = 0.40
#: How often open sessions' process trees are sampled (plus a sample before every fault).
SNAPSHOT_INTERVAL = 0.2
POLL_WINDOWS = (0.5, 2.0, 30.0)
LONG_CELL = "import time\nfor _ in range(600):\n    time.sleep(0.1)"
FLOOD_CELL = "print('x' * 1_000_000)"
TEXT_CAP = 8 * 1024
STDIN_CELL = "_answer = input('?')\nprint('got', _answer)"
