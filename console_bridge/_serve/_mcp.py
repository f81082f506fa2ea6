"""The MCP face of ``console-bridge serve``: a low-level MCP ``Server`` over consoles held as handles.

The model sees four tools: ``send`` (the console's own governed tool as ``console.tools()``
builds it, made consistent and strict-safe by ``_contract``, plus ``console_id``),
``console_open``, ``console_close`` and ``console_list``; the server's instructions plus the
bridge's note; and two resources (the verified sandbox and the transcript of the session's own
console). What it reads is learned once at start from a probe console (``learn``), so listing
and ``initialize`` claim nothing; consoles are claimed on first use through ``Consoles``.
Which identity and MCP session a request belongs to is decided by ``resolve`` (stdio: the one
client; HTTP: the bearer token's identity and the ``Mcp-Session-Id``, none under 2026-07-28).
No console logic lives here: every call goes through the console's own handle, ``status()``,
``recording`` and ``settle()``.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import jsonschema
import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import MCP_PARAM_HEADER_PREFIX, decode_header_value

from console_bridge import AsyncConsole, BridgeError, Busy, ConnectionClosed, Owner, ToolResult, __version__
from console_bridge._confinement._deny import PROBE_MARK
from console_bridge._hostfs import open_file
from console_bridge._serve._consoles import Consoles, Held
from console_bridge._serve._contract import (
    CLOSE,
    CONSOLE_ID,
    CONSOLE_ID_HEADER,
    LIST,
    OPEN,
    Lifetimes,
    console_tools,
    strip_nulls,
)

__all__ = [
    "SANDBOX_URI",
    "TRANSCRIPT_URI",
    "Caller",
    "ServeOptions",
    "Template",
    "ToolCalls",
    "bridge_note",
    "build_server",
    "header_mismatch",
    "instructions_for",
    "learn",
    "to_call_result",
    "tool_calls",
]

SANDBOX_URI = "console://session/sandbox"
TRANSCRIPT_URI = "console://session/transcript"
#: The transcript of one console by its handle (``console_open``): the caller's own consoles only.
CONSOLE_TRANSCRIPT = "console://console/{console_id}/transcript"
_CONSOLE_TRANSCRIPT = re.compile(r"console://console/([^/]+)/transcript")


@dataclass(frozen=True, slots=True)
class Caller:
    """Who a request comes from: the authenticated identity, the MCP session whose own console a
    ``send`` without ``console_id`` uses (None where there is none: 2026-07-28 over HTTP), and the
    raw ``Mcp-Param-Console-Id`` header of the request (HTTP; None when it has none)."""

    identity: Owner
    session: str | None
    console_header: str | None = None


def header_mismatch(header: str | None, console_id: object) -> str | None:
    """Why a request's ``Mcp-Param-Console-Id`` header and its ``console_id`` argument disagree, or
    None. Under 2026-07-28 the SDK refuses a mismatch before dispatch (HTTP 400, HeaderMismatch);
    this holds the 2025 handshake era to the same rule, as a tool error. No header: nothing to check
    (clients of the 2025 era do not mirror arguments)."""
    if header is None:
        return None
    decoded = decode_header_value(header)
    given = console_id if isinstance(console_id, str) else ""
    if decoded is not None and decoded.strip() == given:
        return None
    shown = "a malformed =?base64?...?= value" if decoded is None else repr(decoded)
    return (
        f"the {MCP_PARAM_HEADER_PREFIX}{CONSOLE_ID_HEADER} header ({shown}) does not match the {CONSOLE_ID} "
        f"argument ({console_id!r}); send the same console_id in both, or leave the header out"
    )


Resolve = Callable[[ServerRequestContext[Any, Any]], Caller]


@dataclass(frozen=True, slots=True)
class ServeOptions:
    """Bounds of the MCP face (seconds and bytes, all named)."""

    progress_interval: float = 1.0  # a progress notification this often while a send runs (with a progressToken)
    settle_timeout: float = 10.0  # after a client cancel: interrupt the cell and wait this long for it to stop
    transcript_max_bytes: int = 4_000_000  # the transcript resource keeps this many bytes (the tail)
    turn_timeout: float = 120.0  # a send waits this long for the console's previous send to finish


def bridge_note(console: AsyncConsole) -> str:
    """What the bridge adds to the server's instructions (trusted text, from the host's own settings)."""
    status = console.status()
    sandbox = status.sandbox or {}
    writable = ", ".join(sandbox.get("writable", [])) or "nothing"
    return (
        "console-bridge: this server runs code in verified, confined mcp-console consoles "
        f"(profile {status.profile!r}; network: {sandbox.get('network', 'restricted')}; writable: {writable}). "
        f"`{OPEN}` gives a fresh console and its `{CONSOLE_ID}`; state persists between `send` calls that pass "
        f"it. Within an MCP session a `send` without `{CONSOLE_ID}` uses that session's own console (opened at "
        f"its first send). `{LIST}` shows your consoles, `{CLOSE}` ends one. There is no human approval at this "
        "server: what code may write is governed by the sandbox profile alone. Resources: "
        f"{SANDBOX_URI} (the verified sandbox and limits, JSON), {TRANSCRIPT_URI} (the transcript of this "
        f"session's own console so far) and {CONSOLE_TRANSCRIPT} (a console you opened). "
        "Cancelling a `send` interrupts the cell."
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


def _structured(text: str, data: dict[str, Any]) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], structured_content=data, is_error=False)


def _send_error(exc: BridgeError) -> str:
    """A console's error in the model's terms (the tool it has is `send`, not the library's methods)."""
    if isinstance(exc, Busy):
        return (
            "a cell is still running in this console; call send with no code to see its output, or with "
            'control "interrupt" to stop it (nothing was queued)'
        )
    if isinstance(exc, ConnectionClosed):
        return f"{exc.message.removeprefix('send: ')} (call {OPEN} for a fresh console)"
    return exc.message


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
    text = without_probe(data.decode("utf-8", errors="replace"))
    if start:
        text = f"[console-bridge: the first {start} bytes of the transcript are omitted]\n{text}"
    return text


_CALL_HEADING = re.compile(r"^## Call (\d+)\b", re.MULTILINE)
_HEADING = re.compile(r"^## ", re.MULTILINE)


def _section(text: str, start: int) -> int:
    following = _HEADING.search(text, start + 1)
    return following.start() if following else len(text)


def without_probe(text: str) -> str:
    """The transcript without the bridge's own confinement probe (its call and its result: the
    canary paths and the denied places it lists are the host's)."""
    for match in _CALL_HEADING.finditer(text):
        end = _section(text, match.start())
        if PROBE_MARK not in text[match.start() : end]:
            continue
        note = "[console-bridge: the confinement probe that ran before the first cell is not shown]\n\n"
        rest = text[end:]
        result = re.search(rf"^## Result for call {match.group(1)}\b", rest, re.MULTILINE)
        if result is not None:
            rest = rest[: result.start()] + rest[_section(rest, result.start()) :]
        return text[: match.start()] + note + rest
    return text


def sandbox_document(console: AsyncConsole) -> dict[str, Any]:
    """The verified sandbox as the model may read it: the advertised policy and the limits, not the
    list of host files that were found and denied (that would tell which exist)."""
    status = console.status()
    return {
        "sandbox": status.sandbox,
        "profile": status.profile,
        "limits": status.limits,
        "workspace": str(status.workspace),
        "languages": list(status.languages),
        "dependencies": status.dependencies,
        "poll_window": status.poll_window,
        "mcp_console": status.version,
        "console_bridge": __version__,
    }


@dataclass(frozen=True, slots=True)
class Template:
    """What every client reads, learned once at start from a probe console: the tools, the
    validation schema of ``send``, the instructions and the sandbox document."""

    tools: list[types.Tool]
    validation: dict[str, Any]
    instructions: str
    sandbox: dict[str, Any]
    languages: tuple[str, ...]

    @property
    def send(self) -> types.Tool:
        return self.tools[0]


def learn(console: AsyncConsole, lifetimes: Lifetimes) -> Template:
    """The template from a started console (its ``tools()``, unchanged, and its status)."""
    [handle] = console.tools()
    status = console.status()
    tools, validation = console_tools(
        handle.name,
        handle.description,
        handle.input_schema,
        languages=status.languages,
        lifetimes=lifetimes,
    )
    return Template(
        tools=tools,
        validation=validation,
        instructions=instructions_for(console),
        sandbox=sandbox_document(console),
        languages=status.languages,
    )


#: One tool call as serve answers it, whatever carried it: ``(caller, tool name, arguments, the
#: request's SDK context when the client asked for progress notifications, else None)``.
ToolCalls = Callable[
    [Caller, str, dict[str, Any], "ServerRequestContext[Any, Any] | None"], Awaitable[types.CallToolResult]
]


def tool_calls(consoles: Consoles, template: Template, options: ServeOptions | None = None) -> ToolCalls:
    """The tools' behaviour, apart from the JSON-RPC layer that carries them: the MCP SDK's server
    (``build_server``) and the hand-written fast path for ``send`` (``_fast``) both call this,
    so both keep the same checks, console binding, audit (the console's own tool) and error shapes."""
    opts = options or ServeOptions()
    validator = jsonschema.Draft202012Validator(template.validation)
    lifetimes = consoles.lifetimes
    send_name = template.send.name

    async def call_tool(
        caller: Caller, name: str, arguments: dict[str, Any], progress: ServerRequestContext[Any, Any] | None
    ) -> types.CallToolResult:
        if name in (send_name, CLOSE):
            mismatch = header_mismatch(caller.console_header, arguments.get(CONSOLE_ID))
            if mismatch is not None:
                return _tool_error(mismatch)
        try:
            if name == send_name:
                return await send(progress, caller, arguments)
            if name == OPEN:
                if arguments:
                    return _tool_error(f"{OPEN} takes no arguments; got {', '.join(sorted(arguments))}")
                held = await consoles.open(caller.identity)
                return _structured(
                    f"Opened console {held.console_id}. Pass console_id={held.console_id!r} to {send_name}. "
                    f"It is {lifetimes.describe()}.",
                    {
                        CONSOLE_ID: held.console_id,
                        "idle_timeout_s": lifetimes.idle_timeout,
                        "max_lifetime_s": lifetimes.max_lifetime,
                        "max_cell_time_s": lifetimes.max_cell_time,
                        "languages": list(template.languages),
                    },
                )
            if name == CLOSE:
                console_id = arguments.get(CONSOLE_ID)
                if not isinstance(console_id, str) or set(arguments) != {CONSOLE_ID}:
                    return _tool_error(f"{CLOSE} takes one argument, console_id (a string from {OPEN})")
                await consoles.close(caller.identity, console_id)
                return _structured(f"Closed console {console_id}.", {"closed": console_id})
            if name == LIST:
                listed = consoles.listing(caller.identity)
                lines = [f"{c[CONSOLE_ID]}: {c['state']}, {c['age_s']:g} s old" for c in listed] or ["no consoles"]
                return _structured("\n".join(lines), {"consoles": listed})
        except BridgeError as exc:
            return _tool_error(exc.message)
        offered = ", ".join(t.name for t in template.tools)
        raise MCPError(types.INVALID_PARAMS, f"unknown tool {name!r}; this server offers {offered}")

    async def send(
        ctx: ServerRequestContext[Any, Any] | None, caller: Caller, arguments: dict[str, Any]
    ) -> types.CallToolResult:
        problems = sorted(validator.iter_errors(arguments), key=lambda e: list(e.path))
        if problems:
            first_problem = problems[0]
            where = "/".join(str(p) for p in first_problem.path) or "arguments"
            return _tool_error(f"invalid arguments for {send_name} ({where}): {first_problem.message[:500]}")
        given = strip_nulls(arguments)
        held = await consoles.resolve(caller.identity, given.pop(CONSOLE_ID, None), caller.session)
        with anyio.move_on_after(opts.turn_timeout) as waited:
            await held.turn.acquire()
        if waited.cancelled_caught:
            return _tool_error(
                f"another send has been running in this console for over {opts.turn_timeout:g} s; "
                'poll with an empty send or stop it with control: "interrupt"'
            )
        try:
            if consoles.overdue(held):
                await consoles.stop_cell(held)
            if held.notice is not None:
                notice, held.notice = held.notice, None
                return _tool_error(notice)
            return await _run_send(ctx, held, given)
        finally:
            held.turn.release()

    async def _run_send(
        ctx: ServerRequestContext[Any, Any] | None, held: Held, given: dict[str, Any]
    ) -> types.CallToolResult:
        if any(lang in given for lang in ("python", "r", "sql")):
            consoles.observed(held, running=True)  # the cell's time counts from its submission
        asked = given.get("timeout_ms")
        cap = int(held.console.poll_window * 1000)
        window = consoles.window_ms(held)
        if window is not None:
            given["timeout_ms"] = min(window, given.get("timeout_ms", window))
        async with consoles.using(held):
            try:
                [model_send] = held.console.tools()
                if ctx is None:
                    result = await model_send(given)
                else:
                    result = await _with_progress(ctx, model_send(given), opts.progress_interval)
            except BridgeError as exc:
                return _tool_error(_send_error(exc))
            except anyio.get_cancelled_exc_class():
                # The client cancelled (notifications/cancelled) or the server is stopping. mcp-console
                # ignores MCP cancellation, so interrupt the cell ourselves, within bounds.
                with anyio.CancelScope(shield=True), contextlib.suppress(BridgeError):
                    await held.console.settle(opts.settle_timeout)
                    consoles.observed(held, running=False)
                raise
        consoles.observed(held, running=bool(getattr(result, "running", False)))
        answer = to_call_result(result)
        if isinstance(asked, int) and not isinstance(asked, bool) and asked > cap:
            clamp = (
                f"[console-bridge: timeout_ms={asked} is over this server's maximum of {cap}; this call waited "
                f"{cap} ms at most]"
            )
            answer.content.append(types.TextContent(type="text", text=clamp))
        return answer

    return call_tool


def build_server(
    consoles: Consoles,
    template: Template,
    resolve: Resolve,
    options: ServeOptions | None = None,
    calls: ToolCalls | None = None,
) -> Server[Any]:
    """The MCP server: every client reads ``template``; each call is served by the console its
    caller names (``console_id``) or its MCP session's own, claimed on first use (``calls``, made
    here from the same arguments when not given)."""
    opts = options or ServeOptions()
    call = calls if calls is not None else tool_calls(consoles, template, opts)

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=list(template.tools))

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        progress = ctx if _progress_token(ctx) is not None else None
        return await call(resolve(ctx), params.name, dict(params.arguments or {}), progress)

    async def list_resources(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(
            resources=[
                types.Resource(
                    uri=SANDBOX_URI,
                    name="sandbox",
                    description="The verified sandbox of the consoles here: advertised policy and limits (JSON).",
                    mime_type="application/json",
                ),
                types.Resource(
                    uri=TRANSCRIPT_URI,
                    name="transcript",
                    description="The transcript of this MCP session's own console so far: cells and output (Markdown).",
                    mime_type="text/markdown",
                ),
            ]
        )

    async def list_resource_templates(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(
            resource_templates=[
                types.ResourceTemplate(
                    uri_template=CONSOLE_TRANSCRIPT,
                    name="console transcript",
                    description="The transcript of a console you opened (console_open): cells and output (Markdown).",
                    mime_type="text/markdown",
                )
            ]
        )

    async def list_prompts(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        return types.ListPromptsResult(prompts=[])

    async def get_prompt(
        ctx: ServerRequestContext[Any, Any], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        # prompts is advertised (an empty list): a get names an unknown prompt, -32602 (it answered -32601)
        raise MCPError(
            types.INVALID_PARAMS, f"unknown prompt {params.name!r}; this server offers none", data={"name": params.name}
        )

    async def read_resource(
        ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        by_handle = _CONSOLE_TRANSCRIPT.fullmatch(uri)
        if uri not in (SANDBOX_URI, TRANSCRIPT_URI) and by_handle is None:
            raise MCPError(  # SEP-2164: not found is -32602 with the URI in data
                types.INVALID_PARAMS,
                f"unknown resource {uri!r}; offered: {SANDBOX_URI}, {TRANSCRIPT_URI}, {CONSOLE_TRANSCRIPT}",
                data={"uri": uri},
            )
        if uri == SANDBOX_URI:
            text, mime = json.dumps(template.sandbox, indent=2), "application/json"
        else:
            caller = resolve(ctx)
            mime = "text/markdown"
            if by_handle is not None:
                try:  # the caller's own consoles only; another identity's is unknown (and audited)
                    held: Held | None = consoles.get(caller.identity, by_handle.group(1))
                except BridgeError as exc:
                    raise MCPError(types.INVALID_PARAMS, exc.message, data={"uri": uri}) from None
            else:
                held = consoles.session_console(caller.identity, caller.session)
            if held is None:
                text = (
                    "(this MCP session has no console of its own yet: no send without console_id ran here; for a "
                    f"console from {OPEN}, read {CONSOLE_TRANSCRIPT})\n"
                )
            else:
                try:
                    text = await anyio.to_thread.run_sync(read_transcript, held.console, opts.transcript_max_bytes)
                except (BridgeError, OSError) as exc:
                    message = exc.message if isinstance(exc, BridgeError) else str(exc)
                    raise MCPError(types.INTERNAL_ERROR, f"could not read {uri}: {message}") from None
        return types.ReadResourceResult(contents=[types.TextResourceContents(uri=uri, text=text, mime_type=mime)])

    server: Server[Any] = Server(
        "console-bridge",
        version=__version__,
        instructions=template.instructions,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_resource_templates,
        on_read_resource=read_resource,
        on_list_prompts=list_prompts,
        on_get_prompt=get_prompt,
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
