"""The ``--manager`` soak of scripts/chaos.py: faults around ``AsyncSessionManager``.

One manager (``warm=2, max_sessions=3``) serves the run; every cycle makes one seeded choice::

    claim          claim, run a cell, release (the baseline; the released recording must be finalized)
    race_close     a long cell on a long-lived session while another task closes it by id
    racing_claims  three claims at once while a task closes each session the moment it is handed out
    cancel_claim   a claim cancelled after a random delay (while waiting, starting or just served)
    cull_cell      a second manager with max_lifetime=4 s culls a session during a long cell: the
                   call must fail with ConnectionClosed naming max_lifetime
    kill_warm      SIGKILL of a warm session's server behind the manager's back: the next claim must
                   get a live session, never the dead one
    refill_fail    a manager whose binary is refused: warm-ups fail, back off (no busy loop), and a
                   claim raises the real error (VersionRefused)
    close_waiters  a manager with max_sessions=1 closed while claims wait: they fail with
                   ConnectionClosed and nothing survives

After every cycle the soak checks the same things as the console soak: survivors (every process
seen in a session's tree is gone once the session is), leaks (private temp folders of sessions
that ended), untyped errors (anything that is not a BridgeError), hangs (a call past its bound),
unfinalized (a cleanly released session whose recording is not finalized).
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import psutil

from console_bridge import (
    AsyncConsole,
    AsyncSessionManager,
    BridgeError,
    ConnectionClosed,
    Owner,
    VersionRefused,
)

KINDS = (
    "claim",
    "race_close",
    "racing_claims",
    "cancel_claim",
    "cull_cell",
    "kill_warm",
    "refill_fail",
    "close_waiters",
)
#: Seconds: one operation, the wait for a dead tree to be reaped, a warm session to become ready.
BOUNDS = {"op": 90.0, "reap": 10.0, "warm": 60.0}
LONG_CELL = "import time\nfor _ in range(300):\n    time.sleep(0.1)"


class ManagerChaos:
    def __init__(self, binary: Path | None, cycles: int, seed: int, log: Callable[[str], None]) -> None:
        self.cycles, self.seed, self.log = cycles, seed, log
        self.plan_rng, self.rng = random.Random(seed), random.Random(seed + 1)
        self.root = Path(tempfile.mkdtemp(prefix="chaos-manager-"))
        self.tmp, self.workspace, self.recordings = self.root / "tmp", self.root / "ws", self.root / "rec"
        self.state = self.root / "state"  # CONSOLE_BRIDGE_STATE_DIR: sessions' private folders, where used
        for path in (self.tmp, self.workspace, self.recordings, self.state):
            path.mkdir()
        self.options: dict[str, Any] = {"recordings_dir": self.recordings, "check_interval": 0.1}
        if binary is not None:
            self.options["command"] = binary
        self.binary = binary
        self.faults: Counter[str] = Counter()
        self.counts: Counter[str] = Counter()
        self.anomalies: list[str] = []
        self.untyped: list[str] = []
        self.hangs: list[str] = []
        self.unfinalized: list[str] = []
        self.survivors: list[str] = []
        self.leaks: list[str] = []
        self.procs: dict[int, psutil.Process] = {}  # every process seen in a session tree
        self.released: list[AsyncConsole] = []  # cleanly released: recordings must be finalized
        self.current = "start"  # the cycle being checked, for the findings

    # ---------------------------------------------------------------- helpers
    def manager(self, **kwargs: Any) -> AsyncSessionManager:
        return AsyncSessionManager(self.workspace, **{**self.options, **kwargs})

    async def guard(self, what: str, call: Callable[[], Awaitable[Any]], *expected: type[BaseException]) -> Any:
        """Run one library call under its bound; classify what it raised."""
        with anyio.move_on_after(BOUNDS["op"]) as scope:
            try:
                return await call()
            except expected:
                return None
            except BridgeError as exc:
                self.anomalies.append(f"{what}: {type(exc).__name__}: {str(exc)[:200]}")
            except Exception as exc:
                self.untyped.append(f"{what}: {type(exc).__name__}: {exc}")
        if scope.cancelled_caught:
            self.hangs.append(f"{what}: passed {BOUNDS['op']:g}s")
        return None

    def track(self, *managers: AsyncSessionManager) -> None:
        for mgr in managers:
            for info in mgr.sessions():
                if info.pid is None:
                    continue
                try:
                    root = psutil.Process(info.pid)
                    for proc in [root, *root.children(recursive=True)]:
                        if proc.pid not in self.procs:
                            self.procs[proc.pid] = proc
                            self.counts["processes_seen"] += 1
                except psutil.Error:
                    continue

    async def sampler(self, managers: list[AsyncSessionManager]) -> None:
        while True:
            self.track(*managers)
            await anyio.sleep(0.2)

    @staticmethod
    def _cmdline(proc: psutil.Process) -> str:
        try:
            return " ".join(proc.cmdline())[:160] or proc.name()
        except psutil.Error:
            return "?"

    @staticmethod
    def _alive(proc: psutil.Process) -> bool:
        try:
            return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    def live_pids(self, live: AsyncSessionManager | None) -> set[int]:
        """Every process of the live sessions now: each session's root (the process this one started,
        its supervisor) and all of the root's descendants. Not the server's subtree alone: the supervisor
        has other children (the remasker, a server's orphans it reaps), and those belong to a live session."""
        keep: set[int] = set()
        for info in live.sessions() if live is not None else []:
            if info.pid is None:
                continue
            with contextlib.suppress(psutil.Error):
                root = psutil.Process(info.pid)
                for parent in root.parents():
                    if parent.pid == os.getpid():
                        break
                    root = parent
                keep.add(root.pid)
                keep |= {p.pid for p in root.children(recursive=True)}
        return keep

    async def check(self, live: AsyncSessionManager | None) -> None:
        """Survivors and leaks: what belongs to no listed session must be gone within the reap bound."""
        if live is not None:
            # A session still starting (a warm spare refilled after a claim) is listed without a pid yet:
            # its supervisor would pass for a survivor. Wait for it to be up (a start under load took >10 s).
            started = time.monotonic() + BOUNDS["warm"]
            while any(info.pid is None for info in live.sessions()) and time.monotonic() < started:
                await anyio.sleep(0.05)

        def stray_procs() -> list[psutil.Process]:
            # What the live sessions hold is asked anew each time: a session that started meanwhile (its
            # server forked after its supervisor was listed) is live, not a survivor.
            keep_pids = self.live_pids(live)
            return [p for pid, p in self.procs.items() if pid not in keep_pids and self._alive(p)]

        deadline = time.monotonic() + BOUNDS["reap"]
        while stray_procs() and time.monotonic() < deadline:
            await anyio.sleep(0.05)
        for proc in stray_procs():
            self.survivors.append(f"after {self.current}: pid {proc.pid} ({self._cmdline(proc)})")
            with contextlib.suppress(psutil.Error):
                proc.kill()
        if live is None:
            while self.folders() and time.monotonic() < deadline:
                await anyio.sleep(0.05)
            self.leaks.extend(str(path) for path in self.folders())
            for path in self.folders():
                shutil.rmtree(path, ignore_errors=True)
        else:
            # A live manager's sessions (warm or starting) own folders we cannot name here; only
            # count a folder as leaked when there are more folders than live sessions.
            extra = len(self.folders()) - len(live.sessions())
            while extra > 0 and time.monotonic() < deadline:
                await anyio.sleep(0.05)
                extra = len(self.folders()) - len(live.sessions())
            if extra > 0:
                self.leaks.append(f"{extra} folder(s) beyond the live sessions: {self.folders()}")
        for pid in [pid for pid, p in self.procs.items() if not self._alive(p)]:
            del self.procs[pid]

    def folders(self) -> list[Path]:
        """Sessions' private folders: TMPDIRs under the run's temp root, and (where the library keeps
        them there) per-session folders under the run's CONSOLE_BRIDGE_STATE_DIR."""
        sessions = self.state / "sessions"
        private = sorted(sessions.iterdir()) if sessions.is_dir() else []
        return sorted(self.tmp.iterdir()) + private

    # ---------------------------------------------------------------- faults
    async def op_claim(self, mgr: AsyncSessionManager) -> None:
        async def go() -> None:
            async with mgr.session(owner=Owner("claim")) as console:
                result = await console.run(python="21 * 2")
                if result.text.strip() != "42":
                    self.anomalies.append(f"claim: cell said {result.text!r}")
                self.released.append(console)

        await self.guard("claim", go)

    async def op_race_close(self, mgr: AsyncSessionManager) -> None:
        console = await self.guard("race_close open", lambda: mgr.open(owner=Owner("racer")))
        if console is None:
            return
        session_id = mgr.id_of(console)
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.guard, "race_close run", lambda: console.run(python=LONG_CELL), ConnectionClosed)
            await anyio.sleep(self.rng.uniform(0.0, 1.0))
            await self.guard("race_close close", lambda: mgr.close(session_id))
        self.released.append(console)

    async def op_racing_claims(self, mgr: AsyncSessionManager) -> None:
        async def claim(index: int) -> None:
            async def go() -> None:
                console = await mgr.open(owner=Owner(f"racing-{index}"))
                # Another task may have closed it already: either outcome is typed.
                await console.run(python="1")

            await self.guard(f"racing claim {index}", go, ConnectionClosed)

        async def closer() -> None:
            with anyio.move_on_after(BOUNDS["op"]):
                closed = 0
                while closed < 3:
                    for info in mgr.sessions():
                        if info.state == "in_use" and info.owner and info.owner.agent_id.startswith("racing-"):
                            await self.guard("racing close", lambda i=info.id: mgr.close(i))
                            closed += 1
                    await anyio.sleep(self.rng.uniform(0.0, 0.02))

        async with anyio.create_task_group() as tg:
            tg.start_soon(closer)
            for index in range(3):
                tg.start_soon(claim, index)

    async def op_cancel_claim(self, mgr: AsyncSessionManager) -> None:
        delay = self.rng.choice([0.0, 0.001, 0.05, 0.5, 1.5])
        with anyio.move_on_after(delay):
            console = await self.guard("cancel_claim", lambda: mgr.open(owner=Owner("cancelled")))
            if console is not None:  # served before the cancel: release it
                await mgr.close(mgr.id_of(console))
                self.released.append(console)

    async def op_cull_cell(self) -> None:
        culling = self.manager(warm=0, max_sessions=1, max_lifetime=4.0, idle_timeout=None)
        async with culling, anyio.create_task_group() as tg:
            tg.start_soon(self.sampler, [culling])
            console = await self.guard("cull_cell open", lambda: culling.open(owner=Owner("culled")))
            if console is not None:
                try:
                    with anyio.fail_after(BOUNDS["op"]):
                        await console.run(python=LONG_CELL)
                    self.anomalies.append("cull_cell: the long cell was not culled")
                except ConnectionClosed as exc:
                    if "max_lifetime=4 s" not in str(exc):
                        self.anomalies.append(f"cull_cell: the error does not say why: {exc}")
                except TimeoutError:
                    self.hangs.append("cull_cell: the cell was not culled within the bound")
                except BridgeError as exc:
                    self.anomalies.append(f"cull_cell: {type(exc).__name__}: {exc}")
                except Exception as exc:
                    self.untyped.append(f"cull_cell: {type(exc).__name__}: {exc}")
                self.counts["culled"] += culling.stats().culled
                self.released.append(console)
            tg.cancel_scope.cancel()

    async def op_kill_warm(self, mgr: AsyncSessionManager) -> None:
        with anyio.move_on_after(BOUNDS["warm"]):
            while mgr.stats().warm < 1:
                await anyio.sleep(0.05)
        warm = [info for info in mgr.sessions() if info.state == "warm" and info.pid]
        if not warm:
            self.anomalies.append("kill_warm: no warm session within the bound")
            return
        victim = warm[0].pid
        assert victim is not None
        victim_proc = psutil.Process(victim)
        os.kill(victim, signal.SIGKILL)
        # "Behind the manager's back" means before the claim: wait (bounded) until it is dead. A death
        # racing the hand-over itself cannot be seen by any check; that claim gets ConnectionClosed.
        with anyio.move_on_after(BOUNDS["reap"]):
            while self._alive(victim_proc):
                await anyio.sleep(0.005)

        async def go() -> None:
            async with mgr.session(owner=Owner("after-kill")) as console:
                if console.pid == victim:
                    self.anomalies.append("kill_warm: the dead session was handed out")
                await console.run(python="1")
                self.released.append(console)

        await self.guard("kill_warm claim", go)

    async def op_refill_fail(self) -> None:
        fake = self.root / "refused" / "mcp-console"
        fake.parent.mkdir(exist_ok=True)
        fake.write_text("#!/bin/sh\necho 'mcp-console 9.9.9'\n")
        fake.chmod(0o755)
        broken = self.manager(warm=1, max_sessions=2, retry_backoff=5.0, command=fake)
        async with broken:
            with anyio.move_on_after(BOUNDS["warm"]):
                while broken.stats().failed < 1:
                    await anyio.sleep(0.02)
            await anyio.sleep(0.3)
            failed = broken.stats().failed
            if failed != 1:
                self.anomalies.append(f"refill_fail: {failed} warm-up failures within the back-off (a busy loop?)")
            try:
                await broken.open(owner=Owner("refused"))
                self.anomalies.append("refill_fail: a claim on a refused binary succeeded")
            except VersionRefused:
                self.counts["refused_claims"] += 1
            except BridgeError as exc:
                self.anomalies.append(f"refill_fail: {type(exc).__name__} instead of VersionRefused: {exc}")
            except Exception as exc:
                self.untyped.append(f"refill_fail: {type(exc).__name__}: {exc}")

    async def op_close_waiters(self) -> None:
        outcomes: list[str] = []
        small = self.manager(warm=0, max_sessions=1, acquire_timeout=BOUNDS["op"])
        async with small, anyio.create_task_group() as tg:
            tg.start_soon(self.sampler, [small])
            held = await self.guard("close_waiters open", lambda: small.open(owner=Owner("holder")))

            async def wait(index: int) -> None:
                try:
                    await small.open(owner=Owner(f"waiter-{index}"))
                    outcomes.append("served")
                except ConnectionClosed:
                    outcomes.append("closed")
                except BridgeError as exc:
                    outcomes.append(type(exc).__name__)
                except Exception as exc:
                    self.untyped.append(f"close_waiters: {type(exc).__name__}: {exc}")

            for index in range(2):
                tg.start_soon(wait, index)
            with anyio.move_on_after(BOUNDS["op"]):
                while small.stats().waiting < 2:
                    await anyio.sleep(0.02)
            await small.aclose()
            tg.cancel_scope.cancel()
        if outcomes != ["closed", "closed"]:
            self.anomalies.append(f"close_waiters: waiting claims ended {outcomes}, not ConnectionClosed")
        if held is not None:
            self.released.append(held)

    # ------------------------------------------------------------------ run
    async def main(self) -> None:
        tempfile.tempdir = str(self.tmp)
        os.environ["CONSOLE_BRIDGE_STATE_DIR"] = str(self.state)
        async with self.manager(warm=2, max_sessions=3, idle_timeout=None, max_lifetime=None) as mgr:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self.sampler, [mgr])
                for cycle in range(1, self.cycles + 1):
                    kind = KINDS[(cycle - 1) % len(KINDS)] if cycle <= len(KINDS) else self.plan_rng.choice(KINDS)
                    self.faults[kind] += 1
                    self.log(f"cycle {cycle}: {kind}")
                    self.current = f"cycle {cycle} ({kind})"
                    if kind in ("cull_cell", "refill_fail", "close_waiters"):
                        await getattr(self, f"op_{kind}")()
                    else:
                        await getattr(self, f"op_{kind}")(mgr)
                    self.track(mgr)
                    await self.check(mgr)
                tg.cancel_scope.cancel()
            self.counts["discarded"] = mgr.stats().discarded
            self.counts["started"] = mgr.stats().started
        await self.check(None)
        for console in self.released:
            recording = console.recording
            if recording is not None and not recording.finalized:
                self.unfinalized.append(recording.run_id)
        self.counts["recordings_checked"] = len(self.released)

    def report(self, version: str | None, aborted: str | None) -> dict[str, Any]:
        checks = {
            "survivors": self.survivors,
            "leaks": self.leaks,
            "untyped": self.untyped,
            "hangs": self.hangs,
            "unfinalized": self.unfinalized,
        }
        failures = [f"{key}: {len(value)}" for key, value in checks.items() if value]
        return {
            "mode": "manager",
            "ok": not failures and aborted is None,
            "failures": failures + ([aborted] if aborted else []),
            "seed": self.seed,
            "version": version,
            "cycles": sum(self.faults.values()),
            "cycles_requested": self.cycles,
            "faults": {kind: self.faults.get(kind, 0) for kind in KINDS},
            **{key: len(value) for key, value in checks.items()},
            "details": checks,
            "anomalies": self.anomalies,
            "counts": dict(self.counts),
            "processes_tracked": self.counts["processes_seen"],
        }


def run(binary: str | None, cycles: int, seed: int, log: Callable[[str], None]) -> dict[str, Any]:
    """Run the soak; always returns a report (``ok`` false when anything failed or it aborted)."""
    chaos = ManagerChaos(Path(binary).expanduser().absolute() if binary else None, cycles, seed, log)
    saved = tempfile.tempdir
    aborted = None
    try:
        anyio.run(chaos.main)
    except BaseException as exc:
        aborted = f"soak error: {type(exc).__name__}: {exc}"
        print(aborted, file=sys.stderr)
        traceback.print_exc()  # (an ExceptionGroup says nothing of what it holds)
    finally:
        tempfile.tempdir = saved
        shutil.rmtree(chaos.root, ignore_errors=True)
    version = None
    if binary:
        from console_bridge._vetting._version import check_binary

        version = check_binary(Path(binary).expanduser().absolute()).version_text
    return chaos.report(version, aborted)
