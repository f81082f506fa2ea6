"""HTTP hardening (issue 20, item 6): malformed requests of any shape get a 4xx, never a 500 or a
traceback in the log, and an opening request's headers are checked before a console is claimed.

Pure checks of :func:`opening_refusal`, then one real server (``--warm 0``: a console starts only
when one is claimed) attacked over HTTP; a good client still gets a working session afterwards.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import httpx2
import pytest

from console_bridge._serve._http import opening_refusal
from tests.serve.conftest import STOP_BOUND, HttpServer

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
}
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
DEEP = b"[" * 100_000 + b"]" * 100_000
DEEP_OBJECT = b'{"a":' * 100_000 + b"1" + b"}" * 100_000
MALFORMED = [DEEP, DEEP_OBJECT, b"\xff\xfe{", b"", b"{", b'"x"', b"1e999999"]
MALFORMED.append(b'{"jsonrpc":"2.0","method":"initialize"}')


def test_opening_refusal_checks_headers_then_the_body() -> None:
    good = json.dumps(INIT).encode()
    assert opening_refusal(HEADERS, good) is None
    assert opening_refusal({**HEADERS, "accept": "*/*"}, good) is None
    assert opening_refusal({**HEADERS, "accept": "application/json"}, good)[0] == 406  # type: ignore[index]
    assert opening_refusal({**HEADERS, "content-type": "text/plain"}, good)[0] == 415  # type: ignore[index]
    for body in (DEEP, DEEP_OBJECT, b"\xff\xfe{", b"", b"{"):
        assert opening_refusal(HEADERS, body)[0] == 400, body[:20]  # type: ignore[index]
    notification = json.dumps({k: v for k, v in INIT.items() if k != "id"}).encode()
    assert opening_refusal(HEADERS, notification)[0] == 400  # type: ignore[index]
    # Not an initialize: nothing to claim, the SDK answers (with its own 4xx).
    assert opening_refusal(HEADERS, b"null") is None
    # A batch: refused here as JSON-RPC (MCP has none), not left to a validation dump.
    assert opening_refusal(HEADERS, b"[]") == (400, opening_refusal(HEADERS, b"[1, 2]")[1])  # type: ignore[index]


def _sessions(tmp_path: Path) -> int:
    folder = tmp_path / "state" / "sessions"
    return len(os.listdir(folder)) if folder.is_dir() else 0


@pytest.mark.console
@pytest.mark.slow
@pytest.mark.anyio
async def test_malformed_requests_get_4xx_and_cost_no_console(http_server: Any, tmp_path: Path) -> None:
    server: HttpServer = http_server("--warm", "0")
    auth = {"authorization": f"Bearer {server.token}"}
    async with httpx2.AsyncClient(timeout=60.0) as http:
        for body in [*MALFORMED, b"[]", b"null", b"[1, 2]"]:
            answer = await http.post(server.url, content=body, headers={**HEADERS, **auth})
            assert 400 <= answer.status_code < 500, (body[:30], answer.status_code, answer.text[:200])
        good = json.dumps(INIT).encode()
        for headers, status in (
            ({"accept": "application/json", "content-type": "application/json"}, 406),
            ({"accept": "text/html", "content-type": "application/json"}, 406),
            ({**HEADERS, "content-type": "text/plain"}, 415),
        ):
            answer = await http.post(server.url, content=good, headers={**headers, **auth})
            assert answer.status_code == status, answer.text
        assert _sessions(tmp_path) == 0  # no console was claimed for any of them
        # Inside a session too: the SDK's parser, still a 4xx.
        opened = await http.post(server.url, content=good, headers={**HEADERS, **auth})
        assert opened.status_code == 200, opened.text
        sid = {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-06-18"}
        for body in MALFORMED[:-1]:  # (in a session, an "initialize" notification is well-formed: 202)
            answer = await http.post(server.url, content=body, headers={**HEADERS, **auth, **sid})
            assert 400 <= answer.status_code < 500, (body[:30], answer.status_code)
        ping = await http.post(
            server.url, json={"jsonrpc": "2.0", "id": 2, "method": "ping"}, headers={**HEADERS, **auth, **sid}
        )
        assert ping.status_code == 200 and '"result"' in ping.text  # the session still works
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(timeout=STOP_BOUND) == 0
    assert server.proc.stderr is not None
    log = "\n".join(server.stderr) + server.proc.stderr.read().decode(errors="replace")
    assert "Traceback" not in log and "RecursionError" not in log and " 500" not in log, log[-2000:]


def test_a_start_refusal_is_one_line_exit_3_before_any_url(tmp_path: Path) -> None:
    """Issue 32: a refusal at start was a 61-line ExceptionGroup, after the URL had been printed."""
    import subprocess

    from tests.serve.conftest import serve_args, serve_env

    args = serve_args(tmp_path, "--transport", "http", "--port", "0")
    args[args.index("--command") + 1] = "/bin/false"  # not an mcp-console: refused when the first console starts
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120, env=serve_env(tmp_path), cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr and "ExceptionGroup" not in proc.stderr, proc.stderr
    assert "serving MCP" not in proc.stderr  # the URL only once a console was verified
    assert "not an mcp-console version" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) <= 2, proc.stderr  # (the token file's line, then the refusal)
