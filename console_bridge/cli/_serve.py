"""``console-bridge serve``: verified, governed console sessions for any MCP host.

A face: a session manager hands out the consoles, each console's own ``tools()``
gives the model's ``send`` tool; the MCP server (``_serve_mcp``) and the HTTP gate
(``_serve_http``) only carry them over the wire.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import shlex
import signal
import socket
import stat
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import click

from console_bridge._confinement._limits import Limits
from console_bridge._console._profiles import load_profile
from console_bridge._console._session import AsyncConsole
from console_bridge._console._workspace import Evidence, vet_evidence
from console_bridge._errors import BridgeError
from console_bridge._governance._audit import AuditLog
from console_bridge._governance._policy import Policy
from console_bridge._identity import Owner
from console_bridge._manager._async import AsyncSessionManager
from console_bridge.cli._common import PREFIX, ByteSize, ExitCode, error_text, exit_code_for, fail
from console_bridge.cli._output import host_line
from console_bridge.cli._serve_http import LOOPBACK_HOSTS, Gate, GateOptions, make_sdk
from console_bridge.cli._serve_mcp import ServeOptions, build_server, instructions_for
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
    acquire_timeout: float = 1.0
    token_file: Path | None = None
    allowed_origins: tuple[str, ...] = ()
    console_options: dict[str, Any] = field(default_factory=dict)
    workspace: Path = Path(".")
    serve_options: ServeOptions = field(default_factory=ServeOptions)


def _info(message: str) -> None:
    click.echo(f"{PREFIX}: {host_line(message)}", err=True)


# ------------------------------------------------------------------ stdio
async def serve_stdio(config: ServeConfig) -> None:
    """One client, one session: claimed at launch from a manager with warm=1, closed (recording
    finalized) when the client closes stdin."""
    from mcp.server.stdio import stdio_server

    manager = AsyncSessionManager(
        config.workspace,
        warm=1,
        max_sessions=1,
        idle_timeout=None,
        max_lifetime=None,
        **config.console_options,
    )
    async with manager:
        console = await manager.open(owner=Owner("mcp-stdio"))

        async def bind(_ctx: Any) -> AsyncConsole:
            return console

        server = build_server(bind, config.serve_options, instructions=instructions_for(console))
        async with anyio.create_task_group() as tg:
            tg.start_soon(_cancel_on_signals, tg.cancel_scope)
            wire = stdio_pipes() if pipes_on_stdio() else stdio_server()
            async with wire as (read_stream, write_stream):
                await server.run(read_stream, write_stream, server.create_initialization_options())
            tg.cancel_scope.cancel()
        await manager.close(manager.id_of(console))


async def _cancel_on_signals(scope: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async for _ in signals:
            scope.cancel()
            return


# ------------------------------------------------------------------ HTTP
def vet_token_file(config: ServeConfig) -> None:
    """Refuse a --token-file others can read, or one inside the workspace or a writable root (a cell could
    read it, or rewrite it to a token of its choosing)."""
    assert config.token_file is not None
    path = config.token_file.expanduser().absolute()
    options = config.console_options
    try:
        vet_evidence(
            [Evidence("bearer token file", path)],
            config.workspace,
            load_profile(options.get("profile", "read-only")),
            [Path(root) for root in options.get("writable_roots", ())],
        )
    except BridgeError as exc:
        fail(f"--token-file: {error_text(exc)}", ExitCode.LAUNCH)
    try:
        info = path.stat()
    except OSError as exc:
        fail(f"cannot read --token-file {str(path)!r}: {exc.strerror or exc}", ExitCode.USAGE)
    if info.st_uid != os.geteuid():
        fail(
            f"--token-file {str(path)!r} belongs to uid {info.st_uid}, not to you: its owner can read and change "
            "it. Use a token file of your own, mode 0600.",
            ExitCode.USAGE,
        )
    if info.st_mode & 0o077:
        fail(
            f"--token-file {str(path)!r} can be read or changed by others (mode {stat.S_IMODE(info.st_mode):04o}); "
            f"run `chmod 600 {shlex.quote(str(path))}` and start again",
            ExitCode.USAGE,
        )


@contextlib.contextmanager
def _token(config: ServeConfig) -> Iterator[str]:
    if config.token_file is not None:
        vet_token_file(config)
        try:
            token = config.token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            fail(f"cannot read --token-file {str(config.token_file)!r}: {exc.strerror or exc}", ExitCode.USAGE)
        if len(token) < 16:
            fail(f"the token in {str(config.token_file)!r} is shorter than 16 characters", ExitCode.USAGE)
        yield token
        return
    token = secrets.token_urlsafe(32)
    fd, name = tempfile.mkstemp(prefix="console-bridge-serve-", suffix=".token")  # 0600, fresh name
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(token + "\n")
        _info(f"bearer token written to {name} (mode 0600; removed when the server stops)")
        yield token
    finally:
        with contextlib.suppress(OSError):
            os.unlink(name)


async def serve_http(config: ServeConfig, token: str, sock: socket.socket) -> None:
    import uvicorn

    manager = AsyncSessionManager(
        config.workspace,
        warm=config.warm if config.warm is not None else 1,
        max_sessions=config.max_sessions,
        max_per_owner=config.max_per_client,
        idle_timeout=config.idle_timeout,
        acquire_timeout=config.acquire_timeout,
        **config.console_options,
    )
    gate = Gate(manager=manager, options=GateOptions(token=token, allowed_origins=config.allowed_origins))
    server = build_server(gate.bind, config.serve_options)
    gate.server = server
    gate.sdk = make_sdk(
        server,
        idle_timeout=config.idle_timeout,
        max_sessions=4 * config.max_sessions,
        max_body_bytes=gate.options.max_body_bytes,
    )

    class _Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield  # signals are ours: a SIGTERM is a clean stop and exit 0, not re-raised

    uv_config = uvicorn.Config(gate, log_level="warning", lifespan="on", timeout_graceful_shutdown=5)
    uv_server = _Server(uv_config)

    async def stop_on_signals() -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
            async for _ in signals:
                uv_server.should_exit = True
                return

    async with manager:

        async def sweep() -> None:
            while True:
                await anyio.sleep(1.0)
                await gate.sweep()

        async with anyio.create_task_group() as tg:
            tg.start_soon(sweep)
            tg.start_soon(stop_on_signals)
            await uv_server.serve(sockets=[sock])
            tg.cancel_scope.cancel()


def _bind_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
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
        with _token(config) as token:
            _info(f"serving MCP (Streamable HTTP) at http://{shown}:{port}/mcp")
            anyio.run(serve_http, config, token, sock)
        return 0
    except BridgeError as exc:
        _info(error_text(exc))
        return int(exit_code_for(exc))
    except KeyboardInterrupt:
        return 0


SERVE_HELP = """Serve verified, confined console sessions to an MCP host (Claude, Cursor, VS Code, ...).

\b
The model sees one tool, `send`, exactly as the library gives it (no restart,
clamped waits, no installs), the server's instructions plus the bridge's note,
and two resources: console://session/sandbox (the verified sandbox, limits and
deny list) and console://session/transcript (the transcript so far). A client's
cancel interrupts the running cell.

\b
--transport stdio (default): one client, one session, started at launch;
closing stdin closes the session (recording finalized) and exits 0.
--transport http: Streamable HTTP at http://HOST:PORT/mcp, one session per MCP
session (DELETE closes it). Every request needs `Authorization: Bearer TOKEN`
(--token-file, or a fresh token written to a 0600 file whose path is printed);
browser origins other than localhost are refused unless --allow-origin.

\b
There is no approval step at a server (no human is there): what the code may
write is governed by the sandbox profile alone (--profile, --writable-root).

\b
Examples:
  console-bridge serve
  console-bridge serve --profile workspace --workspace ./project
  console-bridge serve --transport http --port 8765 --max-sessions 4 --warm 1
"""


def _limits(profile: str, options: dict[str, Any]) -> Limits | None:
    given = {
        "memory": options["memory"],
        "processes": options["processes"],
        "cpu": options["cpu"],
        "tmpdir": options["tmpdir_limit"],
        "recording": options["recording_limit"],
    }
    given = {k: v for k, v in given.items() if v is not None}
    if not given and not options["best_effort"]:
        return None
    base = load_profile(profile).limits
    if options["best_effort"]:
        given["enforce"] = "best_effort"
    return dataclasses.replace(base, **given)


@click.command("serve", help=SERVE_HELP)
@click.option("--transport", type=click.Choice(["stdio", "http"]), default="stdio", show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True, help="HTTP: the address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True, help="HTTP: 0 picks one.")
@click.option("--warm", type=click.IntRange(min=0), help="HTTP: sessions kept started and booted (default 1).")
@click.option("--max-sessions", type=click.IntRange(min=1), default=8, show_default=True, help="HTTP: live sessions.")
@click.option("--max-per-client", type=click.IntRange(min=1), help="HTTP: sessions per client address.")
@click.option(
    "--idle-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=600.0,
    show_default=True,
    metavar="SECONDS",
    help="HTTP: a session idle this long is closed.",
)
@click.option(
    "--acquire-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    metavar="SECONDS",
    help="HTTP: at capacity, a new MCP session waits this long for a slot, then gets 503.",
)
@click.option("--token-file", type=click.Path(dir_okay=False, path_type=Path), help="HTTP: read the bearer token here.")
@click.option("--allow-origin", "allowed_origins", multiple=True, metavar="ORIGIN", help="HTTP: an allowed Origin.")
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
    type=click.FloatRange(min=0.05, max=3600),
    default=30.0,
    show_default=True,
    metavar="SECONDS",
    help="Cap on any one send's wait.",
)
@click.option("--memory", type=ByteSize(), help="Memory limit of a session's tree (e.g. 2G).")
@click.option("--processes", type=click.IntRange(min=1), help="Process/thread limit of a session's tree.")
@click.option("--cpu", type=click.FloatRange(min=0, min_open=True), help="CPUs' worth of time, e.g. 1.5.")
@click.option("--tmpdir-limit", type=ByteSize(), help="Size of a session's private TMPDIR.")
@click.option("--recording-limit", type=ByteSize(), help="Raw output kept per recording file.")
@click.option("--best-effort", is_flag=True, help="Start even where a limit cannot be enforced (and report it).")
@click.option("--audit", type=click.Path(dir_okay=False), metavar="FILE", help="Append an audit log (JSON Lines).")
@click.option("--recordings-dir", type=click.Path(file_okay=False), metavar="DIR", help="Where recordings go.")
@click.option("--command", metavar="PATH", help="The mcp-console binary.")
@click.pass_context
def serve_command(ctx: click.Context, /, **options: Any) -> None:
    languages = tuple(lang.strip().lower() for lang in options["languages"].split(",") if lang.strip())
    console_options: dict[str, Any] = {
        "profile": options["profile"],
        "writable_roots": tuple(options["writable_roots"]),
        "languages": languages,
        "poll_window": options["poll_window"],
        "policy": Policy(pin_schemas="on_change", audit=AuditLog(options["audit"]) if options["audit"] else None),
    }
    for key in ("python", "recordings_dir", "command"):
        if options[key] is not None:
            console_options[key] = options[key]
    try:
        limits = _limits(options["profile"], options)
    except BridgeError as exc:
        _info(error_text(exc))
        ctx.exit(int(exit_code_for(exc)))
    if limits is not None:
        console_options["limits"] = limits
    if options["transport"] == "stdio":
        for name in ("warm", "max_per_client", "token_file"):
            if options[name] is not None:
                fail(f"--{name.replace('_', '-')} applies to --transport http only", ExitCode.USAGE)
    config = ServeConfig(
        transport=options["transport"],
        host=options["host"],
        port=options["port"],
        warm=options["warm"],
        max_sessions=options["max_sessions"],
        max_per_client=options["max_per_client"],
        idle_timeout=options["idle_timeout"],
        acquire_timeout=options["acquire_timeout"],
        token_file=options["token_file"],
        allowed_origins=tuple(options["allowed_origins"]),
        console_options=console_options,
        workspace=options["workspace"],
    )
    if config.warm is not None and config.warm > config.max_sessions:
        fail(f"--warm {config.warm} exceeds --max-sessions {config.max_sessions}", ExitCode.USAGE)
    sys.stdout.flush()
    ctx.exit(execute(config))
