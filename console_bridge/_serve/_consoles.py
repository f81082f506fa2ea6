"""The consoles of ``console-bridge serve``, as explicit handles claimed on first use.

Nothing is claimed at ``initialize`` or for a listing: a console is taken from the session
manager at ``console_open``, or at the first ``send`` of an MCP session that passes no handle
(that session's own console, as before handles existed). Each console gets a ``console_id``
(192 random bits), bound to the identity that claimed it and checked on every use; an unknown,
expired or foreign id is refused in words that say to call ``console_open`` (a foreign id is
refused exactly as an unknown one, so ids cannot be probed).

serve's time limits are kept here rather than by the manager, so that a cell still running
counts as busy (not idle) and a console closed by a limit says which one closed it:
``idle_timeout`` (no call and no running cell for that long), ``max_lifetime`` (since it
opened, busy or not), ``max_cell_time`` (one cell; it is interrupted, the console lives on).
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import TaskGroup

from console_bridge import (
    AsyncConsole,
    AsyncSessionManager,
    AuditLog,
    BridgeError,
    Busy,
    ConnectionClosed,
    NotAllowed,
    Owner,
)
from console_bridge._manager._info import CullWords, cull_reason
from console_bridge._serve._contract import CLOSE, OPEN, Lifetimes

__all__ = ["Consoles", "Held"]


def _audit_refusal(held: Held, identity: Owner) -> None:
    """A client named a console of another identity: a record in the console's audit log (the id only
    by its first characters: a handle is a bearer of that console)."""
    audit = held.console.policy.audit
    if not isinstance(audit, AuditLog):  # (serve passes an AuditLog, or None)
        return
    with contextlib.suppress(OSError, BridgeError):
        audit.write(
            "console_id_refused",
            owner=str(identity),
            console_owner=str(held.identity),
            console_id=held.console_id[:10] + "...",
            reason="a console_id of another identity",
        )


#: the manager's culling rule (``cull_reason``), in words naming serve's options
_CULLED = CullWords(
    lifetime="closed after {:g} s, the longest a console lives here (--max-lifetime)",
    idle="closed after {:g} s without use (--idle-timeout)",
)
_SESSION_IDLE = CullWords(
    idle="closed after {:g} s with no request on its MCP session (--session-idle-timeout; a console_open handle "
    "lives to --idle-timeout)"
)
_ENDED_KEPT = 10_000  # ended handles remembered (to say why they ended), oldest forgotten first


@dataclass(eq=False)
class Held:
    """One claimed console and what serve knows of its use."""

    console_id: str
    console: AsyncConsole
    identity: Owner
    session: str | None  # the MCP session this is the own console of; None for a console_open handle
    opened: float = field(default_factory=time.monotonic)
    last_used: float = field(default_factory=time.monotonic)
    in_flight: int = 0
    cell_since: float | None = None  # a cell was reported running (and not yet finished) since then
    turn: anyio.Lock = field(default_factory=anyio.Lock)  # one send at a time (mcp-console refuses a second)
    notice: str | None = None  # told to the next send (the cell was interrupted by max_cell_time)
    interrupting: bool = False

    def busy(self) -> bool:
        return self.in_flight > 0 or self.cell_since is not None


@dataclass(eq=False)
class Consoles:
    """Handles over a running :class:`AsyncSessionManager` (which keeps capacity and quotas)."""

    manager: AsyncSessionManager
    lifetimes: Lifetimes = field(default_factory=Lifetimes)
    settle_timeout: float = 10.0  # a cell past max_cell_time: interrupt it and wait this long for it to stop
    check_interval: float = 1.0  # how often limits are checked
    spare: AsyncConsole | None = None  # claimed at launch (stdio): serves its owner's first claim
    id_prefix: str = ""  # "NAME." with --replica NAME: a proxy routes a console_id by its prefix
    #: when every console is taken, one idle this long (seconds) is closed for a new claim: a client that
    #: went away without closing (a one-shot CLI, a crashed agent) does not hold a console until --idle-timeout
    reclaim_idle: float | None = 60.0
    held: dict[str, Held] = field(default_factory=dict)
    _sessions: dict[str, str] = field(default_factory=dict)  # MCP session key -> console_id of its own console
    _claiming: dict[str, anyio.Lock] = field(default_factory=dict)
    _ended: OrderedDict[str, tuple[Owner, str]] = field(default_factory=OrderedDict)
    _session_ended: OrderedDict[str, str] = field(default_factory=OrderedDict)
    _tg: TaskGroup | None = None
    #: this server process's mark in every console_id it hands out: a handle of another process (a client
    #: that starts a server per call, over stdio) is told apart from an unknown one
    instance: str = field(default_factory=lambda: secrets.token_hex(3))

    # ----------------------------------------------------------------- claims
    async def open(self, identity: Owner, session: str | None = None) -> Held:
        """Claim a fresh console for ``identity`` (a tool error in words when none can be had)."""
        spare, self.spare = self.spare, None
        if spare is not None and spare.owner == identity and spare.status().state != "closed":
            console = spare
        else:
            if spare is not None:
                self.spare = spare
            console = await self._claim(identity)
        console_id = f"{self.id_prefix}{self.instance}-{secrets.token_urlsafe(24)}"
        held = Held(console_id=console_id, console=console, identity=identity, session=session)
        self.held[held.console_id] = held
        return held

    async def _claim(self, identity: Owner) -> AsyncConsole:
        try:
            try:
                return await self.manager.open(owner=identity)
            except Busy:
                if not await self._reclaim():
                    raise
                return await self.manager.open(owner=identity)
        except Busy:
            raise Busy(
                f"no console is free: all {self.manager.max_sessions} are in use or starting (--max-sessions); "
                f"close one with {CLOSE} or try again shortly"
            ) from None
        except NotAllowed:
            raise NotAllowed(
                f"client {identity!s} already holds {self.manager.max_per_owner} console(s) (--max-per-client); "
                f"close one with {CLOSE} first"
            ) from None

    async def _reclaim(self) -> bool:
        """Every console is taken: close the one idle longest, when idle for ``reclaim_idle`` or more."""
        if self.reclaim_idle is None:
            return False
        now = time.monotonic()
        idle = [held for held in self.held.values() if not held.busy() and now - held.last_used >= self.reclaim_idle]
        if not idle:
            return False
        oldest = min(idle, key=lambda held: held.last_used)
        why = (
            f"closed after {now - oldest.last_used:.0f} s without use, when every console was taken and another "
            f"client needed one (idle {self.reclaim_idle:g} s or more: --reclaim-idle)"
        )
        await self._retire(oldest, why)
        return True

    async def resolve(self, identity: Owner, console_id: str | None, session: str | None) -> Held:
        """The console a call names (``console_id``), or the session's own (claimed now if new)."""
        if console_id is not None:
            return self.get(identity, console_id)
        if session is None:
            raise NotAllowed(
                f"send needs a console_id here (no MCP session carries a console under this protocol): call {OPEN} "
                "and pass the console_id it returns"
            )
        lock = self._claiming.setdefault(session, anyio.Lock())
        async with lock:
            known = self._sessions.get(session)
            if known is not None and known in self.held:
                return self.get(identity, known)
            why = self._session_ended.pop(session, None)
            if why is not None:
                raise ConnectionClosed(
                    f"this session's console was {why}; its state is gone. The next send opens a fresh console "
                    f"(or call {OPEN})"
                )
            held = await self.open(identity, session)
            self._sessions[session] = held.console_id
            return held

    def get(self, identity: Owner, console_id: str) -> Held:
        held = self.held.get(console_id)
        if held is not None and held.identity == identity:
            return held
        if held is not None:  # another identity's console: refused as an unknown one, and audited
            _audit_refusal(held, identity)
        ended = self._ended.get(console_id)
        if held is None and ended is not None and ended[0] == identity:
            raise ConnectionClosed(f"console {console_id} was {ended[1]}; call {OPEN} for a new console")
        if not console_id.startswith(f"{self.id_prefix}{self.instance}-"):
            raise NotAllowed(
                f"console_id {console_id!r} is not from this server process: a console lives as long as the "
                "`console-bridge serve` that opened it, and a client that starts a server per call (over stdio: "
                "langchain's get_tools(), the Inspector CLI) gets a new one each time, with none of the old state. "
                f"Send without console_id to use this connection's console; calling {OPEN} again does not bring "
                "the old one back. Keep one client session open across calls, or use --transport http"
            )
        raise NotAllowed(
            f"unknown console_id {console_id!r} (handles belong to the client that opened them and end when "
            f"their console closes); call {OPEN} for a console"
        )

    async def close(self, identity: Owner, console_id: str) -> None:
        held = self.get(identity, console_id)
        await self._retire(held, "closed by console_close")

    async def end_session(self, session: str) -> None:
        """The MCP session ended (DELETE, or serve stops): close its own console."""
        self._claiming.pop(session, None)
        self._session_ended.pop(session, None)
        console_id = self._sessions.pop(session, None)
        held = self.held.get(console_id or "")
        if held is not None:
            await self._retire(held, "closed with its MCP session")

    def listing(self, identity: Owner) -> list[dict[str, Any]]:
        now = time.monotonic()
        return [
            {
                "console_id": h.console_id,
                "state": "running" if h.busy() else "idle",
                "age_s": round(now - h.opened, 1),
                "idle_s": 0.0 if h.busy() else round(now - h.last_used, 1),
                "session_console": h.session is not None,
            }
            for h in self.held.values()
            if h.identity == identity
        ]

    def session_console(self, identity: Owner, session: str | None) -> Held | None:
        """The session's own console if it has one (nothing is claimed)."""
        held = self.held.get(self._sessions.get(session or "", ""))
        return held if held is not None and held.identity == identity else None

    # ------------------------------------------------------------------- use
    @contextlib.asynccontextmanager
    async def using(self, held: Held) -> AsyncIterator[None]:
        """Mark ``held`` busy for the duration of a call."""
        held.in_flight += 1
        try:
            yield
        finally:
            held.in_flight -= 1
            held.last_used = time.monotonic()

    def observed(self, held: Held, running: bool) -> None:
        """A send came back: the cell runs on (busy until a send sees it end) or it ended."""
        if not running:
            held.cell_since = None
        elif held.cell_since is None:
            held.cell_since = time.monotonic()

    def window_ms(self, held: Held) -> int | None:
        """How long a send may wait before the cell reaches ``max_cell_time`` (None: no bound)."""
        limit = self.lifetimes.max_cell_time
        if limit is None or held.cell_since is None:
            return None
        return max(0, int((held.cell_since + limit - time.monotonic()) * 1000))

    # ---------------------------------------------------------------- limits
    async def run(self) -> None:
        """Check the limits every ``check_interval`` seconds, until cancelled."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            try:
                while True:
                    await anyio.sleep(self.check_interval)
                    self.check()
            finally:
                self._tg = None

    def check(self) -> None:
        now = time.monotonic()
        limits = self.lifetimes
        for held in list(self.held.values()):
            if held.console.status().state == "closed":
                self._forget(held, held.console.close_reason or "stopped (its server exited)")
                continue
            busy = held.busy()
            why = cull_reason(
                now=now,
                created=held.opened,
                last_used=held.last_used,
                idle_timeout=limits.idle_timeout,
                max_lifetime=limits.max_lifetime,
                busy=busy,
                words=_CULLED,
            )
            if why is None and held.session is not None:
                why = cull_reason(
                    now=now,
                    created=held.opened,
                    last_used=held.last_used,
                    idle_timeout=limits.session_idle_timeout,
                    max_lifetime=None,
                    busy=busy,
                    words=_SESSION_IDLE,
                )
            if why is not None:
                self._spawn(self._retire, held, why)
            elif (
                limits.max_cell_time is not None
                and held.cell_since is not None
                and not held.interrupting
                and now - held.cell_since >= limits.max_cell_time
            ):
                held.interrupting = True
                self._spawn(self._stop_cell, held)

    def _spawn(self, fn: Any, *args: Any) -> None:
        if self._tg is not None:
            self._tg.start_soon(fn, *args)

    def overdue(self, held: Held) -> bool:
        """The running cell has reached ``max_cell_time``."""
        return self.window_ms(held) == 0

    async def _stop_cell(self, held: Held) -> None:
        try:
            async with held.turn:
                if self.overdue(held):
                    await self.stop_cell(held)
        finally:
            held.interrupting = False

    async def stop_cell(self, held: Held) -> str:
        """Interrupt a cell past ``max_cell_time`` (the caller holds ``held.turn``); the notice the
        next send is given is kept on ``held`` and returned."""
        limit = self.lifetimes.max_cell_time
        try:
            result = await held.console.settle(self.settle_timeout)
        except BridgeError as exc:
            tail = f" (stopping it failed: {exc.message})"
        else:
            tail = "" if result is None else f"; its last output:\n{result.text}"
        held.cell_since = None
        held.last_used = time.monotonic()
        held.notice = (
            f"the running cell was interrupted after {limit:g} s, the longest a cell may run here "
            f"(--max-cell-time); the console and its state are kept, and nothing of this call was run{tail}"
        )
        return held.notice

    async def _retire(self, held: Held, why: str) -> None:
        """Close one console, remembering why (the next use of its id or session is told)."""
        if self.held.get(held.console_id) is not held:
            return
        held.console.set_close_reason(why)
        self._forget(held, why)
        with anyio.CancelScope(shield=True), contextlib.suppress(BridgeError):
            await self.manager.close(self.manager.id_of(held.console))

    def _forget(self, held: Held, why: str) -> None:
        self.held.pop(held.console_id, None)
        self._ended[held.console_id] = (held.identity, why)
        while len(self._ended) > _ENDED_KEPT:
            self._ended.popitem(last=False)
        if held.session is not None and self._sessions.get(held.session) == held.console_id:
            del self._sessions[held.session]
            if why != "closed with its MCP session":
                self._session_ended[held.session] = why
                while len(self._session_ended) > _ENDED_KEPT:
                    self._session_ended.popitem(last=False)

    async def aclose(self) -> None:
        """Close every console (recordings finalized); idempotent."""
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as tg:
                for held in list(self.held.values()):
                    tg.start_soon(self._retire, held, "closed because the server stopped")
