"""``console-bridge serve``: verified, governed console sessions for any MCP host.

A face: a session manager hands out the consoles, each console's own ``tools()``
gives the model's ``send`` tool; the MCP server (``_serve_mcp``) and the HTTP gate
(``_serve_http``) only carry them over the wire.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import signal
import socket
import sys
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import click

from console_bridge._console._session import AsyncConsole
from console_bridge._errors import BridgeError
from console_bridge._governance._audit import AuditLog
from console_bridge._governance._policy import Policy
from console_bridge._identity import Owner
from console_bridge._manager._async import AsyncSessionManager
from console_bridge.cli._common import PREFIX, ExitCode, FiniteFloat, error_text, exit_code_for, fail
from console_bridge.cli._limit_options import NO_LIMIT, OrNone, limit_options, limits_from_options
from console_bridge.cli._output import host_line
from console_bridge.cli._serve_consoles import Consoles
from console_bridge.cli._serve_contract import Lifetimes
from console_bridge.cli._serve_fast import FastSend
from console_bridge.cli._serve_http import LOOPBACK_HOSTS, Gate, GateOptions, make_sdk
from console_bridge.cli._serve_identity import Identities, serving_identities
from console_bridge.cli._serve_mcp import Caller, ServeOptions, Template, build_server, learn, tool_calls
from console_bridge.cli._serve_stdio import pipes_on_stdio, stdio_pipes

__all__ = ["serve_command"]


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


#: A --replica name: it prefixes console ids (a token_urlsafe never contains the "." that ends it).
_REPLICA = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,31}")

#: A console's lifetime when --max-lifetime is not given: protective for an unattended stdio host too.
DEFAULT_MAX_LIFETIME = {"stdio": 8 * 3600.0, "http": 3600.0}


def _info(message: str) -> None:
    click.echo(f"{PREFIX}: {host_line(message)}", err=True)


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
        signals.start_soon(_on_signals, _Stop(signals.cancel_scope))  # from launch on: a signal is a clean stop
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
    graceful: Callable[[], Awaitable[None]] | None = None


_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_EARLY: list[int] = []  # signals that came before the event loop listened (see _held_signals)


@contextlib.contextmanager
def _held_signals() -> Iterator[None]:
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
            _info(identities.reload())
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
        stop = _Stop(signals.cancel_scope)  # a signal during the launch cancels it (all it started is closed)
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
    options = GateOptions(allowed_origins=config.allowed_origins, allowed_hosts=hosts)
    gate = Gate(consoles=consoles, identities=identities, options=options)
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


async def _stop_clients(manager: AsyncSessionManager, consoles: Consoles, gate: Gate) -> None:
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


def _bind_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # proto TCP: asyncio then sets TCP_NODELAY
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}", ExitCode.USAGE)
    sock.listen(128)
    sock.setblocking(False)
    return sock


def execute(config: ServeConfig) -> int:
    with _held_signals():
        return _execute(config)


def _execute(config: ServeConfig) -> int:
    try:
        AsyncConsole(config.workspace, **config.console_options)  # every option checked; nothing started
        if config.transport == "stdio":
            anyio.run(serve_stdio, config)
            return 0
        if config.host not in LOOPBACK_HOSTS:
            _info(
                f"warning: listening on {config.host}, not loopback: anyone who can reach it and holds the "
                "token can run code in the sandbox. Put it behind TLS (a reverse proxy)."
            )
        sock = _bind_socket(config.host, config.port)
        port = sock.getsockname()[1]
        shown = f"[{config.host}]" if ":" in config.host else config.host
        with serving_identities(
            config.tokens, config.token_file, config.workspace, config.console_options, _info
        ) as identities:
            url = f"serving MCP (Streamable HTTP) at http://{shown}:{port}/mcp"
            anyio.run(serve_http, config, identities, sock, lambda: _info(url))
        return 0
    except BridgeError as exc:
        _info(error_text(exc))
        return int(exit_code_for(exc))
    except BaseExceptionGroup as group:  # (a refusal raised inside the server's task groups: one line too)
        error = _first_bridge_error(group)
        if error is None:
            raise
        _info(error_text(error))
        return int(exit_code_for(error))
    except KeyboardInterrupt:
        return 0


def _first_bridge_error(group: BaseExceptionGroup[BaseException]) -> BridgeError | None:
    for exc in group.exceptions:
        if isinstance(exc, BridgeError):
            return exc
        if isinstance(exc, BaseExceptionGroup):
            found = _first_bridge_error(exc)
            if found is not None:
                return found
    return None


SERVE_HELP = """Serve verified, confined console sessions to an MCP host (Claude, Cursor, VS Code, ...).

\b
The model sees `send` (the library's governed tool: no restart, clamped waits, no
installs; every optional field nullable, so strict clients work), `console_open`
(a fresh console and its `console_id`), `console_close` and `console_list`; the
server's instructions plus the bridge's note; and two resources:
console://session/sandbox (the verified sandbox and limits) and
console://session/transcript (the session's own console so far). A client's
cancel interrupts the running cell. Both protocol eras are served (the 2025
initialize handshake and 2026-07-28). Nothing is started for `initialize` or a
listing: a console is claimed at `console_open` or at the first `send`; a
`send` without `console_id` in an MCP session (or over stdio) uses that
session's own console.

\b
--transport stdio (default): one client; closing stdin closes its consoles
(recordings finalized) and exits 0.
--transport http: Streamable HTTP at http://HOST:PORT/mcp. Every request needs
`Authorization: Bearer TOKEN`: --tokens FILE (one `TOKEN OWNER` per line, mode
0600, re-read on SIGHUP) gives each client its own identity (the console's owner
in the audit log, the unit of --max-per-client; its consoles and MCP sessions
are refused to others); else one token (--token-file, or a fresh one written to
a 0600 file whose path is printed). Browser origins other than localhost are
refused unless --allow-origin. `console_id` is also sent as the header
Mcp-Param-Console-Id by 2026-07-28 clients (x-mcp-header), so a load balancer
can pin a console to its replica (--replica NAME prefixes every console_id with
NAME. to route on); a header that disagrees with the argument is refused. Event
streams are resumable (Last-Event-ID).
SIGTERM or SIGINT (either transport, at any moment): running cells are
interrupted, every console is closed (recordings finalized), a call in flight
gets a tool error or the end of its stream, and serve exits 0 (the generated
token file removed).

\b
Time limits (both transports): --idle-timeout (no call and no running cell),
--max-lifetime (default 8 h over stdio, 1 h over HTTP), --max-cell-time (one
cell; interrupted, state kept). A console closed by a limit says which.

\b
There is no approval step at a server (no human is there): what the code may
write is governed by the sandbox profile alone (--profile, --writable-root).

\b
Examples:
  console-bridge serve
  console-bridge serve --profile workspace --workspace ./project
  console-bridge serve --transport http --port 8765 --max-sessions 4 --warm 1
  console-bridge serve --transport http --tokens clients.tokens --max-per-client 2
"""


@click.command("serve", help=SERVE_HELP)
@click.option("--transport", type=click.Choice(["stdio", "http"]), default="stdio", show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True, help="HTTP: the address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True, help="HTTP: 0 picks one.")
@click.option("--warm", type=click.IntRange(min=0), help="Consoles kept started and booted (default 1).")
@click.option("--max-sessions", type=click.IntRange(min=1), default=8, show_default=True, help="Live consoles.")
@click.option("--max-per-client", type=click.IntRange(min=1), help="HTTP: consoles per client identity.")
@click.option(
    "--idle-timeout",
    type=FiniteFloat(min=0, min_open=True),
    default=600.0,
    show_default=True,
    metavar="SECONDS",
    help="A console with no call and no running cell for this long is closed.",
)
@click.option(
    "--session-idle-timeout",
    type=OrNone(FiniteFloat(min=0, min_open=True)),
    default="180",
    show_default=True,
    metavar="SECONDS|none",
    help=(
        "HTTP: an MCP session's own console (sends without console_id) is closed after its session made no "
        "request this long; none: --idle-timeout alone."
    ),
)
@click.option(
    "--reclaim-idle",
    type=OrNone(FiniteFloat(min=0, min_open=True)),
    default="60",
    show_default=True,
    metavar="SECONDS|none",
    help=(
        "When every console is taken, one idle this long is closed for a new claim (a client that went away "
        "without closing does not hold it until --idle-timeout); none: never."
    ),
)
@click.option(
    "--max-lifetime",
    type=FiniteFloat(min=0, min_open=True),
    metavar="SECONDS",
    help="A console is closed this long after it opened (default 28800 over stdio, 3600 over HTTP).",
)
@click.option(
    "--max-cell-time",
    type=FiniteFloat(min=0, min_open=True),
    metavar="SECONDS",
    help="A cell running this long is interrupted (the console and its state are kept). Default: no bound.",
)
@click.option(
    "--acquire-timeout",
    type=FiniteFloat(min=0, min_open=True),
    default=1.0,
    show_default=True,
    metavar="SECONDS",
    help="HTTP: at capacity, a new MCP session waits this long for a slot, then gets 503.",
)
@click.option("--token-file", type=click.Path(dir_okay=False, path_type=Path), help="HTTP: read the bearer token here.")
@click.option(
    "--tokens",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="HTTP: one `TOKEN OWNER` per line (mode 0600): per-client identities; re-read on SIGHUP.",
)
@click.option(
    "--replica",
    metavar="NAME",
    help="HTTP: this server's name behind a load balancer; every console_id starts with NAME. (route on it).",
)
@click.option("--allow-origin", "allowed_origins", multiple=True, metavar="ORIGIN", help="HTTP: an allowed Origin.")
@click.option(
    "--allow-host",
    "allowed_hosts",
    multiple=True,
    metavar="NAME",
    help="HTTP: a Host name requests may carry besides loopback ones (a reverse proxy's; DNS rebinding protection).",
)
@click.option("--profile", default="read-only", show_default=True, metavar="NAME|FILE", help="Sandbox profile.")
@click.option(
    "--workspace",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=".",
    show_default=True,
    help="The sessions' working folder.",
)
@click.option("--writable-root", "writable_roots", multiple=True, metavar="DIR", help="A folder code may write.")
@click.option("--python", metavar="VENV", help="The venv the Python worker runs in.")
@click.option("--languages", default="python,sql", show_default=True, help="Comma-separated: python, sql, r.")
@click.option(
    "--poll-window",
    type=FiniteFloat(min=0.05, max=3600),
    default=30.0,
    show_default=True,
    metavar="SECONDS",
    help="Cap on any one send's wait.",
)
@click.option("--audit", type=click.Path(dir_okay=False), metavar="FILE", help="Append an audit log (JSON Lines).")
@click.option("--recordings-dir", type=click.Path(file_okay=False), metavar="DIR", help="Where recordings go.")
@click.option("--command", metavar="PATH", help="The mcp-console binary.")
@limit_options
@click.pass_context
def serve_command(ctx: click.Context, /, **options: Any) -> None:
    languages = tuple(lang.strip().lower() for lang in options["languages"].split(",") if lang.strip())
    console_options: dict[str, Any] = {
        "profile": options["profile"],
        "writable_roots": tuple(options["writable_roots"]),
        "read_roots": tuple(options["read_roots"]),
        "languages": languages,
        "poll_window": options["poll_window"],
        "policy": Policy(pin_schemas="on_change", audit=AuditLog(options["audit"]) if options["audit"] else None),
    }
    for key in ("python", "recordings_dir", "command"):
        if options[key] is not None:
            console_options[key] = options[key]
    try:
        limits = limits_from_options(options["profile"], options)
    except BridgeError as exc:
        _info(error_text(exc))
        ctx.exit(int(exit_code_for(exc)))
    if limits is not None:
        console_options["limits"] = limits
    if options["replica"] is not None and not _REPLICA.fullmatch(options["replica"]):
        fail(
            f"--replica {options['replica']!r}: use 1-32 letters, digits or '-', starting with a letter or digit",
            ExitCode.USAGE,
        )
    if options["transport"] == "stdio":
        for name in ("max_per_client", "token_file", "tokens", "replica"):
            if options[name] is not None:
                fail(f"--{name.replace('_', '-')} applies to --transport http only", ExitCode.USAGE)
    if options["tokens"] is not None and options["token_file"] is not None:
        fail("--tokens and --token-file exclude each other (put the one token in the --tokens file)", ExitCode.USAGE)
    config = ServeConfig(
        transport=options["transport"],
        host=options["host"],
        port=options["port"],
        warm=options["warm"],
        max_sessions=options["max_sessions"],
        max_per_client=options["max_per_client"],
        idle_timeout=options["idle_timeout"],
        reclaim_idle=None if options["reclaim_idle"] == NO_LIMIT else options["reclaim_idle"],
        session_idle_timeout=None if options["session_idle_timeout"] == NO_LIMIT else options["session_idle_timeout"],
        max_lifetime=options["max_lifetime"],
        max_cell_time=options["max_cell_time"],
        acquire_timeout=options["acquire_timeout"],
        token_file=options["token_file"],
        tokens=options["tokens"],
        replica=options["replica"],
        allowed_origins=tuple(options["allowed_origins"]),
        allowed_hosts=tuple(options["allowed_hosts"]),
        console_options=console_options,
        workspace=options["workspace"],
    )
    if config.warm is not None and config.warm > config.max_sessions:
        fail(f"--warm {config.warm} exceeds --max-sessions {config.max_sessions}", ExitCode.USAGE)
    sys.stdout.flush()
    ctx.exit(execute(config))
