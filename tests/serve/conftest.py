"""Helpers for the ``console-bridge serve`` tests: the installed script as a real server process,
real MCP clients (the official SDK, console-bridge's own McpConnection), nothing mocked between."""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.binaries import binary_for
from tests.support.cli import cli_path

START_BOUND = 90.0  # seconds for a server to print its URL (a cold start included)
STOP_BOUND = 30.0  # seconds for a server to exit after SIGTERM or EOF


def serve_env(tmp: Path) -> dict[str, str]:
    """The server's environment: its own state, temp and data folders under tmp."""
    env = dict(os.environ)
    for name in ("state", "tmproot", "xdg-data"):
        (tmp / name).mkdir(exist_ok=True)
    env["CONSOLE_BRIDGE_STATE_DIR"] = str(tmp / "state")
    env["TMPDIR"] = str(tmp / "tmproot")
    env["XDG_DATA_HOME"] = str(tmp / "xdg-data")
    env.pop("CONSOLE_BRIDGE_MCP_CONSOLE", None)
    return env


def serve_args(tmp: Path, *extra: str) -> list[str]:
    """``console-bridge serve`` with a fresh workspace and recordings folder under tmp."""
    (tmp / "ws").mkdir(exist_ok=True)
    (tmp / "recordings").mkdir(exist_ok=True)
    return [
        cli_path(),
        "serve",
        "--workspace",
        str(tmp / "ws"),
        "--recordings-dir",
        str(tmp / "recordings"),
        "--command",
        str(binary_for("0.0.6")),
        *extra,
    ]


def leftovers(tmp: Path) -> list[str]:
    """Private folders and TMPDIRs that survived (must be none once the server exited)."""
    sessions = tmp / "state" / "sessions"
    left = sorted(os.listdir(sessions)) if sessions.is_dir() else []
    left += sorted(n for n in os.listdir(tmp / "tmproot") if n.startswith("console-bridge-"))
    return left


def recordings_of(tmp: Path) -> list[Path]:
    root = tmp / "recordings" / "sessions"
    # each recording is a folder; its console-bridge sidecar (.console-bridge.json) sits beside it
    return sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []


def finalized(run: Path) -> bool:
    transcript = run / "transcript.md"
    return transcript.is_file() and "## Recording finished" in transcript.read_text(errors="replace")


@dataclass
class HttpServer:
    proc: subprocess.Popen[bytes]
    url: str
    token: str
    token_file: Path | None
    stderr: list[str]

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=STOP_BOUND)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=STOP_BOUND)
            raise AssertionError(f"serve did not exit within {STOP_BOUND}s of signal {sig}") from None
        finally:
            if self.proc.stderr is not None and self.proc.poll() is not None:
                # what serve said after the lines read so far (why it exited as it did): in this
                # object's repr, which a failed `assert server.stop() == 0` shows
                with contextlib.suppress(OSError, ValueError):
                    self.stderr += self.proc.stderr.read().decode(errors="replace").splitlines()[-40:]
                self.proc.stderr.close()


def read_stderr_until(proc: subprocess.Popen[bytes], pattern: str, bound: float, seen: list[str]) -> re.Match[str]:
    """Read the server's stderr line by line until ``pattern`` matches (bounded)."""
    assert proc.stderr is not None
    deadline = time.monotonic() + bound
    buffer = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stderr], [], [], 0.2)
        if not ready:
            if proc.poll() is not None:
                break
            continue
        chunk = os.read(proc.stderr.fileno(), 65536)
        if not chunk:
            break
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            text = line.decode(errors="replace")
            seen.append(text)
            match = re.search(pattern, text)
            if match:
                return match
    raise AssertionError(f"serve did not print {pattern!r} within {bound:g}s; stderr: {seen[-20:]}")


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[object]:
    """A factory: ``start(*args)`` runs ``serve --transport http --port 0 ARGS``; every server is
    stopped (SIGTERM) at the end of the test."""
    servers: list[HttpServer] = []

    def start(*args: str, token_file: Path | None = None) -> HttpServer:
        extra = ["--transport", "http", "--port", "0", *args]
        if token_file is not None:
            extra += ["--token-file", str(token_file)]
        proc = subprocess.Popen(
            serve_args(tmp_path, *extra),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=serve_env(tmp_path),
            cwd=tmp_path,
        )
        seen: list[str] = []
        url = read_stderr_until(proc, r"at (http://\S+/mcp)", START_BOUND, seen).group(1)
        token = token_file.read_text().strip() if token_file is not None else ""
        path = None
        if token_file is None and "--tokens" not in args:
            found = [m for line in seen if (m := re.search(r"bearer token written to (\S+)", line))]
            assert found, f"serve did not say where the token is: {seen}"
            path = Path(found[0].group(1))
            token = path.read_text().strip()
        server = HttpServer(proc=proc, url=url, token=token, token_file=path, stderr=seen)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()
