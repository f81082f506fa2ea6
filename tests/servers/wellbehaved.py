"""A correct MCP server on the SDK's lowlevel `Server`, over stdio (default) or Streamable HTTP.

Tools are listed 3 per page, resources and prompts 2 per page (clients must follow nextCursor).
See README.md in this folder for the full catalogue.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import signal
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

import anyio
import mcp_types as types
import uvicorn
from _rawrpc import log_line, log_method, png_bytes
from mcp.server import Server, ServerRequestContext
from mcp.server.context import CallNext, HandlerResult
from mcp.server.runner import serve_loop
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp_types import Tool
from starlette.requests import Request
from starlette.responses import RedirectResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

T = TypeVar("T")
Ctx = ServerRequestContext[Any]
PageParams = types.PaginatedRequestParams | None

HOST = "127.0.0.1"
TOOL_PAGE, RESOURCE_PAGE, PROMPT_PAGE = 3, 2, 2
ALPHABET = "abcdefghijklmnopqrstuvwxyz"
LOGGED_HEADERS = (b"x-api-key", b"authorization")

Hints = types.ToolAnnotations | None
Schema = dict[str, Any]
READ_ONLY = types.ToolAnnotations(read_only_hint=True)
SUM_SCHEMA: Schema = {"type": "object", "properties": {"sum": {"type": "integer"}}, "required": ["sum"]}


def _schema(**props: str) -> Schema:
    return {
        "type": "object",
        "properties": {name: {"type": kind} for name, kind in props.items()},
        "required": list(props),
    }


def _tool(name: str, desc: str, hints: Hints = READ_ONLY, out: Schema | None = None, **props: str) -> Tool:
    """A tool whose arguments are all required and of the given JSON types; read-only unless told."""
    schema = _schema(**props)
    return Tool(name=name, description=desc, input_schema=schema, output_schema=out, annotations=hints)


WRITE = types.ToolAnnotations(read_only_hint=False, destructive_hint=True)
OPEN_WORLD = types.ToolAnnotations(read_only_hint=True, open_world_hint=True)
TOOLS = [
    _tool("echo", "Echo the text back.", text="string"),
    _tool("add", "Add two integers.", out=SUM_SCHEMA, a="integer", b="integer"),
    _tool("write_note", "Save a note.", WRITE, text="string"),
    _tool("lookup", "Look something up.", None, q="string"),
    _tool("slow", "Sleep, then answer.", seconds="number"),
    _tool("image", "Return a tiny PNG."),
    _tool("big_text", "Return that many bytes of text.", bytes="integer"),
    _tool("fail", "Always fails."),
    _tool("search_web", "Search the web.", OPEN_WORLD, q="string"),
]
NOTES = {"alpha": "alpha text", "beta": "beta text", "secret": "secret text"}
RESOURCES = [types.Resource(name=n, uri=f"note://{n}", mime_type="text/plain") for n in NOTES]
TEMPLATE = types.ResourceTemplate(name="note", uri_template="note://{name}", mime_type="text/plain")
PROMPTS = [
    types.Prompt(
        name="greet",
        description="Greet someone.",
        arguments=[types.PromptArgument(name="name", required=True)],
    ),
    types.Prompt(
        name="summarize",
        description="Summarize a topic.",
        arguments=[types.PromptArgument(name="topic", required=False)],
    ),
    types.Prompt(name="secret_prompt", description="A prompt with no arguments."),
]


def page(items: Sequence[T], params: PageParams, size: int) -> tuple[list[T], str | None]:
    """Items from the cursor (a decimal offset) on, and the next cursor if any remain."""
    cursor = params.cursor if params else None
    if cursor is not None and not (cursor.isdigit() and int(cursor) < len(items)):
        raise MCPError(types.INVALID_PARAMS, f"Invalid cursor: {cursor!r}")
    start = int(cursor or 0)
    end = start + size
    return list(items[start:end]), (str(end) if end < len(items) else None)


def text(value: str) -> list[types.ContentBlock]:
    return [types.TextContent(text=value)]


async def list_tools(ctx: Ctx, params: PageParams) -> types.ListToolsResult:
    tools, cursor = page(TOOLS, params, TOOL_PAGE)
    return types.ListToolsResult(tools=tools, next_cursor=cursor)


async def call_tool(ctx: Ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
    args = params.arguments or {}
    match params.name:
        case "echo":
            return types.CallToolResult(content=text(str(args["text"])))
        case "add":
            total = int(args["a"]) + int(args["b"])
            return types.CallToolResult(content=text(str(total)), structured_content={"sum": total})
        case "write_note":
            return types.CallToolResult(content=text("saved"))
        case "lookup":
            return types.CallToolResult(content=text(f"result for {args['q']}"))
        case "slow":
            await anyio.sleep(float(args["seconds"]))
            return types.CallToolResult(content=text("done"))
        case "image":
            data = base64.b64encode(png_bytes(2, 2)).decode()
            return types.CallToolResult(content=[types.ImageContent(data=data, mime_type="image/png")])
        case "big_text":
            size = int(args["bytes"])
            return types.CallToolResult(content=text((ALPHABET * (size // 26 + 1))[:size]))
        case "fail":
            return types.CallToolResult(content=text("deliberate failure"), is_error=True)
        case "search_web":
            return types.CallToolResult(content=text("web results"))
    raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {params.name}")


async def list_resources(ctx: Ctx, params: PageParams) -> types.ListResourcesResult:
    resources, cursor = page(RESOURCES, params, RESOURCE_PAGE)
    return types.ListResourcesResult(resources=resources, next_cursor=cursor)


async def list_templates(ctx: Ctx, params: PageParams) -> types.ListResourceTemplatesResult:
    return types.ListResourceTemplatesResult(resource_templates=[TEMPLATE])


async def read_resource(ctx: Ctx, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
    name = params.uri.removeprefix("note://")
    if not params.uri.startswith("note://") or name not in NOTES:
        raise MCPError(types.INVALID_PARAMS, f"Resource not found: {params.uri}")
    contents = types.TextResourceContents(uri=params.uri, mime_type="text/plain", text=NOTES[name])
    return types.ReadResourceResult(contents=[contents])


async def list_prompts(ctx: Ctx, params: PageParams) -> types.ListPromptsResult:
    prompts, cursor = page(PROMPTS, params, PROMPT_PAGE)
    return types.ListPromptsResult(prompts=prompts, next_cursor=cursor)


async def get_prompt(ctx: Ctx, params: types.GetPromptRequestParams) -> types.GetPromptResult:
    args = params.arguments or {}
    match params.name:
        case "greet":
            if "name" not in args:
                raise MCPError(types.INVALID_PARAMS, "Missing required argument: name")
            message = f"Hello, {args['name']}!"
        case "summarize":
            message = f"Summarize {args.get('topic', 'the conversation')}."
        case "secret_prompt":
            message = "This is the secret prompt."
        case _:
            raise MCPError(types.INVALID_PARAMS, f"Unknown prompt: {params.name}")
    content = types.TextContent(text=message)
    return types.GetPromptResult(messages=[types.PromptMessage(role="user", content=content)])


def build_server(log: str | None) -> Server[Any]:
    schemas = {tool.name: tool.input_schema for tool in TOOLS}
    server: Server[Any] = Server(
        "wellbehaved",
        version="1.0.0",
        # Saves the 2026-07-28 HTTP path from running tools/list itself (which would be logged).
        get_tool_input_schema=schemas.get,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_templates,
        on_read_resource=read_resource,
        on_list_prompts=list_prompts,
        on_get_prompt=get_prompt,
    )

    async def log_methods(ctx: Ctx, call_next: CallNext) -> HandlerResult:
        log_method(log, ctx.method, ctx.params)
        return await call_next(ctx)

    server.middleware.insert(0, log_methods)
    return server


async def serve_stdio(server: Server[Any], legacy: bool = False) -> None:
    """Both protocol eras (the client's first request decides), or with ``legacy`` the 2025 handshake
    only, as most servers deployed before 2026-07-28 do (``server/discover`` gets -32601)."""
    async with stdio_server() as (read_stream, write_stream):
        if not legacy:
            await server.run(read_stream, write_stream, server.create_initialization_options())
            return
        async with server.lifespan(server) as state:
            await serve_loop(
                server,
                read_stream,
                write_stream,
                lifespan_state=state,
                init_options=server.create_initialization_options(),
            )


def log_headers(app: ASGIApp, log: str | None) -> ASGIApp:
    """Log the x-api-key / authorization headers of every HTTP request that reaches /mcp."""

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if log is not None and scope["type"] == "http" and scope["path"] == "/mcp":
            for name, value in scope["headers"]:
                if name in LOGGED_HEADERS:
                    log_line(log, f"header {name.decode()} {value.decode('latin-1')}")
        await app(scope, receive, send)

    return wrapped


async def redirect_same(request: Request) -> RedirectResponse:
    return RedirectResponse("/mcp", status_code=307)


async def redirect_other(request: Request) -> RedirectResponse:
    return RedirectResponse(f"http://localhost:{request.url.port}/mcp", status_code=307)


class _Uvicorn(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # uvicorn re-raises the signal after a graceful shutdown; exit 0 instead.
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self.handle_exit)
        yield


async def serve_http(server: Server[Any], port: int, log: str | None) -> None:
    methods = ["GET", "POST", "DELETE"]
    routes = [
        Route("/redirect-same", redirect_same, methods=methods),
        Route("/redirect-other", redirect_other, methods=methods),
    ]
    app = log_headers(server.streamable_http_app(custom_starlette_routes=routes), log)
    # "warning" also silences the access log, so stdout carries only the READY line.
    config = uvicorn.Config(app, HOST, port, log_level="warning", timeout_graceful_shutdown=1)
    web = _Uvicorn(config)
    announcer = asyncio.create_task(announce_when_listening(web))
    try:
        await web.serve()  # a failed bind exits with status 3 after uvicorn logs why
    finally:
        announcer.cancel()


async def announce_when_listening(web: uvicorn.Server) -> None:
    while not web.started:
        await asyncio.sleep(0.01)
    port = web.servers[0].sockets[0].getsockname()[1]
    print(f"READY http://{HOST}:{port}/mcp", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", metavar="FILE", help="append one line per method received")
    parser.add_argument("--http", metavar="PORT", type=int, help="serve HTTP on 127.0.0.1:PORT/mcp")
    parser.add_argument("--legacy", action="store_true", help="stdio: the 2025 handshake only, no 2026-07-28")
    args = parser.parse_args()
    server = build_server(args.log)
    if args.http is None:
        anyio.run(serve_stdio, server, args.legacy)
    else:
        asyncio.run(serve_http(server, args.http, args.log))


if __name__ == "__main__":
    main()
