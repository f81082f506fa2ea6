"""``AsyncSessionManager``: a pool of verified, booted consoles handed out once each, with quotas and culling."""

from __future__ import annotations

import contextlib
import itertools
import os
import secrets
import tempfile
import time
from collections import Counter, deque
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import anyio
import psutil
from anyio.abc import TaskGroup

from console_bridge._console._session import AsyncConsole
from console_bridge._errors import Busy, ConnectionClosed, LaunchRefused, NotAllowed, ServerError
from console_bridge._handles import NotCopyable
from console_bridge._hostfs import remove_tree
from console_bridge._identity import Owner
from console_bridge._manager._culling import observe, verdicts
from console_bridge._manager._entry import Entry, Waiter, calls_of, drop_recording, server_alive, spare_recording
from console_bridge._manager._info import (
    ManagerStats,
    SessionInfo,
    SessionState,
    count_option,
    refill_count,
    seconds_option,
    summarize,
)
from console_bridge._manager._workspaces import WS_PREFIX, remove_folder, sweep_workspaces
from console_bridge._root_task import RootTask

__all__ = ["AsyncSessionManager", "sweep_workspaces"]

_MANAGER_CLOSED = "closed because the session manager was closed"


class AsyncSessionManager(NotCopyable):
    """Hands out fresh, verified :class:`AsyncConsole` sessions from a warm pool, within quotas.

    Each session is handed out once and closed when released: a used session is
    never handed out again. ``warm`` sessions are kept started, verified and booted
    (the worker ran a trivial cell), so a claim is served at once; with none ready a
    claim starts one cold. Example::

        async with AsyncSessionManager("analysis/", warm=2, max_sessions=8) as manager:
            async with manager.session(owner=Owner("agent-1")) as console:
                print((await console.run(python="1 + 1")).text)

    Bounds (seconds, all named): ``acquire_timeout`` (a claim past ``max_sessions``
    waits this long, then :class:`Busy`), ``idle_timeout`` and ``max_lifetime`` (an in-use
    session idle this long, or this old, is closed; its next use raises
    :class:`ConnectionClosed` saying why; None disables), ``check_interval`` (how often
    sessions are checked for culling and warm sessions for death), ``boot_timeout`` (the
    warm-up cell), ``retry_backoff``/``max_backoff`` (after a failed warm-up the pool
    waits, doubling up to the maximum, before it tries again), ``refill_delay`` (a refill
    waits this long so the claimer's first cell does not compete with the launch). ``console_options`` are
    everything :class:`AsyncConsole` takes except ``owner`` (given per claim).
    """

    def __init__(
        self,
        workspace: str | os.PathLike[str] | None = ".",
        *,
        warm: int = 1,
        max_sessions: int = 8,
        max_per_owner: int | None = None,
        idle_timeout: float | None = 600.0,
        max_lifetime: float | None = 3600.0,
        acquire_timeout: float = 30.0,
        check_interval: float = 1.0,
        boot_timeout: float = 60.0,
        retry_backoff: float = 1.0,
        max_backoff: float = 60.0,
        refill_delay: float = 0.05,
        latency_window: int = 1000,
        **console_options: Any,
    ) -> None:
        self.max_sessions = count_option("max_sessions", max_sessions, 1)
        self.warm = count_option("warm", warm, 0)
        if self.warm > self.max_sessions:
            raise LaunchRefused(f"warm={warm} exceeds max_sessions={max_sessions}; warm sessions count as live")
        self.max_per_owner = None if max_per_owner is None else count_option("max_per_owner", max_per_owner, 1)
        self.idle_timeout = seconds_option("idle_timeout", idle_timeout, optional=True)
        self.max_lifetime = seconds_option("max_lifetime", max_lifetime, optional=True)
        self.acquire_timeout = seconds_option("acquire_timeout", acquire_timeout) or 0.0
        self.check_interval = seconds_option("check_interval", check_interval) or 0.0
        self.boot_timeout = seconds_option("boot_timeout", boot_timeout) or 0.0
        self.retry_backoff = seconds_option("retry_backoff", retry_backoff) or 0.0
        self.max_backoff = seconds_option("max_backoff", max_backoff) or 0.0
        if not isinstance(refill_delay, int | float) or isinstance(refill_delay, bool) or not 0 <= refill_delay < 60:
            raise LaunchRefused(f"refill_delay must be a number of seconds in [0, 60), not {refill_delay!r}")
        self.refill_delay = float(refill_delay)
        if "owner" in console_options:
            raise LaunchRefused("owner is given per claim (manager.session(owner=...)), not to the manager")
        self.workspace = workspace
        self.console_options = dict(console_options)
        # Construction checks every console option and starts nothing: a bad option fails here.
        if workspace is None:
            with tempfile.TemporaryDirectory(prefix="console-bridge-ws-") as probe:
                AsyncConsole(probe, **self.console_options)
        else:
            AsyncConsole(workspace, **self.console_options)
        self._state = "new"
        self._tg: TaskGroup | None = None
        self._root: RootTask | None = None  # the manager outlives the task that enters it: see _root_task
        self._stop = anyio.Event()
        self._entries: dict[str, Entry] = {}
        self._ready: deque[Entry] = deque()
        self._waiters: deque[Waiter] = deque()
        self._reserved = 0  # slots granted for cold starts or warm-ups, not yet turned into entries
        self._warm_reserved = 0  # of which warm-ups (their console is built in the warm-up task, off the claim)
        self._claims: Counter[Owner] = Counter()  # claims in flight, per owner
        self._ended: dict[str, str] = {}  # id -> why it ended (bounded)
        self._orphans: set[AsyncConsole] = set()  # dead sessions being killed, no longer holding a slot
        self._ids = itertools.count(1)
        self._prefix = secrets.token_hex(3)
        self._hits: deque[float] = deque(maxlen=count_option("latency_window", latency_window, 1))
        self._misses: deque[float] = deque(maxlen=latency_window)
        self._counts: Counter[str] = Counter()
        self._last_failure: str | None = None
        self._backoff = 0.0
        self._backoff_until = 0.0

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self._state} warm={len(self._ready)}/{self.warm} "
            f"live={self._live()}/{self.max_sessions}>"
        )

    # --------------------------------------------------------------- lifecycle
    async def __aenter__(self) -> AsyncSessionManager:
        if self._state != "new":
            raise ConnectionClosed(f"this session manager is {self._state}; create a new one")
        # Background work (warm-ups, culling) runs in the manager's own task, as the connection's host
        # does: a failure there never cancels the caller, and any task may close the manager.
        if self.workspace is None:
            await anyio.to_thread.run_sync(sweep_workspaces)
        ready = anyio.Event()
        self._root = RootTask(lambda: self._host(ready))
        self._root.start()
        await ready.wait()
        self._state = "running"
        self._refill()
        return self

    async def _host(self, ready: anyio.Event) -> None:
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                tg.start_soon(self._guarded, "check", self._check_forever)
                ready.set()
                await self._stop.wait()
                tg.cancel_scope.cancel()
        finally:
            self._tg = None
            ready.set()

    async def _guarded(self, what: str, fn: Callable[..., Awaitable[None]], *args: Any) -> None:
        """Background work never fails the host: an unexpected error is counted and kept."""
        try:
            await fn(*args)
        except Exception as exc:
            self._counts["background_errors"] += 1
            self._last_failure = f"{what}: {type(exc).__name__}: {exc}"

    def _spawn(self, what: str, fn: Callable[..., Awaitable[None]], *args: Any) -> None:
        if self._tg is not None:
            self._tg.start_soon(self._guarded, what, fn, *args)

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Fail waiting claims (:class:`ConnectionClosed`), stop warm-ups and close every session
        this manager started. Idempotent."""
        if self._state in ("closing", "closed"):
            return
        with anyio.CancelScope(shield=True):
            self._state = "closing"
            while self._waiters:
                waiter = self._waiters.popleft()
                waiter.error = ConnectionClosed("the session manager was closed while this claim waited")
                waiter.event.set()
            for entry in self._entries.values():
                entry.console.set_close_reason(_MANAGER_CLOSED)
            self._stop.set()
            if self._root is not None:
                await self._root.wait()
            async with anyio.create_task_group() as tg:
                for entry in list(self._entries.values()):
                    tg.start_soon(self._close_entry, entry, _MANAGER_CLOSED)
                for console in list(self._orphans):
                    tg.start_soon(self._kill_orphan, console)
            self._state = "closed"

    def _check_running(self) -> None:
        if self._state == "new":
            raise ConnectionClosed("the session manager is not started; use `async with manager:`")
        if self._state != "running":
            raise ConnectionClosed("the session manager is closed; create a new one")

    # ------------------------------------------------------------------ claims
    @contextlib.asynccontextmanager
    async def session(self, *, owner: Owner, name: str | None = None) -> AsyncIterator[AsyncConsole]:
        """A fresh console for ``owner`` (warm when one is ready, else started cold); closed on leaving.

        Raises :class:`NotAllowed` at once past ``max_per_owner``, :class:`Busy` when no
        capacity freed within ``acquire_timeout``, :class:`ConnectionClosed` when the manager
        closes meanwhile, and the console's own launch errors when a cold start fails.
        """
        console = await self.open(owner=owner, name=name)
        try:
            yield console
        finally:
            await self._release(console)

    async def open(self, *, owner: Owner, name: str | None = None) -> AsyncConsole:
        """Like :meth:`session`, for a long-lived session: close it with :meth:`close` (by its id,
        ``manager.id_of(console)``), or it is culled or closed with the manager."""
        self._check_running()
        if not isinstance(owner, Owner):
            raise NotAllowed("owner must be an Owner assigned by the host")
        if self.max_per_owner is not None and self._owned(owner) >= self.max_per_owner:
            raise NotAllowed(
                f"owner {owner!s} already has {self.max_per_owner} session(s) (max_per_owner); close one first",
                details={"owner": str(owner), "max_per_owner": self.max_per_owner},
            )
        started = time.monotonic()
        self._claims[owner] += 1
        try:
            entry, hit = await self._acquire(owner, name)
        finally:
            self._claims[owner] -= 1
            if not self._claims[owner]:
                del self._claims[owner]
        (self._hits if hit else self._misses).append(time.monotonic() - started)
        return entry.console

    def _owned(self, owner: Owner) -> int:
        in_use = sum(1 for e in self._entries.values() if e.owner == owner and e.state != "closing")
        return in_use + self._claims[owner]

    async def _acquire(self, owner: Owner, name: str | None) -> tuple[Entry, bool]:
        """Take a ready session (checked alive) or a slot for a cold start, first come first served."""
        grant = self._take_now() if not self._waiters else None
        if grant is None:
            grant = await self._wait_for_grant()
        while isinstance(grant, Entry):
            if server_alive(grant):
                self._hand_over(grant, owner, name)
                self._refill()
                return grant, True
            # Dead behind our back: take the next ready one, or its slot for a cold start (reserved
            # before the dead one is dropped, so no one else takes it); the pool is refilled.
            self._counts["discarded"] += 1
            dead, grant = grant, (self._ready.popleft() if self._ready else True)
            if grant is True:
                self._reserved += 1
            self._discard(dead)
        return await self._cold_start(owner, name), False

    def _take_now(self) -> Entry | bool | None:
        if self._ready:
            return self._ready.popleft()
        if self._live() < self.max_sessions:
            self._reserved += 1
            return True
        return None

    async def _wait_for_grant(self) -> Entry | bool:
        waiter = Waiter()
        self._waiters.append(waiter)
        try:
            self._dispatch()
            with anyio.move_on_after(self.acquire_timeout):
                await waiter.event.wait()
        except BaseException:
            self._abandon(waiter)
            raise
        if waiter.error is not None:
            raise waiter.error
        if waiter.entry is not None:
            return waiter.entry
        if waiter.slot:
            return True
        self._abandon(waiter)
        raise Busy(
            f"no session became available within acquire_timeout={self.acquire_timeout:g}s "
            f"(max_sessions={self.max_sessions}, all in use or starting); release one or raise max_sessions",
            details={"max_sessions": self.max_sessions, "in_use": self._count("in_use")},
        )

    def _abandon(self, waiter: Waiter) -> None:
        """A claim gave up (cancelled, timed out): give back whatever it was granted."""
        if waiter in self._waiters:
            self._waiters.remove(waiter)
        elif waiter.entry is not None:
            self._ready.appendleft(waiter.entry)
            waiter.entry = None
        elif waiter.slot:
            self._reserved -= 1
            waiter.slot = False
        self._dispatch()
        self._refill()

    def _dispatch(self) -> None:
        """Grant queued claims, in order, a ready session or a free slot."""
        while self._waiters:
            if self._ready:
                waiter = self._waiters.popleft()
                waiter.entry = self._ready.popleft()
            elif self._live() < self.max_sessions:
                waiter = self._waiters.popleft()
                waiter.slot = True
                self._reserved += 1
            else:
                return
            waiter.event.set()

    def _hand_over(self, entry: Entry, owner: Owner, name: str | None) -> None:
        entry.console.assign_owner(owner)
        entry.owner, entry.name, entry.state = owner, name, "in_use"
        entry.calls_at_handover = entry.calls_seen = calls_of(entry.console)[0]
        entry.last_used = time.monotonic()
        entry.last_used_wall = datetime.now(UTC)

    async def _cold_start(self, owner: Owner, name: str | None) -> Entry:
        """Start a session on a slot this claim holds; nothing leaks when it fails or is cancelled."""
        self._reserved -= 1
        try:
            entry = self._new_entry(owner)
        except BaseException:
            self._dispatch()
            self._refill()
            raise
        entry.cold = True
        try:
            if self._state != "running":
                raise ConnectionClosed("the session manager was closed while this claim waited")
            await entry.console.start()
            self._counts["started"] += 1
            if self._state != "running":
                raise ConnectionClosed("the session manager was closed while this session was starting")
        except BaseException:
            with anyio.CancelScope(shield=True):
                await entry.console.cancel()
                self._forget(entry, "failed to start")
            raise
        self._hand_over(entry, owner, name)
        return entry

    def _new_entry(self, owner: Owner | None = None) -> Entry:
        session_id = f"{self._prefix}-{next(self._ids)}"
        options = {**self.console_options, **({"owner": owner} if owner is not None else {})}
        if self.workspace is not None:
            entry = Entry(id=session_id, console=AsyncConsole(self.workspace, **options))
        else:
            folder = tempfile.mkdtemp(prefix=f"{WS_PREFIX}{os.getpid()}-{session_id}-")
            try:
                entry = Entry(id=session_id, console=AsyncConsole(folder, **options), folder=folder)
            except BaseException:
                os.rmdir(folder)
                raise
        self._entries[session_id] = entry
        return entry

    # ------------------------------------------------------------ by id
    def id_of(self, console: AsyncConsole) -> str:
        """The manager's id of a console it handed out."""
        for entry in self._entries.values():
            if entry.console is console:
                return entry.id
        raise NotAllowed("this console is not (or no longer) managed by this session manager")

    def get(self, session_id: str) -> AsyncConsole:
        """The in-use session ``session_id``. Raises :class:`ConnectionClosed` (saying why) when it
        has ended, :class:`NotAllowed` when this manager never had it."""
        entry = self._entries.get(session_id)
        if entry is not None and entry.state == "in_use":
            return entry.console
        if session_id in self._ended or entry is not None:
            # a session being culled says why already, before its close has finished
            reason = entry.console.close_reason if entry is not None else None
            why = self._ended.get(session_id) or reason or "closed"
            raise ConnectionClosed(f"session {session_id!r} was {why}")
        raise NotAllowed(f"no session {session_id!r} in this session manager")

    async def close(self, session_id: str) -> None:
        """Close the session ``session_id`` (recording finalized, tree stopped); its slot frees.
        Idempotent for a session that already ended; :class:`NotAllowed` for an unknown id."""
        entry = self._entries.get(session_id)
        if entry is None:
            if session_id in self._ended:
                return
            raise NotAllowed(f"no session {session_id!r} in this session manager")
        await self._close_entry(entry, "closed")

    async def _release(self, console: AsyncConsole) -> None:
        for entry in self._entries.values():
            if entry.console is console:
                await self._close_entry(entry, "closed")
                return
        with anyio.CancelScope(shield=True):
            await console.close()

    async def _close_entry(self, entry: Entry, why: str) -> None:
        """Close one session (shielded); when it is gone its slot goes to a waiting claim or the pool."""
        with anyio.CancelScope(shield=True):
            if entry.state == "closing" and entry.id not in self._entries:
                return
            if entry in self._ready:
                self._ready.remove(entry)
            entry.state, spare = "closing", spare_recording(entry)
            await entry.console.close()
            # (an unused warm session leaves no recording; one not yet found is found by the close)
            await drop_recording(spare or spare_recording(entry))
            folder, entry.folder = entry.folder, None
            await remove_folder(folder)
            self._forget(entry, why)

    def _discard(self, entry: Entry) -> None:
        """Drop a dead session: kill what is left of it in the background, free its slot now."""
        entry.state = "closing"
        entry.console.set_close_reason("discarded by the session manager: its server had died")
        self._forget(entry, "discarded (its server had died)")
        self._orphans.add(entry.console)
        self._spawn("discard", self._kill_orphan, entry.console, entry.folder, spare_recording(entry))

    async def _kill_orphan(self, console: AsyncConsole, folder: str | None = None, spare: Any = None) -> None:
        with anyio.CancelScope(shield=True):
            await console.cancel()
            await drop_recording(spare)
            await remove_folder(folder)
        self._orphans.discard(console)

    def _forget(self, entry: Entry, why: str) -> None:
        if entry.folder is not None and entry.console.status().state == "closed":
            # Failure paths (a cold start or warm-up that never ran a cell): the folder is (nearly) empty.
            folder, entry.folder = entry.folder, None
            parent, name = os.path.split(folder)
            with contextlib.suppress(OSError, NotAllowed):
                remove_tree(parent, name)
        if self._entries.pop(entry.id, None) is not None:
            self._counts["closed"] += 1
            self._ended[entry.id] = why
            while len(self._ended) > 10_000:
                del self._ended[next(iter(self._ended))]
        self._dispatch()
        self._refill()

    # ------------------------------------------------------------- warm pool
    def _live(self) -> int:
        return len(self._entries) + self._reserved

    def _count(self, state: SessionState) -> int:
        return sum(1 for e in self._entries.values() if e.state == state)

    def _refill(self) -> None:
        if self._state != "running" or self._tg is None:
            return
        warming = self._warm_reserved + sum(1 for e in self._entries.values() if e.state == "starting" and not e.cold)
        n = refill_count(
            target=self.warm,
            warm=len(self._ready) + warming,
            live=self._live(),
            max_sessions=self.max_sessions,
            waiting=len(self._waiters),
            backing_off=time.monotonic() < self._backoff_until,
        )
        for _ in range(n):
            self._reserved += 1
            self._warm_reserved += 1
            self._spawn("warm-up", self._warm_one)

    async def _warm_one(self) -> None:
        """Start, verify and boot one session, then offer it to a waiting claim or the pool."""
        # The slot was reserved by _refill; building the console (profile, checks) happens here,
        # not in the claim that triggered the refill.
        try:
            # A claim triggered this refill: let its first cell run before the launch competes for CPU.
            await anyio.sleep(self.refill_delay)
        finally:
            self._reserved -= 1
            self._warm_reserved -= 1
        try:
            entry = self._new_entry()
        except Exception as exc:
            self._warm_failed(f"{type(exc).__name__}: {exc}")
            return
        try:
            await entry.console.start()
            boot = await entry.console.run(python="1", timeout=self.boot_timeout)
            if boot.is_error or boot.text.strip() != "1":
                raise ServerError(
                    f"the warm-up cell `1` returned {boot.text[:500]!r}", result=boot, pid=entry.console.pid
                )
        except Exception as exc:
            self._warm_failed(f"{type(exc).__name__}: {exc}")
            with anyio.CancelScope(shield=True):
                await entry.console.cancel()
            self._forget(entry, f"failed to warm up ({type(exc).__name__})")
            return
        except BaseException:
            # Cancelled: the manager is closing. Close cleanly (bounded), and leave no recording.
            with anyio.CancelScope(shield=True):
                spare = spare_recording(entry)
                await entry.console.close()
                await drop_recording(spare or spare_recording(entry))  # (see _close_entry)
                self._forget(entry, _MANAGER_CLOSED)
            raise
        try:
            entry.server = psutil.Process(entry.console.pid or -1)
        except (psutil.Error, ValueError):
            entry.server = None  # already gone: the hand-over check discards it
        self._counts["started"] += 1
        self._backoff = 0.0
        entry.state = "warm"
        entry.calls_seen = calls_of(entry.console)[0]
        self._ready.append(entry)
        self._dispatch()

    def _warm_failed(self, why: str) -> None:
        """Count a failed warm-up and back off (doubling, up to ``max_backoff``) before the next."""
        self._counts["failed"] += 1
        self._last_failure = why
        self._backoff = min(self.max_backoff, max(self.retry_backoff, self._backoff * 2))
        self._backoff_until = time.monotonic() + self._backoff

    # --------------------------------------------------------------- culling
    async def _check_forever(self) -> None:
        while True:
            await anyio.sleep(self.check_interval)
            self._check()

    def _check(self) -> None:
        """Cull idle and old in-use sessions, drop dead warm ones, refill after a back-off."""
        found = verdicts(list(self._entries.values()), idle_timeout=self.idle_timeout, max_lifetime=self.max_lifetime)
        for verdict, entry, why in found:
            if verdict == "dead":
                self._counts["discarded"] += 1
                self._ready.remove(entry)
                self._discard(entry)
            elif verdict == "closed":
                self._forget(entry, why)
            else:
                self._counts["culled"] += 1
                entry.console.set_close_reason(why)
                if entry in self._ready:
                    self._ready.remove(entry)
                entry.state = "closing"
                self._spawn("cull", self._close_entry, entry, why)
        self._refill()

    # ---------------------------------------------------------------- status
    def sessions(self) -> list[SessionInfo]:
        """Every session this manager holds, oldest first (local state only)."""
        now = time.monotonic()
        out = []
        for entry in self._entries.values():
            if entry.state == "in_use":
                observe(entry, now)
            recording = entry.console.recording if entry.state != "starting" else None
            out.append(
                SessionInfo(
                    id=entry.id,
                    owner=entry.owner if entry.state != "warm" else None,
                    state=entry.state,
                    created=entry.created_wall,
                    last_used=entry.last_used_wall,
                    cells=max(0, entry.calls_seen - entry.calls_at_handover) if entry.owner else 0,
                    pid=entry.console.pid,
                    recording=recording.path if recording is not None else None,
                    name=entry.name,
                )
            )
        return out

    def stats(self) -> ManagerStats:
        """Counters and claim latencies (local state only); see :class:`ManagerStats`."""
        return ManagerStats(
            warm=len(self._ready),
            starting=self._count("starting"),
            in_use=self._count("in_use"),
            waiting=len(self._waiters),
            started=self._counts["started"],
            culled=self._counts["culled"],
            failed=self._counts["failed"],
            discarded=self._counts["discarded"],
            closed=self._counts["closed"],
            warm_hits=summarize(self._hits),
            misses=summarize(self._misses),
            last_failure=self._last_failure,
        )
