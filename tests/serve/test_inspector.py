"""A third-party client: the MCP Inspector CLI (npm, pinned in tests/serve/package.json).

`.ci/run` installs it with `npm ci --prefix tests/serve`; without node/npm or that install the
tests skip, saying which is missing.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.serve.conftest import HttpServer, finalized, leftovers, recordings_of, serve_args, serve_env

HERE = Path(__file__).parent
INSPECTOR = HERE / "node_modules" / ".bin" / "mcp-inspector"
RUN_BOUND = 120.0  # seconds for one inspector run (it starts the server, a cold start)

pytestmark = [
    pytest.mark.console,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed (the MCP Inspector needs it)"),
    pytest.mark.skipif(
        not INSPECTOR.exists(),
        reason=f"the MCP Inspector is not installed at {INSPECTOR}; run `npm ci --prefix tests/serve` (.ci/run does)",
    ),
]


def inspector(tmp_path: Path, *args: str) -> Any:
    done = subprocess.run(
        [str(INSPECTOR), "--cli", *args],
        capture_output=True,
        text=True,
        timeout=RUN_BOUND,
        env=serve_env(tmp_path),
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, f"inspector failed ({done.returncode}): {done.stdout[-2000:]} {done.stderr[-2000:]}"
    return json.loads(done.stdout)


def test_inspector_over_stdio(tmp_path: Path) -> None:
    server = serve_args(tmp_path)
    listed = inspector(tmp_path, *server, "--method", "tools/list")
    names = [tool["name"] for tool in listed["tools"]]
    assert names == ["send", "console_open", "console_close", "console_list"], names
    control = listed["tools"][0]["inputSchema"]["properties"]["control"]
    assert control["anyOf"] == [{"type": "string", "enum": ["interrupt"]}, {"type": "null"}], control  # null: not given
    called = inspector(tmp_path, *server, "--method", "tools/call", "--tool-name", "send", "--tool-arg", "python=6*7")
    assert called["isError"] is False and called["content"][0]["text"].strip() == "42"
    read = inspector(tmp_path, *server, "--method", "resources/read", "--uri", "console://session/sandbox")
    assert json.loads(read["contents"][0]["text"])["sandbox"]["sandboxed"] is True
    assert leftovers(tmp_path) == []
    assert recordings_of(tmp_path) and all(finalized(run) for run in recordings_of(tmp_path))


def test_inspector_over_http(http_server: Any, tmp_path: Path) -> None:
    server: HttpServer = http_server("--warm", "0")
    auth = [server.url, "--transport", "http", "--header", f"Authorization: Bearer {server.token}"]
    called = inspector(tmp_path, *auth, "--method", "tools/call", "--tool-name", "send", "--tool-arg", "python=6*7")
    assert called["content"][0]["text"].strip() == "42"
    done = subprocess.run(
        [str(INSPECTOR), "--cli", server.url, "--transport", "http", "--method", "tools/list"],
        capture_output=True,
        text=True,
        timeout=RUN_BOUND,
        check=False,
    )
    assert done.returncode != 0  # no token: refused
    assert server.stop() == 0
    assert leftovers(tmp_path) == []
