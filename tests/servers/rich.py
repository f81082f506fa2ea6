"""An MCP server whose results use the richer parts of the protocol (stdio).

- ``embedded``: text, an embedded text resource, an embedded blob resource and a resource link.
- ``progress``: reports progress 3 times (when the request carries a progressToken), then answers
  with the token it saw (or "no token").
- ``task_only``: declares ``execution.taskSupport: "required"``; a plain call fails.
- ``plain``: read-only, answers "plain".
- ``ask``: (2026-07-28) answers with ``input_required`` (an elicitation, or with ``what: "sampling"`` a
  sampling request) ``rounds`` times (default 1), then with the state and the answers it got back.
"""

from __future__ import annotations

import base64
import sys
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.runner import serve_loop
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

Ctx = ServerRequestContext[Any]
READ_ONLY = types.ToolAnnotations(read_only_hint=True)
EMPTY: dict[str, Any] = {"type": "object", "properties": {}}

TOOLS = [
    types.Tool(name="embedded", description="Rich content.", input_schema=EMPTY, annotations=READ_ONLY),
    types.Tool(name="progress", description="Reports progress.", input_schema=EMPTY, annotations=READ_ONLY),
    types.Tool(
        name="task_only",
        description="Only runs as a task.",
        input_schema=EMPTY,
        annotations=READ_ONLY,
        execution=types.ToolExecution(task_support="required"),
    ),
    types.Tool(name="plain", description="Plain.", input_schema=EMPTY, annotations=READ_ONLY),
    types.Tool(
        name="ask",
        description="Asks the client for input first (2026-07-28).",
        input_schema={"type": "object", "properties": {"what": {"type": "string"}, "rounds": {"type": "integer"}}},
        annotations=READ_ONLY,
    ),
]
#: What ``ask`` embeds: an elicitation (a secret the user would type) or a sampling request.
ASKS: dict[str, types.InputRequest] = {
    "elicitation": types.ElicitRequest(
        params=types.ElicitRequestFormParams(
            message="Paste your API key",
            requested_schema={"type": "object", "properties": {"key": {"type": "string"}}},
        )
    ),
    "sampling": types.CreateMessageRequest(
        params=types.CreateMessageRequestParams(
            messages=[types.SamplingMessage(role="user", content=types.TextContent(text="hi"))], max_tokens=5
        )
    ),
}


async def list_tools(ctx: Ctx, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


def _token(ctx: Ctx) -> str | int | None:
    meta = ctx.meta
    if meta is None:
        return None
    if isinstance(meta, dict):
        return meta.get("progress_token", meta.get("progressToken"))
    return getattr(meta, "progress_token", None) or getattr(meta, "progressToken", None)


def _ask(params: types.CallToolRequestParams) -> types.CallToolResult | types.InputRequiredResult:
    """Round n asks again (state ``"n"``) until ``rounds`` rounds were answered; then names what came back."""
    args = params.arguments or {}
    done = int(params.request_state or "0") if params.input_responses else 0
    if done < int(args.get("rounds", 1)):
        request = ASKS[str(args.get("what", "elicitation"))]
        return types.InputRequiredResult(input_requests={"q": request}, request_state=str(done + 1))
    answers = {key: value.model_dump(mode="json", exclude_none=True) for key, value in params.input_responses.items()}
    return types.CallToolResult(content=[types.TextContent(text=f"state {params.request_state} answers {answers}")])


async def call_tool(ctx: Ctx, params: types.CallToolRequestParams) -> types.CallToolResult | types.InputRequiredResult:
    match params.name:
        case "embedded":
            blob = base64.b64encode(b"\x00\x01binary").decode()
            return types.CallToolResult(
                content=[
                    types.TextContent(text="see the attachments"),
                    types.EmbeddedResource(
                        resource=types.TextResourceContents(
                            uri="note://a", text="embedded text", mime_type="text/plain"
                        )
                    ),
                    types.EmbeddedResource(
                        resource=types.BlobResourceContents(
                            uri="file:///data.bin", blob=blob, mime_type="application/x"
                        )
                    ),
                    types.ResourceLink(name="report", uri="file:///report.csv", mime_type="text/csv"),
                ]
            )
        case "progress":
            token = _token(ctx)
            if token is not None:
                for step in (1, 2, 3):
                    await ctx.session.send_progress_notification(
                        token, step, 3, f"step {step}", related_request_id=ctx.request_id
                    )
                    await anyio.sleep(0.01)
            return types.CallToolResult(content=[types.TextContent(text=f"token {token!r}")])
        case "task_only":
            raise MCPError(types.INVALID_PARAMS, "task_only must be called as a task")
        case "plain":
            return types.CallToolResult(content=[types.TextContent(text="plain")])
        case "ask":
            return _ask(params)
    raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {params.name}")


async def main() -> None:
    server: Server[Any] = Server("rich", version="1.0.0", on_list_tools=list_tools, on_call_tool=call_tool)
    options = server.create_initialization_options()
    async with stdio_server() as (read_stream, write_stream):
        if "--legacy" not in sys.argv[1:]:  # both eras; --legacy: the 2025 handshake only
            await server.run(read_stream, write_stream, options)
            return
        async with server.lifespan(server) as state:
            await serve_loop(server, read_stream, write_stream, lifespan_state=state, init_options=options)


if __name__ == "__main__":
    anyio.run(main)
