"""``console-bridge serve``'s server: verified, governed console sessions for any MCP host.

A session manager hands out the consoles, each console's own ``tools()`` gives the model's
``send`` tool; the MCP server (``_mcp``) and the HTTP gate (``_http``) only carry them over the
wire, and ``_consoles`` keeps each console's lifetime. The ``serve`` command (``cli/_serve``)
turns its options into a :class:`ServeConfig` and runs :func:`serve_stdio` or :func:`serve_http`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import socket
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from console_bridge import AsyncConsole, AsyncSessionManager, Owner, Policy
from console_bridge._serve._consoles import Consoles
from console_bridge._serve._contract import Lifetimes
from console_bridge._serve._fast import FastSend
from console_bridge._serve._http import LOOPBACK_HOSTS, HttpGate, HttpGateOptions, make_sdk
from console_bridge._serve._identity import Identities
from console_bridge._serve._mcp import Caller, ServeOptions, Template, build_server, learn, tool_calls
from console_bridge._serve._stdio import pipes_on_stdio, stdio_pipes

__all__ = ["DEFAULT_MAX_LIFETIME", "ServeConfig", "held_signals", "learn_template", "serve_http", "serve_stdio"]


def _quiet(_message: str) -> None:
    return None


@dataclass
class ServeConfig:
    transport: str = "stdio"
    host: str = "127.0.0.1"
    port: int = 8765
    warm: int | None = None
    max_sessions: int = 8
    max_per_client: int | None = None
    idle_timeout: float | None = 600.0
    session_idle_timeout: float | None = 180.0
    reclaim_idle: float | None = 60.0
    max_lifetime: float | None = None
    max_cell_time: float | None = None
    acquire_timeout: float = 1.0
    token_file: Path | None = None
    tokens: Path | None = None
    replica: str | None = None
    allowed_origins: tuple[str, ...] = ()
    allowed_hosts: tuple[str, ...] = ()
    console_options: dict[str, Any] = field(default_factory=dict)
    workspace: Path = Path(".")
    serve_options: ServeOptions = field(default_factory=ServeOptions)
    info: Callable[[str], None] = _quiet  # a line for the operator (the CLI prints it on stderr)

    @property
    def lifetimes(self) -> Lifetimes:
        lifetime = self.max_lifetime if self.max_lifetime is not None else DEFAULT_MAX_LIFETIME[self.transport]
        return Lifetimes(
            idle_timeout=self.idle_timeout,
            max_lifetime=lifetime,
            max_cell_time=self.max_cell_time,
            # over stdio the process is the session: its console lives to --idle-timeout
            session_idle_timeout=self.session_idle_timeout if self.transport == "http" else None,
        )


#: A console's lifetime when --max-lifetime is not given: protective for an unattended stdio host too.
DEFAULT_MAX_LIFETIME = {"stdio": 8 * 3600.0, "http": 3600.0}


def _manager(config: ServeConfig, warm: int) -> AsyncSessionManager:
    """The session manager: capacity and quotas. Its own culling is off: serve's limits are kept by
    ``Consoles`` (a running cell is busy, and a console closed by a limit says which)."""
    return AsyncSessionManager(
        config.workspace,
        warm=warm,
        max_sessions=config.max_sessions,
        max_per_owner=config.max_per_client,
        idle_timeout=None,
        max_lifetime=None,
        acquire_timeout=config.acquire_timeout,
        **config.console_options,
    )


async def learn_template(config: ServeConfig) -> Template:
    """What every client reads (tools, instructions, sandbox), from one probe console started and
    closed at launch: its recording goes to a private folder that is removed, and it is not audited,
    so listings and ``initialize`` never need a console."""
    options = dict(config.console_options)
    policy = options.get("policy")
    if isinstance(policy, Policy):
        options["policy"] = dataclasses.replace(policy, audit=None)
    with tempfile.TemporaryDirectory(prefix="console-bridge-serve-probe-") as recordings:
        options["recordings_dir"] = recordings
        console = AsyncConsole(config.workspace, **options)
        try:
            await console.start()
            return learn(console, config.lifetimes)
        finally:
            await console.cancel()


# ------------------------------------------------------------------ stdio
async def serve_stdio(config: ServeConfig) -> None:
    """One client: one console is started at launch (it teaches the tools and serves the client's
    first claim); more at ``console_open``. A ``send`` without a handle uses the client's own
    console in either protocol era. All are closed (recordings finalized) when stdin closes."""
    from mcp.server.stdio import stdio_server

    identity = Owner("mcp-stdio")
    async with anyio.create_task_group() as signals:
        signals.start_soon(
            _on_signals, _Stop(signals.cancel_scope, config.info)
        )  # from launch on: a signal is a clean stop
        async with _manager(config, warm=config.warm or 0) as manager:
            # One client: the console claimed at launch teaches the tools and serves its first claim.
            first = await manager.open(owner=identity)
            template = learn(first, config.lifetimes)
            consoles = Consoles(
                manager,
                config.lifetimes,
                settle_timeout=config.serve_options.settle_timeout,
                spare=first,
                reclaim_idle=config.reclaim_idle,
            )
            caller = Caller(identity=identity, session="stdio")
            calls = tool_calls(consoles, template, config.serve_options)
            server = build_server(consoles, template, lambda _ctx: caller, config.serve_options, calls)
            fast = FastSend(calls, template.send.name, lambda: caller)
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(consoles.run)
                    wire = stdio_pipes(fast=fast) if pipes_on_stdio() else stdio_server()
                    async with wire as (read_stream, write_stream):
                        await server.run(read_stream, write_stream, server.create_initialization_options())
                    tg.cancel_scope.cancel()
            finally:
                manager.warm = 0  # stopping: closing a console must not start a warm-up to replace it
                await consoles.aclose()
        signals.cancel_scope.cancel()


@dataclass
class _Stop:
    """What a SIGTERM/SIGINT does: cancel ``scope`` (launch, stdio), or ``graceful`` once HTTP serves."""

    scope: anyio.CancelScope
    info: Callable[[str], None]
    graceful: Callable[[], Awaitable[None]] | None = None


_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_EARLY: list[int] = []  # signals that came before the event loop listened (see _held_signals)


@contextlib.contextmanager
def held_signals() -> Iterator[None]:
    """Until the event loop listens, a signal is kept (and acted on then), not fatal; the previous
    handlers are put back at the end."""
    previous = {sig: signal.signal(sig, lambda received, _frame: _EARLY.append(received)) for sig in _STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _EARLY.clear()


async def _on_signals(stop: _Stop, identities: Identities | None = None) -> None:
    async def act(sig: int) -> bool:
        if sig == signal.SIGHUP and identities is not None and identities.path is not None:
            stop.info(identities.reload())
            return False
        if stop.graceful is None:
            stop.scope.cancel()
        else:
            await stop.graceful()
        return True

    with anyio.open_signal_receiver(*_STOP_SIGNALS) as signals:
        early, _EARLY[:] = list(_EARLY), []
        for sig in early:
            if await act(sig):
                return
        async for sig in signals:
            if await act(sig):
                return


# ------------------------------------------------------------------ HTTP
async def serve_http(
    config: ServeConfig, identities: Identities, sock: socket.socket, announce: Callable[[], None] = lambda: None
) -> None:
    async with anyio.create_task_group() as signals:
        stop = _Stop(
            signals.cancel_scope, config.info
        )  # a signal during the launch cancels it (all it started is closed)
        signals.start_soon(_on_signals, stop, identities)
        manager = _manager(config, warm=config.warm if config.warm is not None else 1)
        async with manager:
            template = await learn_template(config)  # while the pool warms its first console
            announce()  # the URL only once a console was started and verified
            await _serve_http(config, identities, sock, manager, template, stop)
        signals.cancel_scope.cancel()


async def _serve_http(
    config: ServeConfig,
    identities: Identities,
    sock: socket.socket,
    manager: AsyncSessionManager,
    template: Template,
    stop: _Stop,
) -> None:
    import uvicorn

    consoles = Consoles(
        manager,
        config.lifetimes,
        settle_timeout=config.serve_options.settle_timeout,
        id_prefix=f"{config.replica}." if config.replica else "",
        reclaim_idle=config.reclaim_idle,
    )
    hosts = None if config.host not in LOOPBACK_HOSTS and not config.allowed_hosts else config.allowed_hosts
    options = HttpGateOptions(allowed_origins=config.allowed_origins, allowed_hosts=hosts)
    gate = HttpGate(consoles=consoles, identities=identities, options=options)
    server = build_server(consoles, template, gate.caller, config.serve_options)
    gate.server = server
    gate.plain_tool = template.send.name
    gate.sdk = make_sdk(
        server,
        # an MCP session outlives its idle console, so a client that comes back is told why it closed
        idle_timeout=None if config.idle_timeout is None else 2 * config.idle_timeout,
        max_sessions=32 * config.max_sessions,  # MCP sessions hold no console until their first send
        max_body_bytes=gate.options.max_body_bytes,
        identities=lambda: len(set(identities.tokens.values())),  # each its share: none locks the others out
    )

    class _Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield  # signals are ours: a SIGTERM is a clean stop and exit 0, not re-raised

    uv_config = uvicorn.Config(gate, log_level="warning", lifespan="on", timeout_graceful_shutdown=5)
    uv_server = _Server(uv_config)

    async def graceful() -> None:
        uv_server.should_exit = True
        await _stop_clients(manager, consoles, gate)

    stop.graceful = graceful
    async with anyio.create_task_group() as tg:
        tg.start_soon(consoles.run)
        await uv_server.serve(sockets=[sock])
        tg.cancel_scope.cancel()
    await consoles.aclose()


async def _stop_clients(manager: AsyncSessionManager, consoles: Consoles, gate: HttpGate) -> None:
    """Serve is stopping: interrupt every cell and close every console (recordings finalized), so a
    send in flight returns a tool error at once, then end the MCP sessions' streams; uvicorn's
    graceful shutdown then finds no request left to cut off."""
    manager.warm = 0  # closing a console must not start a warm-up to replace it (cut off, unfinalized)
    await consoles.aclose()
    sessions = getattr(gate.sdk, "_server_instances", {})  # the SDK has no public "terminate all"
    with anyio.CancelScope(shield=True):
        for transport in list(sessions.values()):
            with contextlib.suppress(Exception):
                await transport.terminate()
