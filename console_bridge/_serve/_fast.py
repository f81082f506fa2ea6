"""The hot request of ``console-bridge serve`` over stdio, answered without the MCP SDK's dispatch.

A warm ``send`` is most of what a host sends, and the SDK's JSON-RPC machinery (per-request tasks,
memory streams, context, validation ladders, result sieve) costs about 0.2 ms of each one. This
answers exactly one kind of message itself: a ``tools/call`` of ``send`` in the handshake era
(after the SDK answered ``initialize`` with a 2025 version), with only ``name``, ``arguments`` and
a ``_meta`` without ``progressToken``. Everything else (the handshake, listings, resources, the
other tools, progress requests, the 2026-07-28 era, anything unusual) goes to the SDK unchanged.

What it keeps: the call goes through the same ``ToolCalls`` as the SDK's handler (argument
validation, handle binding to the identity, turn lock, limits, the console's own governed tool and
its audit entry, output caps, error texts); the result is shaped by the SDK's own per-version
result sieve; a handler exception becomes the SDK's error (``MCPError`` as it is, anything else
code 0); ``notifications/cancelled`` for such a request interrupts it and it is never answered; a
request cut off by shutdown is answered "Connection closed" (-32000), as the SDK does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import anyio
import mcp_types as types
import pydantic_core
from mcp.shared.dispatcher import as_request_id, coerce_request_id
from mcp.shared.jsonrpc_dispatcher import handler_exception_to_error_data
from mcp_types import methods as _methods
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from console_bridge._serve._mcp import Caller, ToolCalls

__all__ = ["FastSend"]

_log = logging.getLogger("console_bridge.serve")
_REQUEST_KEYS = frozenset({"jsonrpc", "id", "method", "params"})
_PARAM_KEYS = frozenset({"name", "arguments", "_meta"})


class FastSend:
    """Decides which inbound messages it answers itself, and answers them (one per connection)."""

    def __init__(self, calls: ToolCalls, send_name: str, caller: Callable[[], Caller]) -> None:
        self._calls = calls
        self._send = send_name
        self._caller = caller
        self._opening: types.RequestId | None = None  # the id of the initialize request in flight
        self._in_flight: dict[types.RequestId, anyio.CancelScope] = {}
        #: The protocol version the SDK negotiated, when it is of the handshake era (else None: off).
        self.version: str | None = None

    def inbound(self, raw: object) -> tuple[types.RequestId, dict[str, Any]] | None:
        """``(id, arguments)`` when ``raw`` (a parsed JSON message) is a request to answer here; None
        to hand it to the SDK. Notes an ``initialize`` on the way."""
        if not isinstance(raw, dict):
            return None
        method = raw.get("method")
        if method == "initialize":
            request_id = as_request_id(raw.get("id"))
            self._opening = None if request_id is None else coerce_request_id(request_id)
            return None
        if method != "tools/call" or self.version is None or raw.keys() != _REQUEST_KEYS:
            return None
        request_id = as_request_id(raw["id"])
        params = raw["params"]
        if raw["jsonrpc"] != "2.0" or request_id is None or coerce_request_id(request_id) in self._in_flight:
            return None
        if not isinstance(params, dict) or not params.keys() <= _PARAM_KEYS or params.get("name") != self._send:
            return None
        arguments = params.get("arguments")
        meta = params.get("_meta")
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict) or not (
            meta is None or (isinstance(meta, dict) and "progressToken" not in meta)
        ):
            return None
        # in flight from now on: a cancel read right after it (even before its task starts) finds it
        self._in_flight[coerce_request_id(request_id)] = anyio.CancelScope()
        return request_id, arguments

    def cancels(self, raw: object) -> bool:
        """True when ``raw`` is a ``notifications/cancelled`` for a request answered here (it is then
        interrupted and never answered; the SDK need not see the notification)."""
        if not isinstance(raw, dict) or raw.get("method") != "notifications/cancelled" or "id" in raw:
            return False
        params = raw.get("params")
        request_id = as_request_id(params.get("requestId")) if isinstance(params, dict) else None
        scope = None if request_id is None else self._in_flight.get(coerce_request_id(request_id))
        if scope is None:
            return False
        scope.cancel()
        return True

    def outbound(self, message: types.JSONRPCMessage) -> None:
        """Watch the SDK's answers for the one to ``initialize``: its version turns this on or off."""
        if self._opening is None or not isinstance(message, types.JSONRPCResponse | types.JSONRPCError):
            return
        if message.id is None or coerce_request_id(message.id) != self._opening:
            return
        self._opening = None
        version = message.result.get("protocolVersion") if isinstance(message, types.JSONRPCResponse) else None
        self.version = version if isinstance(version, str) and version in HANDSHAKE_PROTOCOL_VERSIONS else None

    async def answer(
        self, request_id: types.RequestId, arguments: dict[str, Any], write: Callable[[bytes], None]
    ) -> None:
        """Run the call :meth:`inbound` took and ``write`` its response line (nothing when the peer
        cancelled it)."""
        version = self.version
        assert version is not None
        key = coerce_request_id(request_id)
        with self._in_flight[key] as scope:
            try:
                result = await self._calls(self._caller(), self._send, arguments, None)
                dumped = result.model_dump(by_alias=True, mode="json", exclude_none=True)
                body: dict[str, Any] = {"result": _methods.serialize_server_result("tools/call", version, dumped)}
            except anyio.get_cancelled_exc_class():
                if not scope.cancel_called:  # shutdown, not the peer: it is told, as the SDK tells it
                    write(
                        _line(request_id, {"error": {"code": types.CONNECTION_CLOSED, "message": "Connection closed"}})
                    )
                raise
            except Exception as exc:
                error = handler_exception_to_error_data(exc)
                if error is None:
                    _log.exception("send raised")
                    error = types.ErrorData(code=0, message=str(exc))
                body = {"error": error.model_dump(by_alias=True, mode="json", exclude_none=True)}
            finally:
                if self._in_flight.get(key) is scope:
                    del self._in_flight[key]
            write(_line(request_id, body))


def _line(request_id: types.RequestId, body: dict[str, Any]) -> bytes:
    return pydantic_core.to_json({"jsonrpc": "2.0", "id": request_id, **body}) + b"\n"
