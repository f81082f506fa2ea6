"""Plain helpers for the connection tests: configs, server logs, process tracking."""

from __future__ import annotations

import contextlib
import re
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import psutil

from console_bridge import AsyncMcpConnection, McpConnection, Owner
from tests.support.waiting import eventually, eventually_blocking

OWNER = Owner("agent-1", session_id="s-1")
OTHER = Owner("agent-2", session_id="s-2")

#: Small, explicit bounds for every connection a test opens.
TIMEOUT = 5.0
STARTUP_TIMEOUT = 15.0
SHUTDOWN_GRACE = 1.0

#: Processes started by fixtures (the HTTP server) that may outlive a single test.
FIXTURE_PIDS: set[int] = set()

Conn = AsyncMcpConnection | McpConnection


def config(entry: Mapping[str, Any], name: str = "s") -> dict[str, Any]:
    """An ``mcpServers`` config holding one entry."""
    return {"mcpServers": {name: dict(entry)}}


def read_log(path: Path) -> list[str]:
    """The lines a fixture server logged (``--log``), or [] when it logged nothing yet."""
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []


async def wait_for_line(path: Path, line: str, timeout: float = 5.0) -> None:
    """Wait (bounded) until the server log holds ``line``: sync on the file, not on a guess."""
    await eventually(lambda: line in read_log(path), timeout, f"{line!r} in {path}", every=0.01)


def wait_for_file(path: Path, timeout: float = 10.0) -> str:
    """Wait (bounded, blocking) until ``path`` exists and return its text."""
    eventually_blocking(path.exists, timeout, f"{path} to appear", every=0.01)
    return path.read_text(encoding="ascii")


def is_alive(proc: psutil.Process) -> bool:
    """Alive and not a zombie (a zombie has exited; only its exit status is left)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@contextlib.contextmanager
def announced_server(argv: list[str], what: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """A fixture server that prints ``READY <url>`` on stdout: yields it and the URL, and stops it."""
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    FIXTURE_PIDS.add(proc.pid)
    ready: list[str] = []
    got = threading.Event()

    def read_ready() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("READY "):
                ready.append(line)
                break
        got.set()

    reader = threading.Thread(target=read_ready, daemon=True)
    reader.start()
    try:
        match = re.match(r"READY (http://\S+)", ready[0]) if got.wait(30) and ready else None
        if match is None:
            raise RuntimeError(f"the {what} fixture server did not announce itself: {ready!r}")
        yield proc, match.group(1)
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        reader.join(5)
        if proc.stdout is not None:
            proc.stdout.close()
        FIXTURE_PIDS.discard(proc.pid)


def threads_left(before: set[threading.Thread], timeout: float = 10.0) -> list[str]:
    """Names of threads started since ``before`` that are still alive after ``timeout``.

    The portal thread is joined by ``close``; asyncio's per-child ``waitpid`` threads
    end a moment after their child is reaped, so they get a short while to go.
    """
    deadline = time.monotonic() + timeout
    while True:
        extra = [t for t in threading.enumerate() if t not in before and t.is_alive()]
        if not extra or time.monotonic() > deadline:
            return [t.name for t in extra]
        time.sleep(0.02)


def pid_alive(pid: int) -> bool:
    proc = process(pid)
    return proc is not None and is_alive(proc)


def process(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.Error:
        return None


class ProcessWatch:
    """Records every process of the tracked connections; asserts none of them survives.

    The record is the union of the connection's own tree record (server pid plus every
    descendant it saw), our own psutil snapshots of the live descendants, pids added
    by the test, and any new child of the test process.
    """

    def __init__(self) -> None:
        self.conns: list[Conn] = []
        self.procs: dict[int, psutil.Process] = {}
        self.children_before = {p.pid for p in psutil.Process().children(recursive=True)}

    def track(self, conn: Conn) -> None:
        if conn not in self.conns:
            self.conns.append(conn)
        self.snapshot()

    def add_pid(self, pid: int) -> None:
        proc = process(pid)
        if proc is not None:
            self.procs.setdefault(pid, proc)

    def snapshot(self) -> None:
        """Record the server pid, the connection's recorded tree and the live descendants now."""
        for conn in self.conns:
            inner = conn._async if isinstance(conn, McpConnection) else conn
            child = inner._child
            if child is None:
                continue
            self.add_pid(child.pid)
            for pid in child.tree.known_pids:
                self.add_pid(pid)
            root = process(child.pid)
            if root is not None and is_alive(root):
                try:
                    for proc in root.children(recursive=True):
                        self.procs.setdefault(proc.pid, proc)
                except psutil.Error:
                    pass

    @property
    def pids(self) -> set[int]:
        return set(self.procs)

    def survivors(self) -> list[psutil.Process]:
        own = [p for p in self.procs.values() if is_alive(p)]
        new_children = [
            p
            for p in psutil.Process().children(recursive=True)
            if p.pid not in self.children_before and p.pid not in FIXTURE_PIDS and is_alive(p)
        ]
        return own + [p for p in new_children if p.pid not in self.procs]

    def assert_gone(self) -> None:
        """No recorded process is alive now."""
        self.snapshot()
        left = self.survivors()
        assert not left, f"processes survived: {[(p.pid, p.cmdline()) for p in left if is_alive(p)]}"
