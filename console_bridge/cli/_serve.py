"""``console-bridge serve``: the command's options, checked, made into a ``ServeConfig`` for the
server (``console_bridge/_serve``); its errors said in one line with the command's exit status.
"""

from __future__ import annotations

import re
import socket
import sys
from pathlib import Path
from typing import Any

import anyio
import click

from console_bridge._console._session import AsyncConsole
from console_bridge._errors import BridgeError
from console_bridge._governance._audit import AuditLog
from console_bridge._governance._policy import Policy
from console_bridge._serve._http import LOOPBACK_HOSTS
from console_bridge._serve._server import ServeConfig, held_signals, serve_http, serve_stdio
from console_bridge.cli._common import PREFIX, ExitCode, FiniteFloat, error_text, exit_code_for, fail
from console_bridge.cli._limit_options import NO_LIMIT, OrNone, limit_options, limits_from_options
from console_bridge.cli._output import host_line
from console_bridge.cli._serve_tokens import serving_identities

__all__ = ["serve_command"]


#: A --replica name: it prefixes console ids (a token_urlsafe never contains the "." that ends it).
_REPLICA = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,31}")


def _info(message: str) -> None:
    click.echo(f"{PREFIX}: {host_line(message)}", err=True)


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
    with held_signals():
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
        info=_info,
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
