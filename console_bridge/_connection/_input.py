"""Requests whose server asks for input on the way (2026-07-28 multi-round-trip results, SEP-2322).

A server may answer ``tools/call``, ``resources/read`` or ``prompts/get`` with ``resultType:
"input_required"``: it wants an elicitation, a sampling or the client's roots before it finishes,
and expects the same request again with the answers and its ``requestState`` echoed byte for byte.
The governed client has no person to ask and lends no model, so it answers on the host's behalf
and gives the server nothing it asked for:

* an elicitation is **declined** (``action: "decline"``, the answer a user who says no gives);
* a sampling or roots request is refused with an error, and the request fails as :class:`ServerError`.

Each request is reported to ``on_input`` with its answer (the gate's audit: ``input_request``).
The SDK's own driver runs the rounds (fresh JSON-RPC ids, the state passed through untouched, its
round cap). Under the 2025 handshake the SDK session's defaults refuse a server's requests: the
bridge advertises no elicitation, sampling or roots capability in either era, so a well-behaved
server does not ask.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import mcp_types
import pydantic
from mcp.client._input_required import InputRequiredRoundsExceededError, run_input_required_driver
from mcp.client.session import ClientSession
from mcp.shared.dispatcher import ProgressFnT

from console_bridge._errors import ServerError
from console_bridge._governance._gate import Gate

__all__ = ["ROUNDS", "audited", "call_tool", "get_prompt", "read_resource", "with_input"]

#: A reply to ``tools/call``: its result, or a request for input. (The SDK session's own ``call_tool``
#: would also check structured output against the tool's schema, listing the tools unasked when it
#: has none; the gate does that check, on the listing it pinned.)
_RESULT: pydantic.TypeAdapter[mcp_types.CallToolResult | mcp_types.InputRequiredResult] = pydantic.TypeAdapter(
    mcp_types.CallToolResult | mcp_types.InputRequiredResult
)
#: Input rounds one call may take before it fails (the SDK's driver raises past it).
ROUNDS = 8


Answer = Callable[[list[str], str], None]
R = TypeVar("R")
Send = Callable[[mcp_types.InputResponses | None, str | None], Awaitable[R | mcp_types.InputRequiredResult]]


def audited(gate: Gate, target: str, call_id: str | None = None) -> Answer:
    """Audit what a server asked for during a request and what it got (``input_request``)."""
    return lambda requests, answer: gate.audit(
        "input_request", target=target, call_id=call_id, requests=requests, answer=answer
    )


async def with_input(send: Send[R], what: str, gate: Gate, call_id: str | None = None) -> R:
    """``send(None, None)``, then every input round the server asks for answered as the module says
    (each request audited through ``gate``)."""
    server, on_input = gate.server, audited(gate, what, call_id)

    async def answer(key: str, request: mcp_types.InputRequest) -> mcp_types.InputResponse | mcp_types.ErrorData:
        if isinstance(request, mcp_types.ElicitRequest):
            on_input([f"{key}: {request.method}"], "declined")
            return mcp_types.ElicitResult(action="decline")
        on_input([f"{key}: {request.method}"], "refused")
        return mcp_types.ErrorData(
            code=mcp_types.INVALID_REQUEST,
            message=f"console-bridge answers no {request.method} request (a governed client lends no model or roots)",
        )

    first = await send(None, None)
    if not isinstance(first, mcp_types.InputRequiredResult):
        return first
    try:
        return await run_input_required_driver(first, dispatch=answer, retry=send, max_rounds=ROUNDS)
    except InputRequiredRoundsExceededError:
        raise ServerError(
            f"{what}: server {server!r} asked for input more than {ROUNDS} times in one request; "
            "the bridge declines every elicitation, so it cannot finish this way",
            server=server,
        ) from None


def call_tool(
    session: ClientSession,
    gate: Gate,
    name: str,
    arguments: dict[str, Any],
    progress: ProgressFnT | None,
    call_id: str,
) -> Awaitable[mcp_types.CallToolResult]:
    """``tools/call`` through the SDK session (on 2026-07-28 it adds the request metadata and the
    ``Mcp-Param-*`` headers of the tool's listing)."""

    async def send(
        responses: mcp_types.InputResponses | None, state: str | None
    ) -> mcp_types.CallToolResult | mcp_types.InputRequiredResult:
        params = mcp_types.CallToolRequestParams(
            name=name, arguments=arguments, input_responses=responses, request_state=state
        )
        return await session.send_request(mcp_types.CallToolRequest(params=params), _RESULT, progress_callback=progress)

    return with_input(send, f"tool {name!r}", gate, call_id)


def read_resource(session: ClientSession, gate: Gate, uri: str) -> Awaitable[mcp_types.ReadResourceResult]:
    """``resources/read``, its input rounds answered."""

    async def send(
        responses: mcp_types.InputResponses | None, state: str | None
    ) -> mcp_types.ReadResourceResult | mcp_types.InputRequiredResult:
        return await session.read_resource(
            uri, input_responses=responses, request_state=state, allow_input_required=True
        )

    return with_input(send, f"resource {uri!r}", gate)


def get_prompt(
    session: ClientSession, gate: Gate, name: str, arguments: dict[str, str]
) -> Awaitable[mcp_types.GetPromptResult]:
    """``prompts/get``, its input rounds answered."""

    async def send(
        responses: mcp_types.InputResponses | None, state: str | None
    ) -> mcp_types.GetPromptResult | mcp_types.InputRequiredResult:
        return await session.get_prompt(
            name, arguments, input_responses=responses, request_state=state, allow_input_required=True
        )

    return with_input(send, f"prompt {name!r}", gate)
