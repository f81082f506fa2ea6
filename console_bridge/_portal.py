"""The blocking portal: one event loop on one background thread per blocking object.

Blocking classes (``McpConnection``, ``Console``) build their async twin inside
the portal's loop and forward every method through it, so they work in a plain
script, inside a running event loop (Jupyter, ``asyncio.run``) and from several
threads, each with its own object. The thread stops when the object closes, when
it is garbage collected, or at interpreter exit (``weakref.finalize``).
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import Future
from typing import Any, Generic, Protocol, Self, TypeVar

import anyio.from_thread
from anyio.from_thread import BlockingPortal

from console_bridge._errors import BridgeError, ConnectionClosed
from console_bridge._handles import NotCopyable, ToolHandle
from console_bridge._identity import Owner, check_owner
from console_bridge._results import ToolResult

__all__ = ["BlockingManager", "Portal"]

T = TypeVar("T")


def _stop(cm: Any, closer: Callable[[], Awaitable[None]] | None, portal: BlockingPortal) -> None:
    """Close the async object (bounded by its own shutdown bounds), then stop the loop thread."""
    if closer is not None:
        with contextlib.suppress(Exception):
            portal.call(closer)
    with contextlib.suppress(Exception):
        cm.__exit__(None, None, None)


def _short(exc: BridgeError) -> BridgeError:
    """``exc`` without the traceback it gathered in the loop thread (``--debug`` users keep ``__cause__``)."""
    suppress = exc.__suppress_context__
    exc = exc.with_traceback(None)
    exc.__suppress_context__ = suppress
    return exc


class Portal:
    """A loop thread owned by one blocking object."""

    #: Seconds to wait, after Ctrl-C, for the interrupted task to unwind.
    interrupt_wait = 10.0

    def __init__(self, owner: object, what: str) -> None:
        self._what = what
        self._cm = anyio.from_thread.start_blocking_portal(backend="asyncio")
        self._portal: BlockingPortal = self._cm.__enter__()
        self._lock = threading.Lock()
        self._closed = False
        self._closer: Callable[[], Awaitable[None]] | None = None
        self._finalizer = weakref.finalize(owner, self._finalize_args)

    def _finalize_args(self) -> None:
        # Replaced in set_closer; kept so finalize always has something safe to run.
        _stop(self._cm, self._closer, self._portal)

    def set_closer(self, closer: Callable[[], Awaitable[None]]) -> None:
        """What to await before the thread stops (the async object's ``close``)."""
        self._closer = closer

    @property
    def closed(self) -> bool:
        return self._closed

    def run_sync(self, fn: Callable[[], T]) -> T:
        """Run the plain callable ``fn`` in the loop thread and wait (to build async objects there)."""
        if self._closed:
            raise ConnectionClosed(f"{self._what} is closed; create a new one")
        try:
            return self._portal.call(fn)
        except BridgeError as exc:
            raise _short(exc) from exc.__cause__

    def call(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run ``await fn(*args)`` in the loop and wait. Ctrl-C cancels the task, then re-raises."""
        if self._closed:
            raise ConnectionClosed(f"{self._what} is closed; create a new one")
        scopes: list[anyio.CancelScope] = []
        stop = threading.Event()
        done = threading.Event()

        async def guarded() -> T:
            try:
                with anyio.CancelScope() as scope:
                    scopes.append(scope)  # publish the scope first, then look at the flag:
                    if stop.is_set():  # whichever side comes second sees the other
                        scope.cancel()
                    return await fn(*args)
                raise ConnectionClosed(f"the call on {self._what} was interrupted")
            finally:
                done.set()

        try:
            future: Future[T] = self._portal.start_task_soon(guarded)
            return future.result()
        except BridgeError as exc:
            # The loop thread's frames (anyio, concurrent.futures, the async internals) say
            # nothing to the caller: the error starts at the public call.
            raise _short(exc) from exc.__cause__
        except KeyboardInterrupt:
            # Ctrl-C (possibly while the task was being scheduled): cancel the task in the
            # loop and wait until it has really unwound, so the object is idle again.
            stop.set()
            if scopes:
                with contextlib.suppress(Exception):
                    self._portal.call(scopes[0].cancel)
            done.wait(self.interrupt_wait)
            raise

    def call_settling(self, fn: Callable[[], Awaitable[T]], settle: Callable[[], Awaitable[object]]) -> T:
        """``call(fn)``; on Ctrl-C, ``settle`` (a bounded interrupt-and-poll; a bridge error from it is
        swallowed) so the next call is accepted, then ``KeyboardInterrupt`` is re-raised."""
        try:
            return self.call(fn)
        except KeyboardInterrupt:
            with contextlib.suppress(BridgeError):
                self.call(settle)
            raise

    def stop(self) -> None:
        """Close the async object and stop the thread (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._finalizer.detach()
        _stop(self._cm, self._closer, self._portal)

    def cancel(self, cancel: Callable[[], Awaitable[None]]) -> None:
        """Await the async object's ``cancel`` (kill at once), then stop the thread (idempotent)."""
        if not self._closed:
            self.call(cancel)
        self.stop()

    def blocking_handle(self, handle: ToolHandle) -> ToolHandle:
        """A handle whose calls run in this portal's loop (``handle.call`` blocks)."""
        async_invoke = handle._invoke

        def call(arguments: dict[str, Any]) -> ToolResult:
            return self.call(async_invoke, arguments)

        async def invoke(arguments: dict[str, Any]) -> ToolResult:
            check_owner(handle.owner, f"tool {handle.name!r}")
            return await anyio.to_thread.run_sync(call, arguments, abandon_on_cancel=False)

        return handle.with_blocking(call, invoke)


class _AsyncManager(Protocol):
    async def __aenter__(self) -> Any: ...

    async def aclose(self) -> None: ...

    async def close(self, session_id: str) -> None: ...


M = TypeVar("M", bound=_AsyncManager)
C = TypeVar("C", bound="_Closeable")


class _Closeable(Protocol):
    def close(self) -> None: ...


class BlockingManager(NotCopyable, Generic[M, C]):
    """The shared half of a blocking session-manager twin: its portal, ``with``, start, shutdown.

    A subclass builds its async manager through :meth:`_build` and says how one
    session is opened (:meth:`open`); everything else forwards through the portal.
    """

    _async: M

    def _build(self, what: str, make: Callable[[], M]) -> None:
        self._portal = Portal(self, what)
        try:
            self._async = self._portal.run_sync(make)  # built in the loop thread it will run in
        except BaseException:
            self._portal.stop()
            raise
        self._portal.set_closer(self._async.aclose)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    def start(self) -> None:
        """Start the warm sessions (Ray: join the cluster, start the node hosts) in the background.

        What ``with`` does.
        """
        self._portal.call(self._async.__aenter__)

    def shutdown(self) -> None:
        """Fail waiting claims, close every session (Ray: on every node) and stop the loop thread. Idempotent."""
        self._portal.stop()

    def open(self, *, owner: Owner, name: str | None = None) -> C:
        """A long-lived session; close it with ``console.close()`` or ``manager.close(console.id)``."""
        raise NotImplementedError

    @contextlib.contextmanager
    def session(self, *, owner: Owner, name: str | None = None) -> Iterator[C]:
        """A fresh session for ``owner``, closed on leaving."""
        console = self.open(owner=owner, name=name)
        try:
            yield console
        finally:
            console.close()

    def close(self, session_id: str) -> None:
        """Close the session ``session_id``; its slot frees."""
        self._portal.call(self._async.close, session_id)
