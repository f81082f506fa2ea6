"""The hot request's own paths: ``send`` answered beside the MCP SDK over stdio (``_fast``) and
as one JSON body over HTTP (``plain_reply``). Each test sets the fast answer beside the SDK's
answer to the same call (a ``progressToken`` sends a request down the SDK's path), so a fast
path that dropped a check, an audit entry, progress or an error shape fails here."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from anyio.abc import Process

from console_bridge._serve._fast import FastSend
from console_bridge._serve._http import plain_reply
from tests.serve.conftest import HttpServer, leftovers, serve_args, serve_env

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
}
ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


def call(request_id: object, arguments: dict[str, Any], meta: dict[str, Any] | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"name": "send", "arguments": arguments}
    if meta is not None:
        params["_meta"] = meta
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


# ------------------------------------------------------------------ pure: what the fast path takes


async def _never(*_: object) -> Any:
    raise AssertionError("not called")


@pytest.mark.anyio
async def test_fast_send_takes_only_a_plain_send_after_a_2025_handshake() -> None:
    fast = FastSend(_never, "send", lambda: None)  # type: ignore[arg-type,return-value]
    assert fast.inbound(call(2, {"python": "1"})) is None  # before initialize: the SDK refuses it
    assert fast.inbound(INIT) is None
    from mcp_types import JSONRPCResponse

    fast.outbound(JSONRPCResponse(jsonrpc="2.0", id=1, result={"protocolVersion": "2025-06-18"}))
    assert fast.version == "2025-06-18"
    assert fast.inbound(call(2, {"python": "1"})) == (2, {"python": "1"})
    assert fast.inbound(call("2", {"python": "1"})) is None  # "2" and 2 are one id: already in flight
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 2}}
    assert fast.cancels(cancel)  # in flight from the moment it was taken
    assert fast.inbound(call("a", {"python": "1"}, {"other": 1})) == ("a", {"python": "1"})
    assert fast.inbound({**call(3, {}), "params": {"name": "send"}}) == (3, {})
    for other in (
        call(4, {"python": "1"}, {"progressToken": "p"}),  # progress: the SDK's path
        call(True, {"python": "1"}),  # not a request id
        {**call(5, {}), "params": {"name": "console_open", "arguments": {}}},
        {**call(6, {}), "params": {"name": "send", "arguments": {}, "task": {}}},  # anything unusual
        {**call(7, {}), "params": {"name": "send", "arguments": []}},
        {**call(8, {}), "extra": 1},
        {"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "send"}},  # a notification
    ):
        assert fast.inbound(other) is None, other
    fast.inbound({**INIT, "id": 9})
    fast.outbound(JSONRPCResponse(jsonrpc="2.0", id=9, result={"protocolVersion": "2026-07-28"}))
    assert fast.version is None and fast.inbound(call(10, {"python": "1"})) is None  # 2026 era: the SDK's
    assert not fast.cancels({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 10}})


def test_plain_reply_only_for_a_send_that_wants_no_progress() -> None:
    def body(message: dict[str, Any]) -> bytes:
        return json.dumps(message).encode()

    h = dict(ACCEPT)
    assert plain_reply(h, body(call(2, {"python": "1"})), "send")
    assert plain_reply({**h, "mcp-protocol-version": "2025-11-25"}, body(call(2, {})), "send")
    assert not plain_reply(h, body(call(2, {"python": "1"}, {"progressToken": 1})), "send")
    assert not plain_reply({**h, "mcp-protocol-version": "2026-07-28"}, body(call(2, {})), "send")
    assert not plain_reply({**h, "accept": "application/json"}, body(call(2, {})), "send")  # the SDK's 406
    assert not plain_reply(h, body({**call(2, {}), "params": {"name": "test_reconnection"}}), "send")
    assert not plain_reply(h, b"[1, 2", "send")
    assert not plain_reply(h, body(call(2, {})), None)


# ------------------------------------------------------------------ stdio: the real server's wire


class Wire:
    """JSON-RPC lines to and from a real ``console-bridge serve`` process."""

    def __init__(self, proc: Process) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        self.proc = proc
        self.buffer = b""
        self.seen: list[dict[str, Any]] = []

    async def send(self, *messages: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        await self.proc.stdin.send(b"".join(json.dumps(m).encode() + b"\n" for m in messages))

    async def until(self, request_id: object) -> dict[str, Any]:
        """Read messages (kept in ``seen``) until the response to ``request_id``."""
        assert self.proc.stdout is not None
        while True:
            while b"\n" not in self.buffer:
                self.buffer += await self.proc.stdout.receive()
            line, self.buffer = self.buffer.split(b"\n", 1)
            message = json.loads(line)
            self.seen.append(message)
            if message.get("id") == request_id and "method" not in message:
                return message


@pytest.mark.anyio
@pytest.mark.console
@pytest.mark.slow
async def test_stdio_fast_send_keeps_every_guarantee_of_the_sdk_path(tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"
    proc = await anyio.open_process(
        serve_args(tmp_path, "--audit", str(audit)), env=serve_env(tmp_path), cwd=tmp_path, stderr=None
    )
    async with proc:
        wire = Wire(proc)
        await wire.send(INIT)
        assert (await wire.until(1))["result"]["protocolVersion"] == "2025-06-18"
        await wire.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        token = {"progressToken": "p"}  # sends the same call down the SDK's path
        pairs = [  # (arguments, whether the console runs it: an audited call)
            ({"python": "6 * 7"}, True),
            ({"python": 5}, False),  # invalid arguments: the same tool error
            ({"python": "1", "console_id": "no-such-console"}, False),  # a handle not this client's: refused
            ({"python": "raise ValueError('boom')"}, True),
        ]
        results = []
        for n, (arguments, runs) in enumerate(pairs):
            before = audited(audit)
            await wire.send(call(100 + n, arguments))
            fast = await wire.until(100 + n)
            assert audited(audit) == before + runs  # written before the answer, on either path
            await wire.send(call(200 + n, arguments, token))
            sdk = await wire.until(200 + n)
            assert audited(audit) == before + 2 * runs
            assert fast.keys() == sdk.keys() == {"jsonrpc", "id", "result"}, (fast, sdk)
            assert same(fast["result"]) == same(sdk["result"]), (arguments, fast, sdk)
            results.append(fast["result"])
        assert results[0]["content"][0]["text"].strip() == "42" and not results[0]["isError"]
        assert all(r["isError"] for r in results[1:]), results
        assert "console_open" in results[2]["content"][0]["text"]

        # a client's cancel interrupts the cell; the cancelled request is never answered
        # (in one write: the cancel is read before the request's own task has started)
        cancelled = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 400}}
        await wire.send(call(400, {"python": "import time; time.sleep(25); 'slept'"}), cancelled)
        after = await wire_result(wire, 401, {"python": "'after'"})
        assert "'after'" in after["content"][0]["text"] and not after["isError"], after
        assert not [m for m in wire.seen if m.get("id") == 400], "a cancelled request was answered"

        # progress, asked for, still arrives (that request takes the SDK's path)
        await wire.send(call(500, {"python": "import time; time.sleep(1.6); 'done'"}, {"progressToken": "tok"}))
        done = await wire.until(500)
        assert "'done'" in done["result"]["content"][0]["text"]
        progress = [m for m in wire.seen if m.get("method") == "notifications/progress"]
        assert progress and all(m["params"]["progressToken"] == "tok" for m in progress)
        assert proc.stdin is not None
        await proc.stdin.aclose()
        assert await proc.wait() == 0
    assert leftovers(tmp_path) == []


def same(result: dict[str, Any]) -> str:
    """A result with the cell's own counter (``<mcp-console:python:e4>``, IPython's ``Cell In[4]`` in a
    traceback) left out."""
    text = re.sub(r"<mcp-console:(\w+):e\d+>", r"<mcp-console:\1>", json.dumps(result, sort_keys=True))
    return re.sub(r"Cell In\[\d+\]", "Cell In[n]", text)


def audited(audit: Path, owner: str = "mcp-stdio") -> int:
    """How many ``send`` calls the audit log shows started (it is written, flushed, per record)."""
    if not audit.exists():
        return 0
    events = [json.loads(line) for line in audit.read_text().splitlines()]
    return sum(
        1 for e in events if e.get("event") == "call_start" and e.get("tool") == "send" and e.get("owner") == owner
    )


async def wire_result(wire: Wire, request_id: int, arguments: dict[str, Any]) -> dict[str, Any]:
    await wire.send(call(request_id, arguments))
    return (await wire.until(request_id))["result"]  # type: ignore[no-any-return]


# ------------------------------------------------------------------ HTTP: one JSON body for a send

ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdef00"


def _payload(response: httpx2.Response) -> list[dict[str, Any]]:
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
        return [json.loads(d) for d in data if d]
    return [response.json()]


@pytest.mark.anyio
@pytest.mark.console
@pytest.mark.slow
async def test_http_plain_send_keeps_identity_audit_progress_and_errors(http_server: Any, tmp_path: Path) -> None:
    tokens = tmp_path / "clients.tokens"
    tokens.write_text(f"{ALICE} alice\n{BOB} bob\n")
    tokens.chmod(0o600)
    audit = tmp_path / "audit.jsonl"
    server: HttpServer = http_server("--warm", "0", "--tokens", str(tokens), "--audit", str(audit))

    async def session(http: httpx2.AsyncClient, token: str) -> dict[str, str]:
        auth = {"Authorization": f"Bearer {token}"}
        opened = await http.post(server.url, json=INIT, headers=auth)
        headers = {**auth, "mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-06-18"}
        await http.post(server.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
        return headers

    async with httpx2.AsyncClient(timeout=60.0, headers=ACCEPT) as http:
        alice = await session(http, ALICE)
        bob = await session(http, BOB)
        plain = await http.post(server.url, json=call(2, {"python": "6 * 7"}), headers=alice)
        base = audited(audit, "alice")  # the console's probe and this cell (the console started for it)
        assert base >= 1
        assert plain.status_code == 200 and plain.headers["content-type"].startswith("application/json")
        assert "42" in plain.json()["result"]["content"][0]["text"]
        streamed = await http.post(server.url, json=call(3, {"python": "6 * 7"}, {"progressToken": 1}), headers=alice)
        assert streamed.headers["content-type"].startswith("text/event-stream")
        assert _payload(streamed)[-1]["result"] == plain.json()["result"]
        assert audited(audit, "alice") == base + 1
        for arguments in ({"python": 5}, {"python": "1", "console_id": "no-such-console"}):
            fast = (await http.post(server.url, json=call(4, arguments), headers=alice)).json()
            sdk = _payload(await http.post(server.url, json=call(5, arguments, {"progressToken": 2}), headers=alice))
            assert fast["result"]["isError"] and fast["result"] == sdk[-1]["result"], (fast, sdk)

        opened = _payload(
            await http.post(
                server.url,
                json={"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"name": "console_open"}},
                headers=alice,
            )
        )[-1]
        console_id = opened["result"]["structuredContent"]["console_id"]
        mine = await http.post(server.url, json=call(7, {"python": "'a'", "console_id": console_id}), headers=alice)
        assert "'a'" in mine.json()["result"]["content"][0]["text"]
        stolen = await http.post(server.url, json=call(8, {"python": "1", "console_id": console_id}), headers=bob)
        assert stolen.json()["result"]["isError"] and "unknown console_id" in stolen.text, stolen.text
        hijack = await http.post(server.url, json=call(9, {"python": "1"}), headers={**alice, **_auth(BOB)})
        assert hijack.status_code == 404  # alice's MCP session is not bob's, on this path too
        mismatch = await http.post(
            server.url,
            json=call(10, {"python": "1", "console_id": console_id}),
            headers={**alice, "mcp-param-console-id": "other"},
        )
        assert mismatch.json()["result"]["isError"] and "Mcp-Param-Console-Id" in mismatch.text
        nobody = await http.post(server.url, json=call(11, {"python": "1"}), headers={**alice, **_auth("wrong")})
        assert nobody.status_code == 401
        foreign = await http.post(
            server.url, json=call(12, {"python": "1"}), headers={**alice, "origin": "http://evil"}
        )
        assert foreign.status_code == 403

        slow = {"python": "import time; time.sleep(1.6); 'done'"}
        progressed = _payload(await http.post(server.url, json=call(13, slow, {"progressToken": "t"}), headers=alice))
        assert [m for m in progressed if m.get("method") == "notifications/progress"], progressed
        assert "'done'" in progressed[-1]["result"]["content"][0]["text"]
        # the second 6*7; console_open's probe (if audited) and 'a'; the slow cell. Bob ran nothing.
        assert audited(audit, "alice") >= base + 3 and audited(audit, "bob") == 0
    assert server.stop() == 0
    assert leftovers(tmp_path) == []


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
