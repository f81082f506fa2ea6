"""``SessionManager``: the blocking twin of :class:`AsyncSessionManager`, a thin portal."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

from console_bridge._console._blocking import Console
from console_bridge._console._session import AsyncConsole
from console_bridge._identity import Owner
from console_bridge._manager._async import AsyncSessionManager
from console_bridge._manager._info import ManagerStats, SessionInfo
from console_bridge._portal import BlockingManager

__all__ = ["SessionManager"]


class _ManagedConsole(Console):
    """A blocking :class:`Console` over a session the manager handed out; closing returns it."""

    def __init__(self, manager: SessionManager, console: AsyncConsole, session_id: str) -> None:
        self._portal = manager._portal
        self._async = console
        self._manager = manager
        self.id = session_id

    def close(self) -> None:
        """Close the session (its slot frees). Idempotent."""
        if not self._portal.closed:
            self._manager.close(self.id)

    def cancel(self) -> None:
        """Kill the session at once, then release it. Idempotent."""
        if not self._portal.closed:
            self._portal.call(self._async.cancel)
        self.close()


class SessionManager(BlockingManager[AsyncSessionManager, Console]):
    """Blocking twin of :class:`AsyncSessionManager`: same arguments, same methods, blocking.

    Its sessions are blocking :class:`Console` objects. Usable in scripts, in Jupyter and
    from several threads at once (claims from threads queue fairly). Example::

        with SessionManager("analysis/", warm=1, max_sessions=4) as manager:
            with manager.session(owner=Owner("agent-1")) as console:
                print(console.run(python="1 + 1").text)

    ``shutdown()`` (or leaving ``with``) closes the manager and every session it started;
    ``close(id)`` closes one session.
    """

    def __init__(self, workspace: Any = ".", **kwargs: Any) -> None:
        self._build("SessionManager", lambda: AsyncSessionManager(workspace, **kwargs))

    def __repr__(self) -> str:
        return repr(self._async).replace("AsyncSessionManager", "SessionManager")

    def open(self, *, owner: Owner, name: str | None = None) -> Console:
        """A long-lived session; close it with ``console.close()`` or ``manager.close(console.id)``."""
        console = self._portal.call(lambda: self._async.open(owner=owner, name=name))
        return _ManagedConsole(self, console, self._portal.run_sync(lambda: self._async.id_of(console)))

    def get(self, session_id: str) -> Console:
        """The in-use session ``session_id`` (see :meth:`AsyncSessionManager.get`)."""
        console = self._portal.run_sync(lambda: self._async.get(session_id))
        return _ManagedConsole(self, console, session_id)

    def sessions(self) -> list[SessionInfo]:
        """Every session the manager holds (local state only)."""
        return self._portal.run_sync(self._async.sessions)

    def stats(self) -> ManagerStats:
        """Counters and claim latencies (local state only)."""
        return self._portal.run_sync(self._async.stats)


# ``help(SessionManager)`` and editors show the real parameters, not ``**kwargs`` (the behaviour is
# the async manager's, through the portal).
SessionManager.__init__.__signature__ = inspect.signature(AsyncSessionManager.__init__)  # type: ignore[attr-defined]

if TYPE_CHECKING:
    from console_bridge._surfaces import AsyncManagerSurface, ManagerSurface

    def _keeps_to_its_surface(
        manager: AsyncSessionManager, twin: SessionManager
    ) -> tuple[
        AsyncManagerSurface[AsyncConsole, list[SessionInfo], ManagerStats],
        ManagerSurface[Console, list[SessionInfo], ManagerStats],
    ]:
        """mypy fails here when AsyncSessionManager or SessionManager drifts from its surface (``_surfaces``)."""
        return manager, twin
