"""Console sessions on the nodes of a Ray cluster (extra ``[ray]``): :class:`RaySessionManager`.

::

    from console_bridge import Owner
    from console_bridge.ray import RaySessionManager

    async with RaySessionManager(workspace=None, warm=1) as manager:      # joins or starts a cluster
        async with manager.session(owner=Owner("agent-1")) as console:
            await console.put_file("data.csv", b"a,b\\n1,2\\n")
            print((await console.run(python="1 + 1")).text, (await console.status()).node_id)

Design: **one host actor per node**, pinned to it (``NodeAffinitySchedulingStrategy``,
``soft=False``, no restarts), holding the node's whole ``console_sessions`` capacity N as
its Ray resource and a local :class:`~console_bridge.AsyncSessionManager` with
``max_sessions=N`` and its own warm pool. The actor runs the same ``AsyncConsole`` and
manager code as a local process; only calls and results cross the wire (errors as
themselves: a :class:`~console_bridge.CellTimeout` from a node is a ``CellTimeout`` here).
The driver places each claim on the node with the most free capacity.

Why not an actor per session: a Ray actor is a worker process of its own (about 100 MiB
and a second or more to start), on top of the session's own tree (about 110 MiB PSS), and
a warm pool of actors would still need those processes idle. One host per node costs one
worker per node, whatever the number of sessions.

- **Claim latency**: a warm claim is one actor call (about a millisecond on a LAN) plus the
  local manager's O(1) hand-over; a miss is a cold start on the node (2-3 s), as locally.
  Every later call adds one actor round trip (measured: see README, "More than one machine").
- **Failure blast radius**: a node, or its host actor, takes all its sessions with it and
  nothing else: they raise :class:`~console_bridge.ConnectionClosed` naming the node id,
  their slots leave the capacity, nothing is recreated silently. The sessions' process
  trees die with the actor (each session's supervisor has the actor as parent and kills its
  whole tree on the parent's death). A bug that crashed the host would end every session of
  its node (a per-session actor would confine it to one): the host holds no logic of its own.
- **Memory**: per node one Ray worker (about 100 MiB) plus, per session, what a local
  session costs; on the driver about a kilobyte per session proxy.
- **Driver exit**: leaving the manager closes every session cleanly and kills the hosts;
  a driver that dies takes its (non-detached) host actors with it, and so their sessions.

``BlockingRaySessionManager`` is the blocking twin (one loop thread, as ``SessionManager``).

Policies with an approval callback run on the node (the callback is pickled there);
``run(on_output=...)`` calls back here, on the driver, as chunks stream in.
"""

from __future__ import annotations

from console_bridge._extras import install_hint

try:
    import ray as _ray  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(f"console_bridge.ray needs Ray: {install_hint('ray')}") from exc

from console_bridge.ray._blocking import BlockingRayConsole, BlockingRaySessionManager
from console_bridge.ray._host import RayConsoleStatus
from console_bridge.ray._manager import RESOURCE, RayManagerStats, RaySessionInfo, RaySessionManager
from console_bridge.ray._remote import RayConsole

__all__ = [
    "RESOURCE",
    "BlockingRayConsole",
    "BlockingRaySessionManager",
    "RayConsole",
    "RayConsoleStatus",
    "RayManagerStats",
    "RaySessionInfo",
    "RaySessionManager",
]
