"""The soak: its state, the cycle (plan, operation, checks), the run, and the report."""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import itertools
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import psutil

from console_bridge import AsyncConsole

from .bookkeeping import Session, Stats, _alive, remove_tree
from .bounds import BOUNDS, OPERATIONS, WATCHDOG_SLACK
from .checks import Checks
from .operations import Operations
from .planning import Planner
from .watchdog import Watchdog


class Chaos(Operations, Checks):
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
