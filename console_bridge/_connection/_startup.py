"""Connecting within ``startup_timeout``: the server started (or reached) and the handshake done, or
everything that was started stopped again.

One bound covers the transport, ``initialize`` and the allowlist's ``tools/list``. Whatever ends a
start early (a failure, the deadline, the caller's cancellation) stops what was started before it
propagates, and the caller sees one error: the failure translated, :class:`CallTimeout` past the
deadline, or its own cancellation, which stays a cancellation.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from mcp.client.session import ClientSession

from console_bridge._connection._session_host import SessionHost
from console_bridge._errors import BridgeError, CallTimeout, ConnectionClosed

__all__ = ["start_within"]


async def start_within(
    host: SessionHost,
    *,
    server: str,
    startup_timeout: float,
    handshake: Callable[[ClientSession], Awaitable[None]],
    finish: Callable[[ConnectionClosed | None], Awaitable[None]],
    translate: Callable[[BaseException], BridgeError],
    context: Callable[[], dict[str, Any]],
) -> None:
    """Start ``host`` and run ``handshake`` on its session within ``startup_timeout`` seconds.

    On any failure ``finish`` (the connection's close) runs, shielded, before the error propagates.
    """
    host.start()
    with anyio.move_on_after(startup_timeout) as scope:
        try:
            await host.ready.wait()
        except anyio.get_cancelled_exc_class():
            if not scope.cancel_called:  # cancelled by the caller: stop what was started
                with anyio.CancelScope(shield=True):
                    await finish(ConnectionClosed(f"connect() to {server!r} was cancelled"))
            raise
        if host.failure:
            await finish(None)
            raise translate(host.failure[0])
        assert host.session is not None
        try:
            await handshake(host.session)
        except BaseException as exc:
            if isinstance(exc, anyio.get_cancelled_exc_class()) and scope.cancel_called:
                raise  # the startup deadline: reported as CallTimeout below
            with anyio.CancelScope(shield=True):
                await finish(exc if isinstance(exc, ConnectionClosed) else None)
            if isinstance(exc, BridgeError | anyio.get_cancelled_exc_class()):
                raise  # a caller's cancellation stays a cancellation
            raise translate(exc) from None
    if scope.cancelled_caught:
        error = CallTimeout(
            f"server {server!r} did not start, initialize and list within startup_timeout="
            f"{startup_timeout:g}s; it was stopped. Check the command, or raise startup_timeout.",
            **context(),
        )
        with anyio.CancelScope(shield=True):
            await finish(error)
        raise error
