"""Every library call as a bounded, classified step, and what the operations share: expecting a
cell's text or ``ConnectionClosed``, settling a stopped cell, recovering or quarantining a session,
closing one (and checking its recording), and a call in flight while a fault is injected.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from console_bridge import BridgeError, Busy, CellResult, ConnectionClosed

from .bookkeeping import Session, Step, _short, process_children
from .bounds import BOUNDS, CELL_STEPS, LONG_CELL, SNAPSHOT_INTERVAL, WARMING_STEPS


class Steps:
    """The bounded step and the helpers every operation uses (a part of :class:`Chaos`, whose state they use)."""

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
