"""Fixtures for the real-process tests of the connection core.

Every connection a test builds through ``conns`` (or ``blocking_conns``) is tracked:
after the test it is closed, and its server and every descendant ever seen (by the
connection's own record and by our own psutil snapshots) must be gone, zombies
counting as dead.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest

from console_bridge import AsyncMcpConnection, McpConnection
from tests.support.places import PYTHON, SERVERS

from .helpers import (
    OWNER,
    SHUTDOWN_GRACE,
    STARTUP_TIMEOUT,
    TIMEOUT,
    ProcessWatch,
    announced_server,
    config,
    read_log,
)

ConnFactory = Callable[..., AsyncMcpConnection]
BlockingFactory = Callable[..., McpConnection]


Source = Mapping[str, Any] | str | os.PathLike[str]


def _config(entry: Source, server: str) -> Mapping[str, Any] | str | os.PathLike[str]:
    """A path or whole config as is; a bare entry wrapped as ``{"mcpServers": {server: entry}}``."""
    if isinstance(entry, Mapping) and "mcpServers" not in entry:
        return config(entry, server)
    return entry


def _kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    kwargs.setdefault("owner", OWNER)
    kwargs.setdefault("timeout", TIMEOUT)
    kwargs.setdefault("startup_timeout", STARTUP_TIMEOUT)
    kwargs.setdefault("shutdown_grace", SHUTDOWN_GRACE)
    return kwargs


@pytest.fixture
def watch() -> Iterator[ProcessWatch]:
    """A ProcessWatch whose survivors fail the test at teardown (after a safety kill)."""
    w = ProcessWatch()
    yield w
    w.snapshot()
    left = w.survivors()
    for proc in left:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    assert not left, f"processes survived the test: {[p.pid for p in left]}"


@pytest.fixture
def log(tmp_path: Path) -> Path:
    """Where a fixture server started with ``--log`` writes the methods it received."""
    return tmp_path / "server.log"


@pytest.fixture
async def conns(watch: ProcessWatch) -> AsyncIterator[ConnFactory]:
    """Build tracked AsyncMcpConnections with small bounds; all are closed and checked after the test.

    ``conns(entry, **kwargs)`` takes an mcpServers entry (or a whole config with ``server=``).
    """
    made: list[AsyncMcpConnection] = []

    def make(entry: Source, *, server: str = "s", **kwargs: Any) -> AsyncMcpConnection:
        cfg = _config(entry, server)
        conn = AsyncMcpConnection(cfg, server, **_kwargs(kwargs))
        made.append(conn)
        watch.track(conn)
        return conn

    yield make
    watch.snapshot()
    for conn in made:
        with anyio.fail_after(10):
            await conn.close()
    watch.assert_gone()


@pytest.fixture
def blocking_conns(watch: ProcessWatch) -> Iterator[BlockingFactory]:
    """As ``conns``, for the blocking twin ``McpConnection``."""
    made: list[McpConnection] = []

    def make(entry: Source, *, server: str = "s", **kwargs: Any) -> McpConnection:
        cfg = _config(entry, server)
        conn = McpConnection(cfg, server, **_kwargs(kwargs))
        made.append(conn)
        watch.track(conn)
        return conn

    yield make
    watch.snapshot()
    for conn in made:
        conn.close()
    watch.assert_gone()


class HttpServer:
    """The running HTTP fixture server: its endpoint URL and its method/header log."""

    def __init__(self, proc: subprocess.Popen[str], url: str, log: Path) -> None:
        self.proc = proc
        self.url = url
        self.base = url.rsplit("/", 1)[0]
        self.log = log

    def mark(self) -> int:
        return len(read_log(self.log))

    def lines_since(self, mark: int) -> list[str]:
        return read_log(self.log)[mark:]


@pytest.fixture(scope="module")
def http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServer]:
    """wellbehaved.py --http 0 under uvicorn on 127.0.0.1; the URL comes from its READY line."""
    log = tmp_path_factory.mktemp("http") / "server.log"
    with announced_server([PYTHON, str(SERVERS / "wellbehaved.py"), "--http", "0", "--log", str(log)], "HTTP") as (
        proc,
        url,
    ):
        yield HttpServer(proc, url, log)
