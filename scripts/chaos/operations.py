"""The faults, one method each (``op_<kind>``, see the package docstring), and the bystander cell."""

from __future__ import annotations

import contextlib
import os
import signal
import time

import anyio
import psutil

from console_bridge import AsyncConsole, CellResult, ConnectionClosed

from .bookkeeping import Session, _short
from .bounds import BOUNDS, FLOOD_CELL, LONG_CELL, POLL_WINDOWS, STDIN_CELL, TEXT_CAP
from .steps import Steps


class Operations(Steps):
    """The faults (a part of :class:`Chaos`)."""

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
