"""The MCP face of ``console-bridge serve``: a low-level MCP ``Server`` over consoles.

It offers exactly what a console gives a model: the governed ``send`` tool as
``console.tools()`` builds it (name, description, input schema), the server's own
instructions plus the bridge's note, and two resources (the verified sandbox and the
transcript so far). Which console serves a request is decided by ``bind`` (stdio: the
one session; HTTP: the console of the request's MCP session). No console logic lives
here: every call goes through the console's own handle, ``status()``, ``recording``
and ``settle()``.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import time
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import jsonschema
import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPError

from console_bridge import __version__
from console_bridge._console._session import AsyncConsole
from console_bridge._errors import BridgeError, ConnectionClosed
from console_bridge._hostfs import open_file
from console_bridge._results import ToolResult

__all__ = [
    "SANDBOX_URI",
    "TRANSCRIPT_URI",
    "ServeOptions",
    "bridge_note",
    "build_server",
    "instructions_for",
    "to_call_result",
]

SANDBOX_URI = "console://session/sandbox"
TRANSCRIPT_URI = "console://session/transcript"

Bind = Callable[[ServerRequestContext[Any, Any]], Awaitable[AsyncConsole]]


@dataclass(frozen=True, slots=True)
class ServeOptions:
    """Bounds of the MCP face (seconds and bytes, all named)."""

    progress_interval: float = 1.0  # a progress notification this often while a send runs (with a progressToken)
    settle_timeout: float = 10.0  # after a client cancel: interrupt the cell and wait this long for it to stop
    transcript_max_bytes: int = 4_000_000  # the transcript resource keeps this many bytes (the tail)
    turn_timeout: float = 120.0  # a send waits this long for the session's previous send to finish


def bridge_note(console: AsyncConsole) -> str:
    """What the bridge adds to the server's instructions (trusted text, from the host's own settings)."""
    status = console.status()
    sandbox = status.sandbox or {}
    writable = ", ".join(sandbox.get("writable", [])) or "nothing"
    return (
        "console-bridge: this server runs code in a verified, confined mcp-console session "
        f"(profile {status.profile!r}; network: {sandbox.get('network', 'restricted')}; writable: {writable}). "
        "State persists between `send` calls within this MCP session; every MCP session has its own fresh "
        "session. There is no human approval at this server: what code may write is governed by the sandbox "
        f"profile alone. Resources: {SANDBOX_URI} (the verified sandbox, limits and deny list, JSON) and "
        f"{TRANSCRIPT_URI} (the transcript of this session so far). Cancelling a `send` interrupts the cell."
    )


def instructions_for(console: AsyncConsole) -> str:
    conn = console.status().connection
    server = conn.instructions if conn is not None and conn.instructions else ""
    note = bridge_note(console)
    return f"{server.rstrip()}\n\n{note}" if server else note


def to_call_result(result: ToolResult) -> types.CallToolResult:
    """A console result as the model sees it: the text (notices kept), then every image."""
    content: list[types.ContentBlock] = []
    if result.text or not result.images:
        content.append(types.TextContent(text=result.text))
    for image in result.images:
        content.append(types.ImageContent(data=base64.b64encode(image.data).decode("ascii"), mime_type=image.mime_type))
    return types.CallToolResult(content=content, is_error=result.is_error)


def _tool_error(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=message)], is_error=True)


def _validation_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The advertised schema, except ``timeout_ms``'s maximum: the console clamps a longer wait
    (mcp-console's own description tells models to ask for 300000 ms), it does not refuse it."""
    props = dict(schema.get("properties") or {})
    if isinstance(props.get("timeout_ms"), dict):
        props["timeout_ms"] = {k: v for k, v in props["timeout_ms"].items() if k != "maximum"}
    return {**schema, "properties": props}


def _progress_token(ctx: ServerRequestContext[Any, Any]) -> object:
    meta: Any = ctx.meta or {}
    if not isinstance(meta, dict):
        return None
    return meta.get("progress_token", meta.get("progressToken"))


def read_transcript(console: AsyncConsole, max_bytes: int) -> str:
    """The transcript so far (its tail past ``max_bytes``), never through a symlink."""
    recording = console.recording
    transcript = recording.transcript if recording is not None else None
    if recording is None or transcript is None:
        return "(no cell has run in this session yet)\n"
    fd = open_file(recording.path, transcript.name)
    try:
        size = os.fstat(fd).st_size
        start = max(0, size - max_bytes)
        data = os.pread(fd, min(size, max_bytes), start)
    finally:
        os.close(fd)
    text = data.decode("utf-8", errors="replace")
    if start:
        text = f"[console-bridge: the first {start} bytes of the transcript are omitted]\n{text}"
    return text


def sandbox_document(console: AsyncConsole) -> dict[str, Any]:
    status = console.status()
    return {
        "sandbox": status.sandbox,
        "profile": status.profile,
        "limits": status.limits,
        "deny_read": list(status.deny_read),
        "workspace": str(status.workspace),
        "languages": list(status.languages),
        "dependencies": status.dependencies,
        "poll_window": status.poll_window,
        "mcp_console": status.version,
        "console_bridge": __version__,
    }


def build_server(bind: Bind, options: ServeOptions | None = None, *, instructions: str | None = None) -> Server[Any]:
    """The MCP server; each request is served by the console ``bind`` gives for it, and what the
    model sees (the ``send`` tool) is that console's own ``tools()``. ``instructions`` can be set
    later (``server.instructions = instructions_for(console)``), before the first client initializes."""
    opts = options or ServeOptions()
    validators: dict[str, jsonschema.Draft202012Validator] = {}
    # One send at a time per console (mcp-console refuses a second): a call waits its turn, and a
    # cancelled call keeps the turn until its cell has stopped, so the next call finds it idle.
    turns: weakref.WeakKeyDictionary[AsyncConsole, anyio.Lock] = weakref.WeakKeyDictionary()

    def model_tool(console: AsyncConsole) -> tuple[types.Tool, jsonschema.Draft202012Validator, Any]:
        [handle] = console.tools()
        key = json.dumps(handle.input_schema, sort_keys=True)
        validator = validators.get(key)
        if validator is None:
            validator = validators[key] = jsonschema.Draft202012Validator(_validation_schema(handle.input_schema))
        tool = types.Tool(name=handle.name, description=handle.description, input_schema=handle.input_schema)
        return tool, validator, handle

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        try:
            tool, _, _ = model_tool(await bind(ctx))
        except BridgeError as exc:
            raise MCPError(types.INTERNAL_ERROR, exc.message) from None
        return types.ListToolsResult(tools=[tool])

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        try:
            console = await bind(ctx)
            tool, validator, model_send = model_tool(console)
        except BridgeError as exc:
            return _tool_error(exc.message)
        if params.name != tool.name:
            raise MCPError(types.INVALID_PARAMS, f"unknown tool {params.name!r}; this server offers only {tool.name!r}")
        arguments = params.arguments or {}
        problems = sorted(validator.iter_errors(arguments), key=lambda e: list(e.path))
        if problems:
            first_problem = problems[0]
            where = "/".join(str(p) for p in first_problem.path) or "arguments"
            return _tool_error(f"invalid arguments for send ({where}): {first_problem.message[:500]}")
        token = _progress_token(ctx)
        lock = turns.setdefault(console, anyio.Lock())
        with anyio.move_on_after(opts.turn_timeout) as waited:
            await lock.acquire()
        if waited.cancelled_caught:
            return _tool_error(
                f"another send has been running in this session for over {opts.turn_timeout:g} s; "
                'poll with an empty send or stop it with control: "interrupt"'
            )
        try:
            if token is None:
                result = await model_send(arguments)
            else:
                result = await _with_progress(ctx, model_send(arguments), opts.progress_interval)
        except ConnectionClosed as exc:
            return _tool_error(f"{exc.message} (start a new MCP session for a fresh console)")
        except BridgeError as exc:
            return _tool_error(exc.message)
        except anyio.get_cancelled_exc_class():
            # The client cancelled (notifications/cancelled) or the server is stopping. mcp-console
            # ignores MCP cancellation, so interrupt the cell ourselves, within bounds.
            with anyio.CancelScope(shield=True), contextlib.suppress(BridgeError):
                await console.settle(opts.settle_timeout)
            raise
        finally:
            lock.release()
        return to_call_result(result)

    async def list_resources(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(
            resources=[
                types.Resource(
                    uri=SANDBOX_URI,
                    name="sandbox",
                    description="The verified sandbox of this session: advertised policy, limits, deny list (JSON).",
                    mime_type="application/json",
                ),
                types.Resource(
                    uri=TRANSCRIPT_URI,
                    name="transcript",
                    description="The transcript of this session so far: every cell and its output (Markdown).",
                    mime_type="text/markdown",
                ),
            ]
        )

    async def read_resource(
        ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        if uri not in (SANDBOX_URI, TRANSCRIPT_URI):
            raise MCPError(types.INVALID_PARAMS, f"unknown resource {uri!r}; offered: {SANDBOX_URI}, {TRANSCRIPT_URI}")
        try:
            console = await bind(ctx)
            if uri == SANDBOX_URI:
                text = json.dumps(sandbox_document(console), indent=2)
                mime = "application/json"
            else:
                text = await anyio.to_thread.run_sync(read_transcript, console, opts.transcript_max_bytes)
                mime = "text/markdown"
        except (BridgeError, OSError) as exc:
            message = exc.message if isinstance(exc, BridgeError) else str(exc)
            raise MCPError(types.INTERNAL_ERROR, f"could not read {uri}: {message}") from None
        return types.ReadResourceResult(contents=[types.TextResourceContents(uri=uri, text=text, mime_type=mime)])

    server: Server[Any] = Server(
        "console-bridge",
        version=__version__,
        instructions=instructions,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_read_resource=read_resource,
    )
    # The SDK's default OpenTelemetry span per message does nothing here (no exporter is ever set up)
    # but costs every call; the audit log is the record of what ran.
    server.middleware = []
    return server


async def _with_progress(
    ctx: ServerRequestContext[Any, Any], call: Awaitable[ToolResult], interval: float
) -> ToolResult:
    """Await ``call``, sending a progress notification (seconds elapsed) every ``interval`` seconds."""
    started = time.monotonic()
    outcome: list[ToolResult] = []
    failure: list[Exception] = []

    async def run(scope: anyio.CancelScope) -> None:
        try:
            outcome.append(await call)
        except Exception as exc:  # re-raised below, outside the task group (no exception group)
            failure.append(exc)
        finally:
            scope.cancel()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run, tg.cancel_scope)
        while True:
            await anyio.sleep(interval)
            elapsed = time.monotonic() - started
            with contextlib.suppress(Exception):
                await ctx.session.report_progress(elapsed, None, f"cell running for {elapsed:.0f} s")
    if failure:
        raise failure[0]
    return outcome[0]
