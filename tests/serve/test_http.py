"""``console-bridge serve --transport http``: the SDK's Streamable HTTP client against the real server."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.serve.conftest import HttpServer, finalized, leftovers, recordings_of

pytestmark = [pytest.mark.anyio, pytest.mark.console, pytest.mark.slow]

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
}
ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


@contextlib.asynccontextmanager
async def client(server: HttpServer, *, terminate: bool = True) -> AsyncIterator[ClientSession]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {server.token}"}, timeout=httpx2.Timeout(60.0))
    transport = streamable_http_client(server.url, http_client=http, terminate_on_close=terminate)
    async with http, transport as (r, w), ClientSession(r, w) as session:
        await session.initialize()
        yield session


def text(result: Any) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


def sessions_started(tmp_path: Path) -> int:
    sessions = tmp_path / "state" / "sessions"
    return len(os.listdir(sessions)) if sessions.is_dir() else 0


async def test_two_clients_get_two_sessions_and_sigterm_closes_both(http_server: Any, tmp_path: Path) -> None:
    server: HttpServer = http_server("--warm", "1", "--max-sessions", "3")
    assert stat.S_IMODE(server.token_file.stat().st_mode) == 0o600  # type: ignore[union-attr]
    async with client(server) as one, client(server) as two:
        await one.call_tool("send", {"python": "secret = 'one'"})
        await two.call_tool("send", {"python": "secret = 'two'"})
        assert text(await one.call_tool("send", {"python": "secret"})).strip() == "'one'"
        assert text(await two.call_tool("send", {"python": "secret"})).strip() == "'two'"
        big = await one.call_tool("send", {"python": "# " + "x" * 10_000_000 + "\n'big'"})  # a 10 MB request
        assert "big" in text(big) or big.is_error
        wrong = await two.call_tool("send", {"sql": 5, "extra": True})
        assert wrong.is_error
        assert text(await two.call_tool("send", {"python": "secret"})).strip() == "'two'"
        sandbox = await one.read_resource("console://session/sandbox")
        assert '"network": "restricted"' in sandbox.contents[0].text  # type: ignore[union-attr]
        assert server.stop() == 0
    assert leftovers(tmp_path) == []
    runs = recordings_of(tmp_path)
    assert len(runs) >= 2 and all(finalized(run) for run in runs), runs
    assert not server.token_file.exists()  # type: ignore[union-attr]


async def test_refused_requests_start_nothing(http_server: Any, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("a-token-of-at-least-sixteen-chars\n")
    token_file.chmod(0o600)  # a token others can read is refused (tests/serve/test_evidence.py)
    server: HttpServer = http_server("--warm", "0", "--max-per-client", "1", token_file=token_file)
    async with httpx2.AsyncClient(timeout=30.0) as http:
        none = await http.post(server.url, json=INIT, headers=ACCEPT)
        assert none.status_code == 401 and none.headers["www-authenticate"] == "Bearer"
        wrong = await http.post(
            server.url, json=INIT, headers={**ACCEPT, "Authorization": "Bearer wrong-token-xxxxxxxx"}
        )
        assert wrong.status_code == 401
        good = {**ACCEPT, "Authorization": f"Bearer {server.token}"}
        foreign = await http.post(server.url, json=INIT, headers={**good, "Origin": "http://evil.example"})
        assert foreign.status_code == 403
        local = await http.post(server.url, json=INIT, headers={**good, "Origin": "http://localhost:3000"})
        assert local.status_code == 200, local.text
        sid = local.headers["mcp-session-id"]
        # 40 MCP sessions that only initialize and list: no console is started for any of them
        for _ in range(40):
            opened = await http.post(server.url, json=INIT, headers=good)
            assert opened.status_code == 200, opened.text
            session = {**good, "mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-06-18"}
            await http.post(server.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
            listed = await http.post(
                server.url, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers=session
            )
            assert listed.status_code == 200 and "console_open" in listed.text
            if _ == 0:  # prompts is offered (empty): a get of an unknown name is -32602, not -32601 (issue 32)
                prompt = await http.post(
                    server.url,
                    json={"jsonrpc": "2.0", "id": 3, "method": "prompts/get", "params": {"name": "nope"}},
                    headers=session,
                )
                assert '"code":-32602' in prompt.text.replace(" ", "") and "unknown prompt" in prompt.text, prompt.text
        assert sessions_started(tmp_path) == 0
    async with client(server) as one, client(server) as two:
        assert text(await one.call_tool("send", {"python": "6 * 7"})).strip() == "42"  # claimed now
        assert sessions_started(tmp_path) == 1
        refused = await two.call_tool("send", {"python": "1"})  # same identity, quota 1
        assert refused.is_error and "--max-per-client" in text(refused) and "console_close" in text(refused)
        assert sessions_started(tmp_path) == 1
    # closing the MCP session (DELETE on leaving the client) closed its console
    deadline = time.monotonic() + 20
    while sessions_started(tmp_path) and time.monotonic() < deadline:
        await anyio.sleep(0.05)
    assert sessions_started(tmp_path) == 0
    async with httpx2.AsyncClient(timeout=30.0) as http:
        deleted = await http.delete(server.url, headers={**good, "mcp-session-id": sid})
        assert deleted.status_code < 400
        gone = await http.post(
            server.url,
            json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
            headers={**good, "mcp-session-id": sid},
        )
        assert gone.status_code == 404
    assert server.stop() == 0
    assert leftovers(tmp_path) == []


async def test_capacity_and_idle_culling_are_tool_errors(http_server: Any, tmp_path: Path) -> None:
    server: HttpServer = http_server(
        "--warm", "0", "--max-sessions", "2", "--idle-timeout", "10", "--acquire-timeout", "0.5"
    )
    async with client(server) as one, client(server) as two, client(server) as three:
        await one.call_tool("send", {"python": "kept = 1"})
        await two.call_tool("send", {"python": "1"})
        full = await three.call_tool("send", {"python": "1"})
        assert full.is_error and "no console is free" in text(full) and "--max-sessions" in text(full)
        assert sessions_started(tmp_path) == 2
        # idle culling: no call for longer than --idle-timeout closes both consoles
        deadline = time.monotonic() + 30
        while sessions_started(tmp_path) and time.monotonic() < deadline:
            await anyio.sleep(0.1)
        assert sessions_started(tmp_path) == 0
        told = await one.call_tool("send", {"python": "kept"})
        assert told.is_error and "10 s without use (--idle-timeout)" in text(told), text(told)
        # room again: the third session gets a console, and the first one a fresh console
        assert text(await three.call_tool("send", {"python": "6 * 7"})).strip() == "42"
        fresh = await one.call_tool("send", {"python": "'kept' in globals()"})
        assert text(fresh).strip() == "False"
    assert server.stop() == 0
    assert leftovers(tmp_path) == []


ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdef00"


@contextlib.asynccontextmanager
async def modern(server: HttpServer, token: str) -> AsyncIterator[Any]:
    """The MCP SDK Client pinned to 2026-07-28 over HTTP (no initialize, no MCP session)."""
    from mcp import Client

    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(60.0))
    async with http, Client(streamable_http_client(server.url, http_client=http), mode="2026-07-28") as sdk:
        yield sdk


async def test_identities_handles_and_the_2026_era(http_server: Any, tmp_path: Path) -> None:
    tokens = tmp_path / "clients.tokens"
    tokens.write_text(f"{ALICE} alice\n{BOB} bob\n")
    tokens.chmod(0o600)
    audit = tmp_path / "audit.jsonl"
    server: HttpServer = http_server(
        "--warm", "0", "--tokens", str(tokens), "--max-per-client", "1", "--audit", str(audit)
    )
    async with modern(server, ALICE) as alice:
        assert alice.protocol_version == "2026-07-28"
        assert "console_open" in {t.name for t in (await alice.list_tools()).tools}
        assert sessions_started(tmp_path) == 0
        bare = await alice.call_tool("send", {"python": "1"})  # no MCP session carries a console here
        assert bare.is_error and "console_open" in text(bare)
        opened = await alice.call_tool("console_open", {})
        assert not opened.is_error, text(opened)
        console_id = opened.structured_content["console_id"]  # type: ignore[index]
        await alice.call_tool("send", {"python": "secret = 'alice'", "console_id": console_id})
        second = await alice.call_tool("console_open", {})
        assert second.is_error and "--max-per-client" in text(second)
    async with modern(server, ALICE) as again:  # a reconnect with the same handle keeps the state
        kept = await again.call_tool("send", {"python": "secret", "console_id": console_id})
        assert text(kept).strip() == "'alice'"
        # the console's own transcript, by its handle (the session transcript has none: no session here)
        [listed] = (await again.list_resource_templates()).resource_templates
        assert listed.uri_template == "console://console/{console_id}/transcript"
        mine = (await again.read_resource(f"console://console/{console_id}/transcript")).contents[0]
        assert "secret = 'alice'" in mine.text  # type: ignore[union-attr]
        session = (await again.read_resource("console://session/transcript")).contents[0]
        assert "console://console/{console_id}/transcript" in session.text  # type: ignore[union-attr]
    async with modern(server, BOB) as bob:
        stolen = await bob.call_tool("send", {"python": "secret", "console_id": console_id})
        assert stolen.is_error and "unknown console_id" in text(stolen) and "alice" not in text(stolen)
        with pytest.raises(MCPError, match="unknown console_id") as refused_read:
            await bob.read_resource(f"console://console/{console_id}/transcript")
        assert refused_read.value.code == -32602 and "alice" not in str(refused_read.value)
        assert (await bob.call_tool("console_list", {})).structured_content == {"consoles": []}
        closing = await bob.call_tool("console_close", {"console_id": console_id})
        assert closing.is_error
        mine = await bob.call_tool("console_open", {})  # bob's quota is his own
        assert not mine.is_error, text(mine)
    # a 2025 MCP session of bob's is refused to alice (the SDK answers as for an unknown session)
    async with httpx2.AsyncClient(timeout=30.0) as http:
        opened_session = await http.post(server.url, json=INIT, headers={**ACCEPT, "Authorization": f"Bearer {BOB}"})
        sid = opened_session.headers["mcp-session-id"]
        hijack = await http.post(
            server.url,
            json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
            headers={**ACCEPT, "Authorization": f"Bearer {ALICE}", "mcp-session-id": sid},
        )
        assert hijack.status_code == 404
    events = [json.loads(line) for line in audit.read_text().splitlines()]
    refused = [e for e in events if e.get("event") == "console_id_refused"]
    assert len(refused) == 3 and {(e["owner"], e["console_owner"]) for e in refused} == {("bob", "alice")}, refused
    assert console_id not in audit.read_text()  # (a handle is a bearer: only its first characters)
    owners = {e.get("owner") for e in events if e.get("event") == "call_start"}
    assert owners == {"alice", "bob"}, owners  # each console's cells (its probe too) under its client's identity
    assert server.stop() == 0
    assert leftovers(tmp_path) == []


def _sse_or_json(response: httpx2.Response) -> dict[str, Any]:
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
        return json.loads([d for d in data if d][-1])
    return response.json()  # type: ignore[no-any-return]


async def test_console_id_rides_in_a_header_for_routing(http_server: Any, tmp_path: Path) -> None:
    """SEP-2243: console_id is mirrored into Mcp-Param-Console-Id so a load balancer can pin a console's
    calls; a header that disagrees with the argument is refused (2026-07-28: HTTP 400 HeaderMismatch
    before dispatch; the 2025 handshake: a tool error), so a router and the server never disagree."""
    from mcp import Client

    server: HttpServer = http_server("--warm", "0", "--replica", "replica-1")
    sent: list[httpx2.Headers] = []

    async def record(request: httpx2.Request) -> None:
        sent.append(request.headers)

    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {server.token}"},
        timeout=httpx2.Timeout(60.0),
        event_hooks={"request": [record]},
    )
    async with http, Client(streamable_http_client(server.url, http_client=http), mode="2026-07-28") as sdk:
        assert {t.name for t in (await sdk.list_tools()).tools} >= {"send", "console_close"}  # not dropped
        none = await sdk.call_tool("send", {"python": "1", "console_id": ""})  # a strict client's "none"
        assert none.is_error and "console_open" in text(none), text(none)  # mirrored as an empty header, agreed
        opened = await sdk.call_tool("console_open", {})
        console_id = opened.structured_content["console_id"]  # type: ignore[index]
        replica, _, secret = console_id.partition(".")  # --replica: a proxy routes on the prefix
        assert replica == "replica-1" and len(secret) >= 32
        ran = await sdk.call_tool("send", {"python": "21 * 2", "console_id": console_id})
        assert text(ran).strip() == "42"
    calls = [h for h in sent if h.get("mcp-method") == "tools/call" and h.get("mcp-name") == "send"]
    assert calls and calls[-1].get("mcp-param-console-id") == console_id

    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    modern_call = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "send", "arguments": {"python": "1", "console_id": console_id}, "_meta": meta},
    }
    auth = {"Authorization": f"Bearer {server.token}"}
    routing = {"mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": "send"}
    async with httpx2.AsyncClient(timeout=60.0, headers={**ACCEPT, **auth}) as raw:
        wrong = await raw.post(server.url, json=modern_call, headers={**routing, "mcp-param-console-id": "other"})
        assert wrong.status_code == 400 and wrong.json()["error"]["code"] == -32020, wrong.text
        right = await raw.post(server.url, json=modern_call, headers={**routing, "mcp-param-console-id": console_id})
        assert right.status_code == 200 and not _sse_or_json(right)["result"]["isError"], right.text
        # the 2025 handshake: the same rule, as a tool error the model can read
        opened_session = await raw.post(server.url, json=INIT)
        sid = {"mcp-session-id": opened_session.headers["mcp-session-id"], "mcp-protocol-version": "2025-06-18"}
        await raw.post(server.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=sid)
        call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call"}
        args = {"python": "1", "console_id": console_id}
        mismatch = await raw.post(
            server.url,
            json={**call, "params": {"name": "send", "arguments": args}},
            headers={**sid, "mcp-param-console-id": "other"},
        )
        result = _sse_or_json(mismatch)["result"]
        assert result["isError"] and "Mcp-Param-Console-Id" in result["content"][0]["text"], result
        matching = await raw.post(
            server.url,
            json={**call, "id": 4, "params": {"name": "send", "arguments": args}},
            headers={**sid, "mcp-param-console-id": console_id},
        )
        assert not _sse_or_json(matching)["result"]["isError"]
    assert server.stop() == 0


async def test_one_identity_cannot_lock_the_others_out(http_server: Any, tmp_path: Path) -> None:
    """Issue 32: 140 ``initialize`` with bob's token filled the server's MCP session cap, and alice's got
    503 "Too many open sessions" for up to 20 minutes. Each identity now holds at most its share of the
    cap (here 32 MCP sessions for --max-sessions 1, so 16 each); past it the opening request is 503
    naming the share and the fix, and the other identity opens as before."""
    tokens = tmp_path / "clients.tokens"
    tokens.write_text(f"{ALICE} alice\n{BOB} bob\n")
    tokens.chmod(0o600)
    server: HttpServer = http_server("--warm", "0", "--tokens", str(tokens), "--max-sessions", "1")
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(30.0)) as http:

        async def opening(token: str) -> httpx2.Response:
            return await http.post(server.url, json=INIT, headers={**ACCEPT, "Authorization": f"Bearer {token}"})

        statuses = [(await opening(BOB)).status_code for _ in range(40)]
        assert statuses == [200] * 16 + [503] * 24, statuses
        refused = await opening(BOB)
        assert refused.status_code == 503 and "its share" in refused.text and "bob" in refused.text, refused.text
        assert "DELETE" in refused.text
        welcome = await opening(ALICE)
        assert welcome.status_code == 200, welcome.text
        assert welcome.headers.get("mcp-session-id")
    assert sessions_started(tmp_path) == 0  # MCP sessions alone start no console


async def test_a_browser_client_of_an_allowed_origin_passes_cors(http_server: Any, tmp_path: Path) -> None:
    """Issue 32: with --allow-origin, a browser's preflight got 401 and no Access-Control-Allow-Origin, so
    no browser client could connect. The preflight of an allowed origin is answered (it carries no
    credentials); responses name the origin and expose Mcp-Session-Id; other origins get nothing."""
    app = "https://app.example"
    server: HttpServer = http_server("--warm", "0", "--allow-origin", app)
    asked = "authorization, content-type, mcp-protocol-version, mcp-param-console-id, x-evil"
    preflight = {"Origin": app, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": asked}
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(30.0)) as http:
        ok = await http.options(server.url, headers=preflight)
        assert ok.status_code == 204, ok.text
        assert ok.headers["access-control-allow-origin"] == app
        allowed = {h.strip() for h in ok.headers["access-control-allow-headers"].split(",")}
        assert {"authorization", "content-type", "mcp-protocol-version", "mcp-param-console-id"} <= allowed
        assert "x-evil" not in allowed and "POST" in ok.headers["access-control-allow-methods"]
        other = await http.options(server.url, headers={**preflight, "Origin": "https://evil.example"})
        assert other.status_code >= 400 and "access-control-allow-origin" not in other.headers
        opened = await http.post(
            server.url, json=INIT, headers={**ACCEPT, "Authorization": f"Bearer {server.token}", "Origin": app}
        )
        assert opened.status_code == 200, opened.text
        assert opened.headers["access-control-allow-origin"] == app
        assert "mcp-session-id" in opened.headers["access-control-expose-headers"]
        assert opened.headers.get("mcp-session-id")
        unauthenticated = await http.post(server.url, json=INIT, headers={**ACCEPT, "Origin": app})
        assert unauthenticated.status_code == 401  # CORS never stands in for the token
        assert unauthenticated.headers["access-control-allow-origin"] == app  # (so the page can read why)
        evil = await http.post(
            server.url,
            json=INIT,
            headers={**ACCEPT, "Authorization": f"Bearer {server.token}", "Origin": "https://evil.example"},
        )
        assert evil.status_code == 403 and "access-control-allow-origin" not in evil.headers


async def test_dns_rebinding_and_parse_errors(http_server: Any, tmp_path: Path) -> None:
    """Issue 32: no Host check (a page of a site re-pointed at 127.0.0.1 could drive the server with a
    stolen token), and a body that is not JSON answered -32600 (JSON-RPC says -32700)."""
    server: HttpServer = http_server("--warm", "0", "--allow-host", "mcp.example.com")
    auth = {**ACCEPT, "Authorization": f"Bearer {server.token}"}
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(30.0)) as http:
        rebound = await http.post(server.url, json=INIT, headers={**auth, "Host": "evil.example:8765"})
        assert rebound.status_code == 421 and "DNS rebinding" in rebound.text and "--allow-host" in rebound.text
        proxied = await http.post(server.url, json=INIT, headers={**auth, "Host": "mcp.example.com"})
        assert proxied.status_code == 200, proxied.text
        loopback = await http.post(server.url, json=INIT, headers={**auth, "Host": "localhost:1234"})
        assert loopback.status_code == 200, loopback.text
        broken = await http.post(server.url, content=b"{not json", headers=auth)
        assert broken.status_code == 400 and broken.json()["error"]["code"] == -32700, broken.text
    assert sessions_started(tmp_path) == 0


async def test_a_console_abandoned_by_its_client_is_reclaimed_when_another_needs_one(
    http_server: Any, tmp_path: Path
) -> None:
    """Issue 32: one-shot clients (the Inspector CLI's `send` without a console_id) left idle consoles for
    --idle-timeout (600 s), and a few filled --max-sessions. Now, when every console is taken, one idle for
    --reclaim-idle is closed for the new claim; one in use never is, and its client is told why."""
    server: HttpServer = http_server(
        "--warm", "0", "--max-sessions", "1", "--reclaim-idle", "1", "--acquire-timeout", "0.5"
    )
    async with client(server) as gone, client(server) as newcomer:
        await gone.call_tool("send", {"python": "kept = 1"})  # then its client goes away without closing
        busy = await newcomer.call_tool("send", {"python": "1"})
        assert busy.is_error and "no console is free" in text(busy)  # in use a moment ago: kept
        await anyio.sleep(1.5)
        served = await newcomer.call_tool("send", {"python": "6 * 7"})
        assert text(served).strip() == "42", text(served)
        told = await gone.call_tool("send", {"python": "kept"})
        assert told.is_error and "another client needed one" in text(told) and "--reclaim-idle" in text(told)
        assert sessions_started(tmp_path) == 1
    assert server.stop() == 0
    assert leftovers(tmp_path) == []


async def test_a_quiet_mcp_session_releases_its_own_console(http_server: Any, tmp_path: Path) -> None:
    """Issue 32, item 3: an MCP session with no request for --session-idle-timeout releases its own console
    (told on its next use); a console_open handle lives to --idle-timeout."""
    server: HttpServer = http_server("--warm", "0", "--session-idle-timeout", "1")
    async with client(server) as quiet:
        await quiet.call_tool("send", {"python": "kept = 1"})
        opened = await quiet.call_tool("console_open", {})
        assert opened.structured_content is not None
        handle = opened.structured_content["console_id"]
        deadline = time.monotonic() + 20
        while sessions_started(tmp_path) > 1 and time.monotonic() < deadline:
            await anyio.sleep(0.2)
        assert sessions_started(tmp_path) == 1  # the session's own console closed, the handle's kept
        told = await quiet.call_tool("send", {"python": "kept"})
        assert told.is_error and "--session-idle-timeout" in text(told), text(told)
        kept = await quiet.call_tool("send", {"python": "6 * 7", "console_id": handle})
        assert text(kept).strip() == "42"
    assert server.stop() == 0
    assert leftovers(tmp_path) == []


async def test_a_batch_is_a_json_rpc_refusal_and_a_clamped_wait_is_said(http_server: Any, tmp_path: Path) -> None:
    """Issue 32: a JSON-RPC batch got a pydantic dump; timeout_ms above the maximum was clamped silently."""
    server: HttpServer = http_server("--warm", "0")
    auth = {**ACCEPT, "Authorization": f"Bearer {server.token}"}
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(30.0)) as http:
        batch = await http.post(server.url, json=[INIT, {**INIT, "id": 2}], headers=auth)
        assert batch.status_code == 400, batch.text
        error = batch.json()["error"]
        assert error["code"] == -32600 and "batches are not part of MCP" in error["message"]
    async with client(server) as session:
        clamped = await session.call_tool("send", {"python": "print(1)", "timeout_ms": 10_000_000})
        assert not clamped.is_error
        assert "timeout_ms=10000000 is over this server's maximum" in text(clamped), text(clamped)
        plain = await session.call_tool("send", {"python": "print(2)", "timeout_ms": 1000})
        assert "maximum" not in text(plain)
    assert server.stop() == 0
