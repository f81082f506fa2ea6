#!/usr/bin/env python3
"""Chaos soak for ``console_bridge.AsyncConsole`` against a real ``mcp-console`` binary.

Every cycle makes one seeded random choice among the operations below, applied to one of up
to ``--sessions`` concurrently open sessions (each with its own temporary workspace and
recordings folder, all under one temporary root that is removed at the end). With some
probability a *bystander* trivial cell runs at the same time on another open session, so a
fault in one session is exercised while a call is in flight in a neighbour.

Operations (the fault kinds)::

    open          start a session (and, usually, a first cell that starts the worker); sometimes the
                  opener's own cancel scope fires during start(), or another task calls close() or
                  cancel() during start(): either is final, and nothing may survive
    trivial       a trivial cell, output checked
    interrupt     a long cell, then the host's interrupt(); the session must stay usable
    cancel        a long run() in a task, console.cancel() from outside mid-call
    close_busy    close() while a cell runs (idle between windows, or with a call in flight)
    close         close() of an idle session
    sigkill       SIGKILL of the server from outside; the next operation must raise ConnectionClosed
    freeze        SIGSTOP of the server (idle or mid-cell), then close(): the stop ladder must end it
    crash         os._exit(3) in a cell: CellResult.worker_exited, the session stays usable
    flood         print('x' * 1_000_000): the result arrives, capped by the server's 8 KiB notice
    stdin         a cell waiting on input(), answered with send(stdin=...)
    restart       the host's restart(): in-memory state lost, the session stays usable
    abandon       the caller's own cancel scope ends a run() mid-call; interrupt(), then usable

Every library call runs under a bound from ``BOUNDS`` (seconds) via ``anyio.move_on_after``;
passing it counts as a hang (a watchdog thread ends the run if a shielded call never returns).
After each cycle the soak checks:

* survivors: every process recorded in a closed session's tree (server plus descendants, sampled
  with psutil while the session was open) is gone within ``BOUNDS["reap"]`` seconds (zombies
  ignored); a sweep also catches any process that refers to the run's root (cwd, environment)
  and belongs to no open session;
* leaks: nothing is left in the run's private temp root (``tempfile.tempdir`` points there, so
  each session's private ``TMPDIR`` is created inside it) except the open sessions' own folders;
* untyped errors: every exception the library raised is a ``BridgeError`` subclass;
* unfinalized: every clean ``close()`` left a finalized recording (``console.recording.finalized``;
  sessions that were SIGKILLed, SIGSTOPped or cancelled are exempt). With 0.0.5 this check is weak:
  its recordings have no end marker, so ``finalized`` only means "the server is gone";
* hangs: no call passed its bound.

Unexpected but typed behaviour (a wrong cell output, no ``ConnectionClosed`` after a SIGKILL,
a session unusable after an interrupt, ...) is reported as an *anomaly*.

Usage::

    .venv/bin/python scripts/chaos.py                          # 200 cycles, 4 sessions
    .venv/bin/python scripts/chaos.py --cycles 25 --sessions 3 --seed 1 --json out.json
    .venv/bin/python scripts/chaos.py --binary .venv-mcp-console-0.0.5/bin/mcp-console
    .venv/bin/python scripts/chaos.py --forecast --seed 7 --cycles 25   # the seeded plan, nothing run
    .venv/bin/python scripts/chaos.py --manager --cycles 16 --seed 3     # session manager faults
                                                                         # (scripts/chaos_manager.py)

The plan (which operation, on which session, which open variant) comes from its own seeded
generator and depends only on the seed and the number of open sessions, so ``--forecast`` shows
exactly what a run does as long as every operation behaves; timings and variants inside an
operation come from a second seeded generator.

Exit status: 0 when the run is clean; 1 on any survivor, leak, untyped error, hang or
unfinalized clean close (and on anomalies with ``--strict``); 2 on usage errors; 3 when the
watchdog had to end a run stuck in a call that ignored its bound.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import itertools
import json
import os
import random
import shutil
import signal
import stat
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import psutil

from console_bridge import AsyncConsole, BridgeError, Busy, CellResult, ConnectionClosed

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


# -------------------------------------------------------------------------------- planning
#: Why a session's recording need not be finalized: its server was killed or stopped.
KILLED = frozenset({"cancelled", "sigkilled", "frozen"})
#: Operations after which the target session is gone.
ENDING = frozenset({"cancel", "close_busy", "close", "sigkill", "freeze"})


@dataclass(frozen=True)
class Plan:
    """One cycle's seeded choice: the operation, its open variant, and which sessions (by index)."""

    kind: str
    variant: str | None = None  # open: "warm", "cold", "abort" or "race"
    target: int | None = None  # index into the open sessions
    bystander: int | None = None  # index into the open sessions other than the target


class Planner:
    """The seeded choices of a run. They depend only on the seed and the number of open sessions,
    so ``forecast()`` can show the plan of a run in which every operation behaves as expected."""

    def __init__(self, seed: int, max_sessions: int) -> None:
        self.rng = random.Random(f"chaos-plan-{seed}")
        self.max_sessions = max_sessions

    def next(self, open_sessions: int) -> Plan:
        rng = self.rng
        room = self.max_sessions - open_sessions
        if open_sessions == 0:
            kind = "open"
        else:
            weights = {"open": 2 * room, **WEIGHTS} if room > 0 else dict(WEIGHTS)
            kinds = list(weights)
            kind = rng.choices(kinds, weights=[weights[k] for k in kinds])[0]
        variant = target = bystander = None
        others = open_sessions
        if kind == "open":
            draw = rng.random()
            if draw < ABORT_OPEN_PROBABILITY:
                variant = "abort"
            elif draw < RACE_OPEN_PROBABILITY:
                variant = "race"
            else:
                variant = "cold" if draw < COLD_OPEN_PROBABILITY else "warm"
        else:
            target = rng.randrange(open_sessions)
            others -= 1
        if rng.random() < BYSTANDER_PROBABILITY and others > 0:
            bystander = rng.randrange(others)
        return Plan(kind, variant, target, bystander)


def forecast(seed: int, cycles: int, max_sessions: int) -> list[Plan]:
    """The plan of a run in which every operation behaves as expected."""
    planner = Planner(seed, max_sessions)
    plans, open_sessions = [], 0
    for _ in range(cycles):
        plan = planner.next(open_sessions)
        plans.append(plan)
        if plan.kind == "open" and plan.variant not in ("abort", "race"):
            open_sessions += 1
        elif plan.kind in ENDING:
            open_sessions -= 1
    return plans


# ----------------------------------------------------------------------------- bookkeeping
@dataclass
class Step:
    """The outcome of one bounded library call."""

    ok: bool
    value: Any = None
    error: BaseException | None = None
    hung: bool = False
    elapsed: float = 0.0


@dataclass
class Session:
    sid: int
    console: AsyncConsole
    workspace: Path
    recordings: Path
    poll_window: float
    procs: dict[int, psutil.Process] = field(default_factory=dict)
    pid: int | None = None
    tmpdir: Path | None = None
    sent: bool = False  # any cell submitted (the recording exists from the first send)
    worker_up: bool = False  # a cell ran to completion since the last worker (re)start
    closed: bool = False
    exempt: str | None = None  # why a close of this session need not finalize its recording
    tainted: bool = False  # a call hung; the session was cancelled

    def label(self) -> str:
        return f"s{self.sid}(pid {self.pid})"

    def snapshot(self, children: dict[int, list[psutil.Process]] | None = None) -> None:
        """Record the server and its current descendants (pid + create time)."""
        if self.pid is None or self.closed:
            return
        root = self.procs.get(self.pid)
        if root is None or not _alive(root):
            return
        children = process_children() if children is None else children
        todo = [self.pid]
        while todo:
            for child in children.get(todo.pop(), ()):
                if self.procs.setdefault(child.pid, child) == child:
                    todo.append(child.pid)


@dataclass
class Stats:
    cycles: int = 0
    ops: Counter[str] = field(default_factory=Counter)
    variants: Counter[str] = field(default_factory=Counter)
    typed_errors: Counter[str] = field(default_factory=Counter)
    survivors: list[dict[str, Any]] = field(default_factory=list)
    leaks: list[dict[str, Any]] = field(default_factory=list)
    untyped: list[dict[str, Any]] = field(default_factory=list)
    hangs: list[dict[str, Any]] = field(default_factory=list)
    unfinalized: list[dict[str, Any]] = field(default_factory=list)
    anomalies: list[dict[str, Any]] = field(default_factory=list)
    slowest: dict[str, float] = field(default_factory=dict)
    sessions_opened: int = 0
    clean_closes: int = 0
    finalized_checked: int = 0
    max_concurrent: int = 0
    processes_tracked: int = 0
    killed_recordings: Counter[str] = field(default_factory=Counter)


def _short(text: str, limit: int = 300) -> str:
    text = str(text)
    return text if len(text) <= limit else text[:limit] + "..."


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _describe(proc: psutil.Process) -> dict[str, Any]:
    info: dict[str, Any] = {"pid": proc.pid}
    with contextlib.suppress(psutil.Error):
        info["name"] = proc.name()
        info["status"] = proc.status()
        info["cmdline"] = _short(" ".join(proc.cmdline()), 200)
    return info


def process_children() -> dict[int, list[psutil.Process]]:
    """Every process by parent pid, from one pass over /proc (cheaper than one walk per session)."""
    children: dict[int, list[psutil.Process]] = {}
    for proc in psutil.process_iter(["ppid"]):
        ppid = proc.info.get("ppid")
        if ppid is not None:
            children.setdefault(ppid, []).append(proc)
    return children


def remove_tree(path: Path) -> None:
    """Remove ``path`` even where finalized recordings made files and folders read-only."""
    if not path.exists():
        return
    for root, dirs, _files in os.walk(path):
        for name in dirs:
            with contextlib.suppress(OSError):
                os.chmod(os.path.join(root, name), stat.S_IRWXU)

    def retry(func: Callable[[str], Any], target: str, _exc: Any) -> None:
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(target), stat.S_IRWXU)
        with contextlib.suppress(OSError):
            os.chmod(target, stat.S_IRWXU)
        func(target)

    shutil.rmtree(path, onerror=retry)  # onexc needs Python 3.12


# ------------------------------------------------------------------------------- watchdog
class Watchdog(threading.Thread):
    """Ends the run when a step overstays its bound by ``WATCHDOG_SLACK`` (a shielded hang)."""

    def __init__(self, on_fire: Callable[[str, float], None]) -> None:
        super().__init__(name="chaos-watchdog", daemon=True)
        self._lock = threading.Lock()
        self._armed: dict[int, tuple[str, float, float]] = {}
        self._tokens = itertools.count()
        self._on_fire = on_fire
        self._stopped = threading.Event()

    def arm(self, label: str, bound: float) -> int:
        token = next(self._tokens)
        with self._lock:
            self._armed[token] = (label, time.monotonic(), bound)
        return token

    def disarm(self, token: int) -> None:
        with self._lock:
            self._armed.pop(token, None)

    def stop(self) -> None:
        self._stopped.set()

    def run(self) -> None:
        while not self._stopped.wait(1.0):
            now = time.monotonic()
            with self._lock:
                overdue = [
                    (label, now - t0) for label, t0, bound in self._armed.values() if now - t0 > bound + WATCHDOG_SLACK
                ]
            if overdue:
                self._on_fire(*overdue[0])
                return


# ---------------------------------------------------------------------------------- soak
class Chaos:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.seed: int = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
        self.rng = random.Random(f"chaos-ops-{self.seed}")  # timings and variants inside operations
        self.planner = Planner(self.seed, args.sessions)
        self.binary: str | None = str(Path(args.binary).expanduser().absolute()) if args.binary else None
        self.stats = Stats()
        self.sessions: list[Session] = []  # open ones
        self.to_reap: list[Session] = []  # closed during the current cycle
        self.every: list[Session] = []
        self.ids = itertools.count(1)
        self.version: str | None = None
        self.started = time.monotonic()
        self.root = Path(tempfile.mkdtemp(prefix="cb-chaos-"))
        self.tmp_root = self.root / "tmp"
        self.tmp_root.mkdir()
        (self.root / "ws").mkdir()
        (self.root / "rec").mkdir()
        self._old_tempdir = tempfile.tempdir
        tempfile.tempdir = str(self.tmp_root)  # every private TMPDIR of the run lands here
        self.reported_leaks: set[str] = set()
        self.known_orphans: set[tuple[int, float]] = set()
        self.cleanups: list[AsyncConsole] = []  # consoles to cancel once a cycle's checks are done
        self.watchdog = Watchdog(self._watchdog_fired)
        self.current_cycle = 0

    # ------------------------------------------------------------------ recording
    def anomaly(self, op: str, what: str, session: Session | None = None, **extra: Any) -> None:
        entry = {"cycle": self.current_cycle, "op": op, "what": what, **extra}
        if session is not None:
            entry["session"] = session.label()
        self.stats.anomalies.append(entry)
        self.log(f"ANOMALY {op}: {what} {extra or ''}")

    def log(self, message: str) -> None:
        if self.args.verbose:
            print(f"[{time.monotonic() - self.started:7.1f}s c{self.current_cycle}] {message}", flush=True)

    def _classify(self, op: str, name: str, exc: BaseException, session: Session | None) -> None:
        if isinstance(exc, BridgeError):
            self.stats.typed_errors[type(exc).__name__] += 1
            return
        entry = {
            "cycle": self.current_cycle,
            "op": op,
            "step": name,
            "type": f"{type(exc).__module__}.{type(exc).__qualname__}",
            "message": _short(str(exc), 1000),
            "traceback": _short("".join(traceback.format_exception(exc)), 4000),
        }
        if session is not None:
            entry["session"] = session.label()
        self.stats.untyped.append(entry)
        self.log(f"UNTYPED {op}/{name}: {entry['type']}: {entry['message']}")

    async def step(self, op: str, name: str, fn: Callable[[], Awaitable[Any]], session: Session | None = None) -> Step:
        """Run one library call under ``BOUNDS[name]``; classify what it raised."""
        bound = BOUNDS[name]
        if session is not None and not session.worker_up and name in CELL_STEPS:
            bound = max(bound, BOUNDS["warm"])
        token = self.watchdog.arm(f"{op}/{name}" + (f" on {session.label()}" if session else ""), bound)
        started = time.monotonic()
        result = Step(False)  # stays so when the bound cancels the call
        scope = anyio.CancelScope()
        try:
            with anyio.move_on_after(bound) as scope:
                value = await fn()
                result = Step(True, value=value)
        except Exception as exc:
            self._classify(op, name, exc, session)
            result = Step(False, error=exc)
        finally:
            self.watchdog.disarm(token)
        elapsed = time.monotonic() - started
        key = f"{op}/{name}"
        self.stats.slowest[key] = max(self.stats.slowest.get(key, 0.0), round(elapsed, 3))
        if scope.cancelled_caught or elapsed > bound:
            if scope.cancel_called and not scope.cancelled_caught:
                self.anomaly(
                    op,
                    f"{name} did not honour the caller's cancellation (returned or raised instead)",
                    session,
                    elapsed=round(elapsed, 3),
                )
            entry = {"cycle": self.current_cycle, "op": op, "step": name, "bound": bound, "elapsed": round(elapsed, 3)}
            if session is not None:
                entry["session"] = session.label()
            self.stats.hangs.append(entry)
            self.log(f"HANG {op}/{name}: {elapsed:.1f}s > {bound}s")
            return Step(False, hung=True, error=result.error, elapsed=elapsed)
        result.elapsed = elapsed
        if session is not None:
            if name in ("restart", "crash") or (not result.ok and name in CELL_STEPS):
                session.worker_up = False  # the next cell (re)starts a worker
            elif result.ok and name in WARMING_STEPS:
                session.worker_up = True
        return result

    # --------------------------------------------------------------------- helpers

    def snapshot_all(self) -> None:
        if self.sessions:
            children = process_children()
            for session in self.sessions:
                session.snapshot(children)

    async def snapshotter(self) -> None:
        """Record every open session's tree a few times a second (the library samples at 4 Hz too)."""
        while True:
            self.snapshot_all()
            await anyio.sleep(SNAPSHOT_INTERVAL)

    def expect_text(self, op: str, session: Session, step: Step, expected: str) -> bool:
        if not step.ok:
            if not step.hung:
                self.anomaly(op, f"a cell failed: {type(step.error).__name__}: {_short(str(step.error))}", session)
            return False
        result: CellResult = step.value
        if result.text.strip() != expected or result.running or result.is_error:
            self.anomaly(op, f"expected {expected!r}", session, text=_short(result.text), running=result.running)
            return False
        return True

    async def quarantine(self, op: str, session: Session, why: str) -> None:
        """A call hung (or the session broke): cancel the session; its recording is exempt."""
        if session.closed:
            return
        session.tainted = True
        session.exempt = session.exempt or why
        await self.finish(op, session, clean=False)

    async def recover(self, op: str, session: Session, error: BaseException | None) -> None:
        """After an anomaly: close a session whose connection is lost; else restart() its worker (or cancel it)."""
        if session.closed:
            return
        self.stats.variants[f"recovery/{op}"] += 1
        if isinstance(error, ConnectionClosed):
            session.exempt = session.exempt or "connection lost"
            await self.finish(op, session, clean=True)
            return
        step = await self.step(op, "restart", session.console.restart, session)
        if step.hung or not step.ok:
            await self.quarantine(op, session, "recovery restart failed")
        elif step.value.running:
            await self.settle(op, session, step.value)

    async def finish(self, op: str, session: Session, *, clean: bool) -> Step:
        """close() (clean) or cancel() the session, then check the recording of a clean close."""
        session.snapshot()
        connection = session.console.status().connection
        alive = connection is not None and connection.state != "closed"
        if clean:
            step = await self.step(op, "close", session.console.close, session)
        else:
            step = await self.step(op, "cancel", session.console.cancel, session)
        session.closed = True
        if session in self.sessions:
            self.sessions.remove(session)
        self.to_reap.append(session)
        if not clean or session.exempt is not None:
            return step
        if not alive:
            self.anomaly(op, "the connection was already closed before a clean close()", session)
            session.exempt = "connection already closed"
            return step
        if not step.ok:
            session.exempt = "close() failed"
            return step
        self.stats.clean_closes += 1
        recording = session.console.recording
        if recording is None:
            if session.sent:
                self.stats.unfinalized.append(
                    {"cycle": self.current_cycle, "op": op, "session": session.label(), "why": "no recording found"}
                )
            return step
        self.stats.finalized_checked += 1
        if not recording.finalized:
            late = False
            for _ in range(20):  # tell "late" from "never" for the report
                await anyio.sleep(0.1)
                if recording.finalized:
                    late = True
                    break
            self.stats.unfinalized.append(
                {
                    "cycle": self.current_cycle,
                    "op": op,
                    "session": session.label(),
                    "recording": str(recording.path),
                    "why": "finalized only after close() returned" if late else "not finalized",
                }
            )
            self.log(f"UNFINALIZED {session.label()} {recording.path}")
        return step

    async def settle(self, op: str, session: Session, result: CellResult | None) -> bool:
        """Poll until the running cell is reported done (bounded); True when it was."""
        deadline = time.monotonic() + BOUNDS["settle"]

        async def until_done() -> CellResult | None:
            current = result
            while current is None or current.running:
                try:
                    current = await session.console.poll(timeout_ms=1000)
                except Busy:
                    await anyio.sleep(0.1)
                except BridgeError as exc:
                    # an abandoned observation window may still be open on the server
                    if "already being polled" not in str(exc) or time.monotonic() > deadline:
                        raise
                    await anyio.sleep(0.2)
            return current

        step = await self.step(op, "settle", until_done, session)
        if step.hung:
            await self.quarantine(op, session, "settle hung")
            return False
        if not step.ok:
            self.anomaly(
                op, f"polling the stopped cell failed: {type(step.error).__name__}: {_short(str(step.error))}", session
            )
            if not session.closed:
                await self.recover(op, session, step.error)
            return False
        return True

    async def usable(self, op: str, session: Session) -> bool:
        """A trivial cell on ``session`` gives the right answer."""
        a, b = self.rng.randrange(1000), self.rng.randrange(1000)
        step = await self.step(op, "trivial", lambda: session.console.run(python=f"{a} + {b}"), session)
        if step.hung:
            await self.quarantine(op, session, "trivial cell hung")
            return False
        if self.expect_text(op, session, step, str(a + b)):
            return True
        await self.recover(op, session, step.error)
        return False

    async def with_call(
        self,
        op: str,
        session: Session,
        action: Callable[[], Awaitable[None]],
        bound_name: str,
        delay: float,
    ) -> Step:
        """Run ``run(LONG_CELL)`` in a task; after ``delay`` do ``action`` from outside; the call's outcome.

        The call must end within ``BOUNDS[bound_name]`` after the action.
        """
        session.sent = True
        outcome: list[Any] = []
        done = anyio.Event()

        async def call() -> None:
            try:
                outcome.append(await session.console.run(python=LONG_CELL))
            except Exception as exc:
                outcome.append(exc)
            finally:
                done.set()

        token = self.watchdog.arm(f"{op}/in-flight call on {session.label()}", delay + 2 * BOUNDS[bound_name])
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                await anyio.sleep(delay)
                session.snapshot()
                await action()
                started = time.monotonic()
                with anyio.move_on_after(BOUNDS[bound_name]):
                    await done.wait()
                elapsed = time.monotonic() - started
                if not done.is_set():
                    tg.cancel_scope.cancel()
        finally:
            self.watchdog.disarm(token)
        if not done.is_set() or not outcome:
            self.stats.hangs.append(
                {
                    "cycle": self.current_cycle,
                    "op": op,
                    "step": "in-flight call",
                    "bound": BOUNDS[bound_name],
                    "elapsed": round(elapsed, 3),
                    "session": session.label(),
                }
            )
            return Step(False, hung=True, elapsed=elapsed)
        value = outcome[0]
        if isinstance(value, BaseException):
            self._classify(op, "in-flight call", value, session)
            return Step(False, error=value, elapsed=elapsed)
        return Step(True, value=value, elapsed=elapsed)

    def expect_closed(self, op: str, session: Session, step: Step, what: str) -> None:
        if step.hung:
            return
        if step.ok:
            self.anomaly(
                op,
                f"{what} returned a result instead of raising ConnectionClosed",
                session,
                text=_short(getattr(step.value, "text", "")),
            )
        elif not isinstance(step.error, ConnectionClosed):
            self.anomaly(
                op,
                f"{what} raised {type(step.error).__name__}, not ConnectionClosed",
                session,
                message=_short(str(step.error)),
            )

    # ------------------------------------------------------------------ operations
    async def op_open(self, variant: str) -> None:
        sid = next(self.ids)
        workspace = self.root / "ws" / f"s{sid}"
        recordings = self.root / "rec" / f"s{sid}"
        workspace.mkdir()
        poll_window = self.rng.choice(POLL_WINDOWS)
        cold = variant == "cold"
        if variant in ("cold", "warm"):  # aborted and raced opens count their own outcome
            self.stats.variants[f"open/{variant}"] += 1
        try:
            console = AsyncConsole(workspace, command=self.binary, recordings_dir=recordings, poll_window=poll_window)
        except Exception as exc:
            self._classify("open", "construct", exc, None)
            self.anomaly("open", f"AsyncConsole() refused: {type(exc).__name__}: {_short(str(exc))}")
            return
        session = Session(sid, console, workspace, recordings, poll_window)
        self.every.append(session)
        if variant == "abort":
            await self.aborted_open(session)
            return
        if variant == "race":
            await self.raced_open(session)
            return
        step = await self.step("open", "open", console.start, session)
        session.pid = console.pid
        session.tmpdir = console.status().tmpdir
        if session.pid is not None:
            with contextlib.suppress(psutil.Error):
                session.procs[session.pid] = psutil.Process(session.pid)
        if not step.ok:
            if not step.hung:
                self.anomaly("open", f"start() failed: {type(step.error).__name__}: {_short(str(step.error))}")
            session.exempt = "start failed"
            session.closed = True
            self.to_reap.append(session)
            with contextlib.suppress(Exception):
                await self.step("open", "cancel", console.cancel, session)
            return
        self.stats.sessions_opened += 1
        self.version = self.version or console.version
        self.sessions.append(session)
        self.stats.max_concurrent = max(self.stats.max_concurrent, len(self.sessions))
        session.snapshot()
        if cold:
            return
        session.sent = True
        step = await self.step("open", "warm", lambda: console.run(python="1 + 1"), session)
        if step.hung:
            await self.quarantine("open", session, "first cell hung")
            return
        if not self.expect_text("open", session, step, "2"):
            await self.recover("open", session, step.error)

    async def raced_open(self, session: Session) -> None:
        """close() or cancel() from another task while start() runs: it is final, nothing may survive."""
        console = session.console
        how = self.rng.choice(("close", "cancel"))
        delay = self.rng.choice((0.0, self.rng.uniform(0.0, 0.08)))
        self.stats.variants[f"open/race-{how}"] += 1
        outcome: list[BaseException | None] = []
        done = anyio.Event()

        async def starter() -> None:
            try:
                await console.start()
                outcome.append(None)
            except Exception as exc:
                outcome.append(exc)
            finally:
                done.set()

        token = self.watchdog.arm(f"open/raced start of {session.label()}", delay + 2 * BOUNDS["open"])
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(starter)
                await anyio.sleep(delay)
                await self.step("open", how, getattr(console, how), session)
                with anyio.move_on_after(BOUNDS["open"]):
                    await done.wait()
                if not done.is_set():
                    tg.cancel_scope.cancel()
        finally:
            self.watchdog.disarm(token)
        session.pid = console.pid
        session.tmpdir = console.status().tmpdir
        if session.pid is not None:
            with contextlib.suppress(psutil.Error):
                session.procs[session.pid] = psutil.Process(session.pid)
                session.snapshot()
        session.exempt = "start raced by close()/cancel()"
        session.closed = True
        self.to_reap.append(session)
        self.cleanups.append(console)
        if not outcome:
            self.stats.hangs.append(
                {
                    "cycle": self.current_cycle,
                    "op": "open",
                    "step": f"start() raced by {how}()",
                    "bound": BOUNDS["open"],
                    "session": session.label(),
                }
            )
            return
        error = outcome[0]
        if error is not None:
            self._classify("open", f"start raced by {how}", error, session)
            if not isinstance(error, ConnectionClosed):
                self.anomaly("open", f"start() raced by {how}() raised {type(error).__name__}: {_short(str(error))}")
        state = console.status().state
        if state != "closed":
            self.anomaly(
                "open",
                f"{how}() returned during start(), yet the console is {state!r} afterwards (start() "
                f"{'returned' if error is None else 'raised ' + type(error).__name__})",
                session,
                delay=round(delay, 4),
            )
        step = await self.step("open", "dead_call", lambda: console.run(python="1"), session)
        self.expect_closed("open", session, step, f"a call after {how}() during start()")

    async def aborted_open(self, session: Session) -> None:
        """The opener's own cancel scope fires during start(): nothing may survive, no TMPDIR may stay."""
        console = session.console
        delay = self.rng.uniform(0.0, 0.06)
        token = self.watchdog.arm(f"open/aborted start of {session.label()}", delay + BOUNDS["abandon"])
        started = time.monotonic()
        try:
            with anyio.move_on_after(delay) as scope:
                await console.start()
        except Exception as exc:
            self._classify("open", "aborted start", exc, session)
            self.anomaly("open", f"an aborted start() raised {type(exc).__name__}: {_short(str(exc))}", session)
        finally:
            self.watchdog.disarm(token)
        elapsed = time.monotonic() - started
        session.pid = console.pid
        session.tmpdir = console.status().tmpdir
        if session.pid is not None:
            with contextlib.suppress(psutil.Error):
                session.procs[session.pid] = psutil.Process(session.pid)
                session.snapshot()
        if elapsed > delay + BOUNDS["abandon"]:
            self.stats.hangs.append(
                {
                    "cycle": self.current_cycle,
                    "op": "open",
                    "step": "start (cancelled by its caller)",
                    "bound": round(delay + BOUNDS["abandon"], 3),
                    "elapsed": round(elapsed, 3),
                    "session": session.label(),
                }
            )
        if not scope.cancelled_caught:  # start() won the race: the opener gives up anyway and closes it
            self.stats.variants["open/abort-too-late"] += 1
            self.stats.sessions_opened += 1
            self.version = self.version or console.version
            await self.finish("open", session, clean=True)
            return
        self.stats.variants["open/aborted"] += 1
        session.exempt = "start aborted"
        session.closed = True
        self.to_reap.append(session)
        state = console.status().state
        if state != "closed":
            self.anomaly("open", f"after an aborted start() the console is {state!r}, not 'closed'", session)
        step = await self.step("open", "dead_call", lambda: console.run(python="1"), session)
        self.expect_closed("open", session, step, "a call after an aborted start()")
        await self.step("open", "close", console.close, session)

    async def op_trivial(self, session: Session, op: str = "trivial") -> None:
        session.sent = True
        await self.usable(op, session)

    async def submit_long(self, op: str, session: Session) -> CellResult | None:
        session.sent = True
        window = self.rng.randrange(50, 500)
        step = await self.step(op, "send", lambda: session.console.send(python=LONG_CELL, timeout_ms=window), session)
        if step.hung:
            await self.quarantine(op, session, "send hung")
            return None
        if not step.ok:
            self.anomaly(
                op, f"submitting a long cell failed: {type(step.error).__name__}: {_short(str(step.error))}", session
            )
            await self.recover(op, session, step.error)
            return None
        result: CellResult = step.value
        if not result.running:
            self.anomaly(op, "a 60 s cell was not reported running", session, text=_short(result.text))
        return result

    async def op_interrupt(self, session: Session) -> None:
        submitted = await self.submit_long("interrupt", session)
        if submitted is None:
            return
        phase = "startup" if "phase: startup" in submitted.text else "running"
        self.stats.variants[f"interrupt/{phase}"] += 1
        await anyio.sleep(self.rng.uniform(0.0, 0.5))
        step = await self.step("interrupt", "interrupt", session.console.interrupt, session)
        if step.hung:
            await self.quarantine("interrupt", session, "interrupt hung")
            return
        if not step.ok:
            self.anomaly(
                "interrupt",
                f"interrupt() failed: {type(step.error).__name__}: {_short(str(step.error))}",
                session,
                phase=phase,
            )
            await self.recover("interrupt", session, step.error)
            return
        if not await self.settle("interrupt", session, step.value):
            return
        await self.usable("interrupt", session)

    async def op_cancel(self, session: Session) -> None:
        delay = self.rng.uniform(0.05, 1.5)
        session.exempt = "cancelled"

        async def cancel() -> None:
            await self.step("cancel", "cancel", session.console.cancel, session)
            session.closed = True

        step = await self.with_call("cancel", session, cancel, "cancel", delay)
        self.sessions.remove(session)
        self.to_reap.append(session)
        self.expect_closed("cancel", session, step, "the run() cancelled mid-call")
        after = await self.step("cancel", "dead_call", lambda: session.console.run(python="1"), session)
        self.expect_closed("cancel", session, after, "a call after cancel()")

    async def op_close_busy(self, session: Session) -> None:
        if self.rng.random() < 0.5:
            self.stats.variants["close_busy/between-windows"] += 1
            if await self.submit_long("close_busy", session) is None:
                return
            await anyio.sleep(self.rng.uniform(0.0, 0.5))
            await self.finish("close_busy", session, clean=True)
            return
        self.stats.variants["close_busy/call-in-flight"] += 1
        delay = self.rng.uniform(0.05, 1.5)

        async def close() -> None:
            await self.finish("close_busy", session, clean=True)

        step = await self.with_call("close_busy", session, close, "close", delay)
        self.expect_closed("close_busy", session, step, "the run() in flight during close()")

    async def op_close(self, session: Session) -> None:
        await self.finish("close", session, clean=True)

    async def op_sigkill(self, session: Session) -> None:
        variant = self.rng.choice(("idle", "busy", "call-in-flight"))
        self.stats.variants[f"sigkill/{variant}"] += 1
        pid = session.pid
        assert pid is not None

        def kill() -> None:
            session.exempt = "sigkilled"
            session.snapshot()
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

        if variant == "call-in-flight":

            async def action() -> None:
                kill()

            step = await self.with_call("sigkill", session, action, "dead_call", self.rng.uniform(0.05, 1.5))
            self.expect_closed("sigkill", session, step, "the run() in flight when the server was killed")
        else:
            if variant == "busy" and await self.submit_long("sigkill", session) is None:
                return
            kill()
            await anyio.sleep(self.rng.choice((0.0, 0.0, 0.05, 0.3)))
        step = await self.step("sigkill", "dead_call", lambda: session.console.run(python="1"), session)
        self.expect_closed("sigkill", session, step, "the next call after SIGKILL")
        await self.finish("sigkill", session, clean=True)

    async def op_freeze(self, session: Session) -> None:
        """SIGSTOP the server (idle or mid-cell), then close(): the shutdown ladder must still end it all."""
        variant = self.rng.choice(("idle", "busy"))
        self.stats.variants[f"freeze/{variant}"] += 1
        if variant == "busy" and await self.submit_long("freeze", session) is None:
            return
        pid = session.pid
        assert pid is not None
        session.exempt = "frozen"  # a stopped server cannot finalize its recording
        session.snapshot()
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
        await anyio.sleep(self.rng.choice((0.0, 0.1)))
        await self.finish("freeze", session, clean=True)

    async def op_crash(self, session: Session) -> None:
        session.sent = True
        step = await self.step("crash", "crash", lambda: session.console.run(python="import os\nos._exit(3)"), session)
        if step.hung:
            await self.quarantine("crash", session, "crash cell hung")
            return
        if not step.ok:
            self.anomaly(
                "crash", f"a worker crash raised {type(step.error).__name__}: {_short(str(step.error))}", session
            )
            await self.recover("crash", session, step.error)
            return
        result: CellResult = step.value
        if not result.worker_exited or result.running:
            self.anomaly("crash", "worker_exited not set", session, text=_short(result.text))
        await self.usable("crash", session)

    async def op_flood(self, session: Session) -> None:
        session.sent = True
        step = await self.step("flood", "flood", lambda: session.console.run(python=FLOOD_CELL), session)
        if step.hung:
            await self.quarantine("flood", session, "flood cell hung")
            return
        if not step.ok:
            self.anomaly(
                "flood", f"a 1 MB output raised {type(step.error).__name__}: {_short(str(step.error))}", session
            )
            await self.recover("flood", session, step.error)
            return
        result: CellResult = step.value
        size = len(result.text.encode("utf-8"))
        if result.running or size > TEXT_CAP + 1024 or "[output omitted:" not in result.text:
            self.anomaly(
                "flood",
                "the output was not capped with the server's notice",
                session,
                bytes=size,
                head=_short(result.text[:100]),
                running=result.running,
            )

    async def op_stdin(self, session: Session) -> None:
        session.sent = True
        console = session.console

        async def ask() -> CellResult:
            result = await console.send(python=STDIN_CELL, timeout_ms=5000)
            while result.running and not result.waiting_for_input:
                result = await console.poll(timeout_ms=1000)
            return result

        step = await self.step("stdin", "stdin", ask, session)
        if step.hung:
            await self.quarantine("stdin", session, "input cell hung")
            return
        if not step.ok or not step.value.waiting_for_input:
            self.anomaly(
                "stdin",
                "the cell did not report waiting for input",
                session,
                error=_short(str(step.error)) if step.error else None,
                text=_short(step.value.text) if step.ok else None,
            )
            if step.ok:
                await self.settle("stdin", session, step.value)
            else:
                await self.recover("stdin", session, step.error)
            return

        async def answer() -> str:
            result = await console.send(stdin="y\n", timeout_ms=5000)
            text = result.text
            while result.running:
                result = await console.poll(timeout_ms=1000)
                text += result.text
            return text

        step = await self.step("stdin", "stdin", answer, session)
        if step.hung:
            await self.quarantine("stdin", session, "answering input hung")
            return
        if not step.ok or "got y" not in step.value:
            self.anomaly(
                "stdin",
                "the answer did not reach the cell",
                session,
                error=_short(str(step.error)) if step.error else None,
                text=_short(step.value) if step.ok else None,
            )
            await self.recover("stdin", session, step.error)

    async def op_restart(self, session: Session) -> None:
        session.sent = True
        console = session.console
        step = await self.step("restart", "trivial", lambda: console.run(python="_chaos_state = 42"), session)
        if step.hung:
            await self.quarantine("restart", session, "cell hung")
            return
        step = await self.step("restart", "restart", console.restart, session)
        if step.hung:
            await self.quarantine("restart", session, "restart hung")
            return
        if not step.ok:
            self.anomaly(
                "restart", f"restart() failed: {type(step.error).__name__}: {_short(str(step.error))}", session
            )
            await self.recover("restart", session, step.error)
            return
        if step.value.running and not await self.settle("restart", session, step.value):
            return
        step = await self.step(
            "restart", "trivial", lambda: console.run(python="print('_chaos_state' in globals())"), session
        )
        if step.hung:
            await self.quarantine("restart", session, "cell hung")
            return
        if not self.expect_text("restart", session, step, "False"):
            await self.recover("restart", session, step.error)

    async def op_abandon(self, session: Session) -> None:
        session.sent = True
        console = session.console
        delay = self.rng.uniform(0.1, 1.5)
        token = self.watchdog.arm(f"abandon/run on {session.label()}", delay + BOUNDS["abandon"])
        started = time.monotonic()
        try:
            with anyio.move_on_after(delay) as scope:
                await console.run(python=LONG_CELL)
        except Exception as exc:
            self._classify("abandon", "run", exc, session)
            self.anomaly(
                "abandon",
                f"run() raised {type(exc).__name__} instead of being cancelled",
                session,
                message=_short(str(exc)),
            )
            await self.recover("abandon", session, exc)
            return
        finally:
            self.watchdog.disarm(token)
        elapsed = time.monotonic() - started
        if not scope.cancelled_caught:
            self.anomaly("abandon", "run() of a 60 s cell ended before the caller's scope was cancelled", session)
            return
        if elapsed > delay + BOUNDS["abandon"]:
            self.stats.hangs.append(
                {
                    "cycle": self.current_cycle,
                    "op": "abandon",
                    "step": "run (cancelled by its caller)",
                    "bound": round(delay + BOUNDS["abandon"], 3),
                    "elapsed": round(elapsed, 3),
                    "session": session.label(),
                }
            )
        step = await self.step("abandon", "interrupt", console.interrupt, session)
        if step.hung:
            await self.quarantine("abandon", session, "interrupt hung")
            return
        if not step.ok:
            self.anomaly(
                "abandon",
                f"interrupt() after an abandoned run failed: {type(step.error).__name__}: {_short(str(step.error))}",
                session,
            )
            await self.recover("abandon", session, step.error)
            return
        if not await self.settle("abandon", session, step.value):
            return
        await self.usable("abandon", session)

    async def bystander(self, session: Session) -> None:
        self.stats.ops["bystander"] += 1
        await self.op_trivial(session, op="bystander")

    # ------------------------------------------------------------------------ checks
    def owner_of(self, proc: psutil.Process) -> Session | None:
        """The session a process belongs to: by ancestry, else by its TMPDIR."""
        by_pid = {s.pid: s for s in self.every if s.pid is not None}
        try:
            for parent in [proc, *proc.parents()]:
                session = by_pid.get(parent.pid)
                if session is not None and session.procs.get(parent.pid) == parent:
                    return session
            env = proc.environ()
        except psutil.Error:
            return None
        tmpdir = env.get("TMPDIR", "")
        for session in self.every:
            if session.tmpdir is not None and (tmpdir + "/").startswith(str(session.tmpdir) + "/"):
                return session
        return None

    def sweep(self) -> list[psutil.Process]:
        """Processes (of this user) whose cwd or environment refers to the run's root, outside open sessions."""
        root = str(self.root)
        open_pids = {pid for s in self.sessions for pid, p in s.procs.items() if _alive(p)}
        found = []
        uid = os.getuid()
        for proc in psutil.process_iter():
            if proc.pid == os.getpid() or proc.pid in open_pids:
                continue
            try:
                if proc.uids().real != uid or proc.status() == psutil.STATUS_ZOMBIE:
                    continue
                cwd = proc.cwd()
                env = proc.environ()
            except psutil.Error:
                continue
            if not (cwd.startswith(root) or any(root in value for value in env.values())):
                continue
            owner = self.owner_of(proc)
            if owner is not None and not owner.closed:
                owner.procs.setdefault(proc.pid, proc)  # a live process of an open session
                continue
            found.append(proc)
        return found

    async def reap(self) -> None:
        """Every process of the sessions closed this cycle gone within BOUNDS['reap']; no orphan anywhere."""
        closing, self.to_reap = self.to_reap, []
        deadline = time.monotonic() + BOUNDS["reap"]
        while True:
            left = [(s, p) for s in closing for p in s.procs.values() if _alive(p)]
            strays = self.sweep()
            if (not left and not strays) or time.monotonic() >= deadline:
                break
            await anyio.sleep(0.05)
        # Count what is still alive now, describe everything before killing anything (a killed
        # server takes its sandboxed children down with it), then kill: the next cycle starts clean.
        found: list[tuple[Session | None, psutil.Process, bool]] = []
        counted: set[int] = set()
        for session, proc in left:
            if _alive(proc):
                found.append((session, proc, False))
                counted.add(proc.pid)
        for proc in strays:
            try:
                key = (proc.pid, proc.create_time())
            except psutil.Error:
                continue
            if proc.pid in counted or key in self.known_orphans or not _alive(proc):
                continue
            self.known_orphans.add(key)
            found.append((self.owner_of(proc), proc, True))
        entries = [
            {
                "cycle": self.current_cycle,
                "session": session.label() if session else None,
                "exempt": session.exempt if session else None,
                "orphan": orphan,
                **_describe(proc),
            }
            for session, proc, orphan in found
        ]
        for entry in entries:
            self.stats.survivors.append(entry)
            self.log(f"SURVIVOR {entry}")
        for _session, proc, _orphan in found:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        for session in closing:
            self.stats.processes_tracked += len(session.procs)
            if session.exempt in KILLED and session.sent:
                # Not a failure either way: mcp-console 0.0.5 has no end marker, so its Recording.finalized
                # only says "the server is gone" and reads True here too.
                recording = session.console.recording
                if recording is not None:
                    self.stats.killed_recordings["reads finalized" if recording.finalized else "not finalized"] += 1

    def check_leaks(self) -> None:
        owned = {s.tmpdir.name for s in self.sessions if s.tmpdir is not None}
        for name in sorted(os.listdir(self.tmp_root)):
            if name in owned or name in self.reported_leaks:
                continue
            self.reported_leaks.add(name)
            owner = next((s.label() for s in self.every if s.tmpdir is not None and s.tmpdir.name == name), None)
            self.stats.leaks.append({"cycle": self.current_cycle, "entry": name, "session": owner})
            self.log(f"LEAK {name} ({owner})")

    # --------------------------------------------------------------------------- run
    async def cycle(self) -> None:
        plan = self.planner.next(len(self.sessions))
        kind = plan.kind
        self.stats.ops[kind] += 1
        target = self.sessions[plan.target] if plan.target is not None else None
        others = [s for s in self.sessions if s is not target]
        neighbour = others[plan.bystander] if plan.bystander is not None else None
        self.log(
            f"{kind} {target.label() if target else plan.variant}"
            + (f" + bystander {neighbour.label()}" if neighbour else "")
        )
        async with anyio.create_task_group() as tg:
            if neighbour is not None:
                tg.start_soon(self.bystander, neighbour)
            if target is None:
                await self.op_open(plan.variant or "warm")
            else:
                await getattr(self, f"op_{kind}")(target)
        await self.reap()
        self.check_leaks()
        await self.tidy()

    async def tidy(self) -> None:
        """After the checks: cancel consoles that a race may have left running (the soak's own hygiene)."""
        consoles, self.cleanups = self.cleanups, []
        for console in consoles:
            with contextlib.suppress(Exception):
                with anyio.move_on_after(BOUNDS["cancel"]):
                    await console.cancel()

    async def main(self) -> None:
        self.watchdog.start()
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.snapshotter)
            try:
                for index in range(self.args.cycles):
                    self.current_cycle = index + 1
                    await self.cycle()
                    self.stats.cycles = index + 1
                    if self.args.progress and (index + 1) % self.args.progress == 0:
                        print(
                            f"... {index + 1}/{self.args.cycles} cycles, {time.monotonic() - self.started:.0f}s, "
                            f"{self.summary_line()}",
                            flush=True,
                        )
                self.current_cycle = self.args.cycles + 1  # the final close of what is still open
                for session in list(self.sessions):
                    self.stats.ops["final_close"] += 1
                    await self.finish("final_close", session, clean=True)
                await self.reap()
                self.check_leaks()
            finally:
                with anyio.CancelScope(shield=True):
                    self.cleanups.extend(session.console for session in self.sessions)
                    await self.tidy()
                tg.cancel_scope.cancel()
        self.watchdog.stop()

    def summary_line(self) -> str:
        s = self.stats
        return (
            f"survivors={len(s.survivors)} leaks={len(s.leaks)} untyped={len(s.untyped)} "
            f"hangs={len(s.hangs)} unfinalized={len(s.unfinalized)} anomalies={len(s.anomalies)}"
        )

    def report(self, *, aborted: str | None = None) -> dict[str, Any]:
        s = self.stats
        return {
            "ok": self.failed() == [] and aborted is None,
            "failures": self.failed() + ([aborted] if aborted else []),
            "cycles": s.cycles,
            "cycles_requested": self.args.cycles,
            "sessions": self.args.sessions,
            "seed": self.seed,
            "binary": self.binary,
            "version": self.version,
            "duration_s": round(time.monotonic() - self.started, 1),
            "faults": {kind: s.ops.get(kind, 0) for kind in OPERATIONS},
            "bystanders": s.ops.get("bystander", 0),
            "final_closes": s.ops.get("final_close", 0),
            "variants": dict(sorted(s.variants.items())),
            "sessions_opened": s.sessions_opened,
            "max_concurrent": s.max_concurrent,
            "processes_tracked": s.processes_tracked,
            "clean_closes": s.clean_closes,
            "recordings_checked": s.finalized_checked,
            "killed_recordings": dict(s.killed_recordings),
            "survivors": len(s.survivors),
            "survivor_incidents": len({(e["cycle"], e["session"]) for e in s.survivors}),
            "leaks": len(s.leaks),
            "untyped": len(s.untyped),
            "unfinalized": len(s.unfinalized),
            "hangs": len(s.hangs),
            "anomalies": len(s.anomalies),
            "typed_errors": dict(sorted(s.typed_errors.items())),
            "bounds": BOUNDS,
            "slowest_s": dict(sorted(s.slowest.items())),
            "details": {
                "survivors": s.survivors,
                "leaks": s.leaks,
                "untyped": s.untyped,
                "unfinalized": s.unfinalized,
                "hangs": s.hangs,
                "anomalies": s.anomalies,
            },
        }

    def failed(self) -> list[str]:
        s = self.stats
        reasons = [
            name
            for name, items in (
                ("survivors", s.survivors),
                ("leaks", s.leaks),
                ("untyped", s.untyped),
                ("hangs", s.hangs),
                ("unfinalized", s.unfinalized),
            )
            if items
        ]
        if self.args.strict and s.anomalies:
            reasons.append("anomalies")
        return reasons

    def print_report(self, report: dict[str, Any]) -> None:
        print(
            f"chaos: {report['cycles']} cycles, seed {report['seed']}, mcp-console {report['version']}, "
            f"{report['sessions']} max sessions, {report['duration_s']} s"
        )
        faults = ", ".join(f"{k}={v}" for k, v in report["faults"].items())
        print(
            f"faults injected: {faults} (+ {report['bystanders']} bystander cells, "
            f"{report['final_closes']} final closes)"
        )
        print(
            f"sessions opened: {report['sessions_opened']} (max concurrent {report['max_concurrent']}), "
            f"processes tracked: {report['processes_tracked']}, clean closes: {report['clean_closes']} "
            f"({report['recordings_checked']} recordings checked)"
        )
        print(
            f"survivors: {report['survivors']} ({report['survivor_incidents']} incidents)  leaks: {report['leaks']}  "
            f"untyped errors: {report['untyped']}  "
            f"unfinalized recordings: {report['unfinalized']}  hangs: {report['hangs']}  "
            f"anomalies: {report['anomalies']}"
        )
        if report["killed_recordings"]:
            print(
                "recordings of killed/cancelled/frozen sessions (exempt): "
                + ", ".join(f"{k}={v}" for k, v in report["killed_recordings"].items())
            )
        if report["typed_errors"]:
            print("typed errors seen: " + ", ".join(f"{k}={v}" for k, v in report["typed_errors"].items()))
        for name, items in report["details"].items():
            for item in items[:10]:
                print(f"  {name}: {json.dumps(item, default=str)[:1500]}")
            if len(items) > 10:
                print(f"  {name}: ... {len(items) - 10} more (see --json)")
        print("OK" if report["ok"] else f"FAILED: {', '.join(report['failures'])}")

    def write_json(self, report: dict[str, Any]) -> None:
        if self.args.json:
            path = Path(self.args.json)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")

    def cleanup(self) -> None:
        """Kill whatever any session left (after the checks), restore tempfile, remove the root."""
        for session in self.every:
            for proc in session.procs.values():
                if _alive(proc):
                    with contextlib.suppress(psutil.Error):
                        proc.kill()
        tempfile.tempdir = self._old_tempdir
        remove_tree(self.root)

    def _watchdog_fired(self, label: str, elapsed: float) -> None:
        """From the watchdog thread: a call ignored its bound for good. Report, clean up, exit 3."""
        print(
            f"chaos: WATCHDOG: {label} has run {elapsed:.0f}s, past its bound + {WATCHDOG_SLACK:g}s; "
            "dumping stacks and ending the run",
            file=sys.stderr,
            flush=True,
        )
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        self.stats.hangs.append(
            {"cycle": self.current_cycle, "step": label, "elapsed": round(elapsed, 3), "watchdog": True}
        )
        try:
            report = self.report(aborted="watchdog")
            self.print_report(report)
            self.write_json(report)
            self.cleanup()
        finally:
            os._exit(3)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--cycles", type=int, default=200, help="number of cycles (default 200)")
    parser.add_argument("--sessions", type=int, default=4, help="max concurrent sessions (default 4)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: random, printed)")
    parser.add_argument("--binary", default=None, help="mcp-console binary (default: the library's choice)")
    parser.add_argument("--json", default=None, metavar="PATH", help="also write the report as JSON")
    parser.add_argument("--strict", action="store_true", help="also exit 1 on anomalies")
    parser.add_argument("--progress", type=int, default=0, metavar="N", help="print a status line every N cycles")
    parser.add_argument("-v", "--verbose", action="store_true", help="log every operation and finding")
    parser.add_argument(
        "--forecast", action="store_true", help="print the seeded plan (as if every operation behaves) and exit"
    )
    parser.add_argument(
        "--manager", action="store_true", help="soak the session manager instead (scripts/chaos_manager.py)"
    )
    args = parser.parse_args(argv)
    if args.cycles < 1 or args.sessions < 1:
        parser.error("--cycles and --sessions must be at least 1")
    if args.binary and not Path(args.binary).expanduser().is_file():
        parser.error(f"--binary {args.binary!r} is not a file")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.manager:
        return manager_main(args)
    if args.forecast:
        if args.seed is None:
            print("chaos: --forecast needs --seed", file=sys.stderr)
            return 2
        plans = forecast(args.seed, args.cycles, args.sessions)
        for index, plan in enumerate(plans, 1):
            print(f"{index:4d} {plan.kind:<10} {plan.variant or ''}")
        counts = Counter(plan.kind for plan in plans)
        print("kinds: " + ", ".join(f"{kind}={counts.get(kind, 0)}" for kind in OPERATIONS))
        return 0
    chaos = Chaos(args)
    aborted: str | None = None
    try:
        anyio.run(chaos.main)
    except KeyboardInterrupt:
        aborted = "interrupted"
    except BaseException as exc:  # the soak itself failed: report what was gathered
        aborted = f"soak error: {type(exc).__name__}: {exc}"
        traceback.print_exc()
    finally:
        chaos.watchdog.stop()
        report = chaos.report(aborted=aborted)
        try:
            chaos.cleanup()
        except OSError as exc:
            print(f"chaos: could not remove {chaos.root}: {exc}", file=sys.stderr)
        chaos.print_report(report)
        chaos.write_json(report)
    return 0 if report["ok"] else 1


def manager_main(args: argparse.Namespace) -> int:
    """``--manager``: the session manager soak; same report keys and exit status as the console soak."""
    import chaos_manager  # beside this script

    seed = args.seed if args.seed is not None else random.randrange(1 << 16)
    print(f"chaos --manager: seed {seed}, {args.cycles} cycles", file=sys.stderr)

    def log(message: str) -> None:
        if args.verbose:
            print(message, file=sys.stderr, flush=True)

    report = chaos_manager.run(args.binary, args.cycles, seed, log)
    print(json.dumps({k: v for k, v in report.items() if k != "details"}, indent=2))
    for key, items in report["details"].items():
        for item in items:
            print(f"{key}: {item}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print("OK" if report["ok"] else f"FAILED: {', '.join(report['failures'])}")
    return 0 if report["ok"] and not (args.strict and report["anomalies"]) else 1


if __name__ == "__main__":
    sys.exit(main())
