"""``RaySessionManager``: the session manager's API with sessions hosted on the nodes of a Ray cluster."""

from __future__ import annotations

import contextlib
import os
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from console_bridge._errors import Busy, ConnectionClosed, LaunchRefused, NotAllowed
from console_bridge._handles import NotCopyable
from console_bridge._identity import Owner
from console_bridge._manager._info import ManagerStats, SessionInfo
from console_bridge.ray._host import NodeHost
from console_bridge.ray._remote import RayConsole, lost_message, remote

__all__ = ["RESOURCE", "RayManagerStats", "RaySessionInfo", "RaySessionManager"]

#: The Ray custom resource that declares how many sessions a node hosts.
RESOURCE = "console_sessions"


@dataclass(eq=False)
class _Node:
    node_id: str
    capacity: int
    actor: Any  # the node's host actor (ray.actor.ActorHandle)
    used: int = 0
    lost: str | None = None
    consoles: set[RayConsole] = field(default_factory=set)

    @property
    def free(self) -> int:
        return 0 if self.lost is not None else self.capacity - self.used


@dataclass(frozen=True, slots=True)
class RaySessionInfo(SessionInfo):
    """:class:`SessionInfo` of a session on a Ray node (``node_id``: Ray's hex node id)."""

    node_id: str = ""


@dataclass(frozen=True, slots=True)
class RayManagerStats:
    """Per node: capacity (``console_sessions``), sessions this driver holds there, the node
    manager's own :class:`ManagerStats`; ``lost`` says why a node's sessions ended."""

    capacity: dict[str, int]
    in_use: dict[str, int]
    nodes: dict[str, ManagerStats]
    lost: dict[str, str]

    @property
    def total_capacity(self) -> int:
        return sum(c for n, c in self.capacity.items() if n not in self.lost)


class RaySessionManager(NotCopyable):
    """Verified console sessions on the nodes of a Ray cluster, with the session manager's API.

    Example::

        async with RaySessionManager(workspace=None, warm=1) as manager:
            async with manager.session(owner=Owner("agent-1")) as console:
                print((await console.run(python="1 + 1")).text, (await console.status()).node_id)

    ``address``: ``None`` joins the running cluster if there is one (``ray.init(address="auto")``)
    and otherwise starts a local one with ``local_sessions`` of ``console_sessions``; a string is
    passed to ``ray.init``. When Ray is already initialized in this process it is used as is.
    A manager that initialized Ray shuts it down on leaving.

    Capacity: every alive node that declares the custom resource ``console_sessions: N``
    hosts at most N sessions of this manager; a claim goes to the node with the most free
    capacity. Past the total (or ``max_sessions``) a claim waits up to ``acquire_timeout``,
    then :class:`Busy`; past ``max_per_owner`` (counted across nodes), :class:`NotAllowed`.
    ``warm`` and every other option (``idle_timeout``, ``profile``, ``limits`` ...) go to the
    :class:`AsyncSessionManager` on each node: ``warm`` sessions per node.

    ``workspace``: a folder that exists at the same path on every node, or ``None`` for an
    empty folder per session (data in and out with ``put_file``/``get_file``). A missing
    folder on any node raises :class:`LaunchRefused` naming the node.

    Bounds (seconds): ``start_timeout`` (the node hosts start), ``shutdown_timeout`` (a node
    closes its sessions cleanly before its host is killed), ``acquire_timeout``, and
    ``reconcile_interval`` (a waiting claim asks the nodes this often for sessions that ended
    there, culled or crashed, and frees their slots).
    """

    def __init__(
        self,
        address: str | None = None,
        *,
        workspace: str | os.PathLike[str] | None = None,
        max_sessions: int | None = None,
        max_per_owner: int | None = None,
        acquire_timeout: float = 30.0,
        start_timeout: float = 120.0,
        shutdown_timeout: float = 30.0,
        local_sessions: int = 8,
        reconcile_interval: float = 1.0,
        **manager_options: Any,
    ) -> None:
        for label, value in (("max_sessions", max_sessions), ("max_per_owner", max_per_owner)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise LaunchRefused(f"{label} must be an integer >= 1 or None, not {value!r}")
        for label, bound in (
            ("acquire_timeout", acquire_timeout),
            ("start_timeout", start_timeout),
            ("shutdown_timeout", shutdown_timeout),
            ("reconcile_interval", reconcile_interval),
        ):
            if not isinstance(bound, int | float) or isinstance(bound, bool) or not 0 < bound < float("inf"):
                raise LaunchRefused(f"{label} must be a positive, finite number of seconds, not {bound!r}")
        if "owner" in manager_options:
            raise LaunchRefused("owner is given per claim (manager.session(owner=...)), not to the manager")
        self.address = address
        self.workspace = None if workspace is None else os.path.abspath(os.fspath(workspace))
        self.max_sessions = max_sessions
        self.max_per_owner = max_per_owner
        self.acquire_timeout = float(acquire_timeout)
        self.start_timeout = float(start_timeout)
        self.shutdown_timeout = float(shutdown_timeout)
        self.reconcile_interval = float(reconcile_interval)
        self.local_sessions = local_sessions
        self.manager_options = dict(manager_options)
        self._state = "new"
        self._owns_ray = False
        self._nodes: dict[str, _Node] = {}
        self._consoles: dict[str, RayConsole] = {}
        self._owners: Counter[Owner] = Counter()
        self._pending = 0
        self._freed = anyio.Event()

    def __repr__(self) -> str:
        used = sum(n.used for n in self._nodes.values())
        cap = sum(n.capacity for n in self._nodes.values() if n.lost is None)
        return f"<RaySessionManager {self._state} nodes={len(self._nodes)} in_use={used}/{cap}>"

    # --------------------------------------------------------------- lifecycle
    async def __aenter__(self) -> RaySessionManager:
        if self._state != "new":
            raise ConnectionClosed(f"this Ray session manager is {self._state}; create a new one")
        self._state = "starting"
        try:
            await anyio.to_thread.run_sync(self._connect)
            await self._start_hosts()
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self.aclose()
            raise
        self._state = "running"
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _connect(self) -> None:
        if ray.is_initialized():
            return
        if self.address is not None:
            ray.init(address=self.address)
        else:
            try:
                ray.init(address="auto")
            except ConnectionError:
                ray.init(resources={RESOURCE: self.local_sessions})
        self._owns_ray = True

    async def _start_hosts(self) -> None:
        nodes = await anyio.to_thread.run_sync(ray.nodes)
        host_class = ray.remote(NodeHost)
        for node in nodes:
            capacity = int(node.get("Resources", {}).get(RESOURCE, 0))
            if not node.get("Alive") or capacity < 1:
                continue
            node_id = node["NodeID"]
            actor: Any = host_class.options(
                num_cpus=0,
                resources={RESOURCE: capacity},
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
                max_restarts=0,
                max_task_retries=0,
            ).remote(self.workspace, capacity, self.manager_options)
            self._nodes[node_id] = _Node(node_id=node_id, capacity=capacity, actor=actor)
        if not self._nodes:
            raise LaunchRefused(
                f"no alive Ray node declares the custom resource {RESOURCE!r}; start nodes with "
                f"`ray start --resources='{{\"{RESOURCE}\": N}}'` (or resources={{...}} in ray.init)"
            )
        failures: list[Exception] = []
        try:
            with anyio.fail_after(self.start_timeout):
                async with anyio.create_task_group() as tg:
                    for node in self._nodes.values():
                        tg.start_soon(self._start_host, node, failures)
        except TimeoutError:
            raise LaunchRefused(
                f"the node hosts did not start within start_timeout={self.start_timeout:g}s "
                f"(nodes: {', '.join(self._nodes)})"
            ) from None
        if failures:
            raise failures[0]  # the node's own error (LaunchRefused naming the node, ...)

    @staticmethod
    async def _start_host(node: _Node, failures: list[Exception]) -> None:
        try:
            await remote(node, "start", node.actor.start.remote())
        except Exception as exc:
            failures.append(exc)

    async def aclose(self) -> None:
        """Close every session on every node (recordings finalized), stop the node hosts, and
        shut Ray down when this manager started it. Idempotent."""
        if self._state in ("closing", "closed"):
            return
        with anyio.CancelScope(shield=True):
            self._state = "closing"
            self._freed.set()
            for console in list(self._consoles.values()):
                console.closed = True
            with anyio.move_on_after(self.shutdown_timeout):
                async with anyio.create_task_group() as tg:
                    for node in self._nodes.values():
                        if node.lost is None:
                            tg.start_soon(self._shutdown_host, node)
            for node in self._nodes.values():
                with contextlib.suppress(Exception):
                    ray.kill(node.actor, no_restart=True)
            self._consoles.clear()
            if self._owns_ray:
                await anyio.to_thread.run_sync(ray.shutdown)
            self._state = "closed"

    @staticmethod
    async def _shutdown_host(node: _Node) -> None:
        with contextlib.suppress(Exception):
            await remote(node, "shutdown", node.actor.shutdown.remote())

    def _check_running(self) -> None:
        if self._state != "running":
            raise ConnectionClosed(f"the Ray session manager is {self._state}; use `async with manager:`")

    # ------------------------------------------------------------------ claims
    @contextlib.asynccontextmanager
    async def session(self, *, owner: Owner, name: str | None = None) -> AsyncIterator[RayConsole]:
        """A fresh session for ``owner`` on the node with the most free capacity; closed on leaving.

        Raises :class:`NotAllowed` past ``max_per_owner``, :class:`Busy` when no capacity freed
        within ``acquire_timeout``, the node's launch errors (same classes as locally), and
        :class:`ConnectionClosed` when the manager closes meanwhile.
        """
        console = await self.open(owner=owner, name=name)
        try:
            yield console
        finally:
            await console.close()

    async def open(self, *, owner: Owner, name: str | None = None) -> RayConsole:
        """Like :meth:`session`, for a long-lived session; close it with :meth:`close` or ``console.close()``."""
        self._check_running()
        if not isinstance(owner, Owner):
            raise NotAllowed("owner must be an Owner assigned by the host")
        if self.max_per_owner is not None and self._owners[owner] >= self.max_per_owner:
            raise NotAllowed(
                f"owner {owner!s} already has {self.max_per_owner} session(s) (max_per_owner); close one first",
                details={"owner": str(owner), "max_per_owner": self.max_per_owner},
            )
        self._owners[owner] += 1
        try:
            while True:
                node = await self._reserve()
                try:
                    session_id, spec = await remote(node, "open", node.actor.open.remote(owner, name))
                    break
                except ConnectionClosed:
                    node.used -= 1
                    self._signal()
                    if node.lost is None:
                        raise
                    # The node was lost before anything was handed out: the claim tries the next node.
                except BaseException:
                    node.used -= 1
                    self._signal()
                    raise
        except BaseException:
            self._owners[owner] -= 1
            raise
        console = RayConsole(node=node, session_id=session_id, owner=owner, spec=spec, on_closed=self._release)
        node.consoles.add(console)
        self._consoles[session_id] = console
        return console

    async def _reserve(self) -> _Node:
        """A slot on the node with the most free capacity, waiting up to ``acquire_timeout``."""
        deadline = time.monotonic() + self.acquire_timeout
        while True:
            self._check_running()
            total = sum(n.used for n in self._nodes.values())
            candidates = [n for n in self._nodes.values() if n.free > 0]
            if candidates and (self.max_sessions is None or total < self.max_sessions):
                node = max(candidates, key=lambda n: (n.free, -n.used))
                node.used += 1
                return node
            if not any(n.lost is None for n in self._nodes.values()):
                lost = "; ".join(f"{n.node_id}: {n.lost}" for n in self._nodes.values())
                raise ConnectionClosed(f"every Ray node of this manager was lost ({lost})")
            if await self._reconcile():
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise Busy(
                    f"no session became available within acquire_timeout={self.acquire_timeout:g}s "
                    f"(capacity {sum(n.capacity for n in self._nodes.values() if n.lost is None)}, "
                    f"max_sessions={self.max_sessions}); close one or add nodes with {RESOURCE}",
                    details={"in_use": total},
                )
            freed = self._freed
            with anyio.move_on_after(min(remaining, self.reconcile_interval)):
                await freed.wait()

    async def _reconcile(self) -> bool:
        """Free the slots of sessions that ended on their node behind the driver's back (culled for
        idleness or lifetime, closed by their server); True when a slot was freed."""
        freed = False
        for node in list(self._nodes.values()):
            if node.lost is not None or not node.consoles:
                continue
            try:
                infos = await remote(node, "sessions", node.actor.sessions.remote())
            except ConnectionClosed:
                freed = True  # the node was lost: its capacity left, waiting claims re-check
                continue
            alive = {info.id for info in infos if info.state == "in_use"}
            gone = [c for c in node.consoles if c.id not in alive]
            if not gone:
                continue
            with contextlib.suppress(ConnectionClosed):
                reasons = await remote(node, "ended", node.actor.ended.remote([c.id for c in gone]))
                for console in gone:
                    console.close_reason = reasons.get(console.id)
            for console in gone:
                await self._release(console)
                freed = True
        return freed

    def _signal(self) -> None:
        self._freed.set()
        self._freed = anyio.Event()

    async def _release(self, console: RayConsole) -> None:
        """The console ended (closed, culled or its node lost): free its slot, close it on the node."""
        if self._consoles.pop(console.id, None) is None:
            console.closed = True
            return
        console.closed = True
        node = console.node
        node.consoles.discard(console)
        node.used -= 1
        self._owners[console.owner] -= 1
        if not self._owners[console.owner]:
            del self._owners[console.owner]
        try:
            if node.lost is None:
                with anyio.CancelScope(shield=True):
                    await remote(node, "close", node.actor.close.remote(console.id))
        except ConnectionClosed:
            pass
        finally:
            self._signal()

    # ------------------------------------------------------------ by id
    def get(self, session_id: str) -> RayConsole:
        """The open session ``session_id`` of this manager; :class:`ConnectionClosed` when its node
        was lost, :class:`NotAllowed` when unknown (or already closed)."""
        console = self._consoles.get(session_id)
        if console is None:
            raise NotAllowed(f"no open session {session_id!r} in this Ray session manager")
        if console.node.lost is not None:
            raise ConnectionClosed(lost_message(console.node_id, console.node.lost))
        return console

    async def close(self, session_id: str) -> None:
        """Close the session ``session_id``; idempotent for one that already ended."""
        console = self._consoles.get(session_id)
        if console is not None:
            await console.close()

    # ---------------------------------------------------------------- status
    async def sessions(self) -> list[RaySessionInfo]:
        """Every session of every alive node of this manager (warm ones too), with its node id."""
        out: list[RaySessionInfo] = []
        for node in list(self._nodes.values()):
            if node.lost is not None:
                continue
            try:
                infos = await remote(node, "sessions", node.actor.sessions.remote())
            except ConnectionClosed:
                continue
            for info in infos:
                values = {name: getattr(info, name) for name in SessionInfo.__dataclass_fields__}
                out.append(RaySessionInfo(**values, node_id=node.node_id))
        return out

    async def stats(self) -> RayManagerStats:
        """Capacity and use per node, each node manager's counters, and the lost nodes."""
        nodes: dict[str, ManagerStats] = {}
        for node in list(self._nodes.values()):
            if node.lost is None:
                with contextlib.suppress(ConnectionClosed):
                    nodes[node.node_id] = await remote(node, "stats", node.actor.stats.remote())
        return RayManagerStats(
            capacity={n.node_id: n.capacity for n in self._nodes.values()},
            in_use={n.node_id: n.used for n in self._nodes.values()},
            nodes=nodes,
            lost={n.node_id: n.lost for n in self._nodes.values() if n.lost is not None},
        )

    async def node_pids(self) -> dict[str, list[int]]:
        """Per alive node, the process ids of the servers of its sessions (for checks and tools)."""
        out: dict[str, list[int]] = {}
        for node in list(self._nodes.values()):
            if node.lost is None:
                with contextlib.suppress(ConnectionClosed):
                    out[node.node_id] = await remote(node, "pids", node.actor.pids.remote())
        return out
