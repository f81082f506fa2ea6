"""The stdio child: replacement environment, piped and bounded stderr, and a process tree that dies with it."""

from __future__ import annotations

import io
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from console_bridge import ConnectionClosed
from tests.support.places import server_entry

from .helpers import ProcessWatch, pid_alive, wait_for_file

pytestmark = pytest.mark.anyio

SECRET = "CB_TEST_SECRET_TOKEN"
INHERITED = {"PATH", "HOME", "LANG", "TMPDIR"}


async def child_report(conn: Any) -> dict[str, Any]:
    result = await conn.call_tool("env", {})
    report: dict[str, Any] = json.loads(result.text)
    return report


# --------------------------------------------------------------- environment


async def test_child_gets_only_the_short_allowlist_plus_entry_env(
    conns: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(SECRET, "hunter2")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "also-secret")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    conn = conns(server_entry("probe.py", env={"ENTRY_VAR": "from-entry"}), tools=["env"])
    await conn.connect()
    env = (await child_report(conn))["env"]

    assert SECRET not in env
    assert "AWS_SECRET_ACCESS_KEY" not in env
    assert "PYTHONPATH" not in env
    assert "hunter2" not in json.dumps(env)
    allowed = INHERITED | {"ENTRY_VAR"}
    assert {k for k in env if not k.startswith("LC_")} <= allowed
    assert env["ENTRY_VAR"] == "from-entry"
    assert env["PATH"] == os.environ["PATH"]
    assert env["LANG"] == "C.UTF-8"
    assert env["LC_ALL"] == "C.UTF-8"
    assert env["TMPDIR"] == str(tmp_path)
    if "HOME" in os.environ:
        assert env["HOME"] == os.environ["HOME"]


async def test_entry_env_overrides_the_inherited_variables(conns: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/host/home")
    conn = conns(server_entry("probe.py", env={"HOME": "/entry/home", SECRET: "given on purpose"}), tools=["env"])
    await conn.connect()
    env = (await child_report(conn))["env"]
    assert env["HOME"] == "/entry/home"
    assert env[SECRET] == "given on purpose"  # the entry may hand over a variable explicitly


async def test_missing_host_variables_are_simply_absent(conns: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TMPDIR", raising=False)
    monkeypatch.delenv("LANG", raising=False)
    conn = conns(server_entry("probe.py"), tools=["env"])
    await conn.connect()
    env = (await child_report(conn))["env"]
    assert "TMPDIR" not in env
    assert "LANG" not in env


# --------------------------------------------------------------------- stderr


async def test_stderr_flood_at_startup_does_not_deadlock(conns: Any) -> None:
    conn = conns(server_entry("stderr_flood.py"), tools=["t"], timeout=10)
    await conn.connect()  # 10 MiB on stderr before the server even reads initialize
    assert (await conn.call_tool("t", {})).text == "ok"
    tail = conn.status().stderr_tail
    assert 0 < len(tail.encode()) <= 64 * 1024
    assert set(tail) <= {"E", "\n"}


async def test_stderr_tail_is_bounded_and_holds_the_tail(conns: Any) -> None:
    conn = conns(server_entry("probe.py"), tools=["stderr"], timeout=10)
    await conn.connect()
    assert (await conn.call_tool("stderr", {"bytes": 10 * 1024 * 1024})).text == "ok"
    # The marker is written last; the ring may still be draining the pipe after the reply.
    tail = conn.status().stderr_tail
    for _ in range(500):  # bounded: at most 5 s
        if tail.endswith("END-OF-STDERR\n"):
            break
        await anyio.sleep(0.01)
        tail = conn.status().stderr_tail
    assert tail.endswith("F\nEND-OF-STDERR\n")
    assert len(tail.encode()) <= 64 * 1024
    assert len(tail.encode()) >= 60 * 1024  # it keeps (about) the whole limit, not a few lines
    # still usable afterwards
    assert (await conn.call_tool("stderr", {"bytes": 0})).text == "ok"


async def test_stderr_limit_is_configurable(conns: Any) -> None:
    conn = conns(server_entry("stderr_flood.py"), tools=["t"], stderr_limit=1000)
    await conn.connect()
    assert len(conn.status().stderr_tail.encode()) <= 1000


async def test_works_when_sys_stderr_has_no_fileno(conns: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = io.StringIO()
    monkeypatch.setattr(sys, "stderr", fake)
    with pytest.raises(io.UnsupportedOperation):
        sys.stderr.fileno()
    conn = conns(server_entry("stderr_flood.py"), tools=["t"])
    await conn.connect()
    assert (await conn.call_tool("t", {})).text == "ok"
    assert fake.getvalue() == ""  # the child's stderr went to the ring, not to ours
    assert conn.status().stderr_tail


# --------------------------------------------------------------- stdin


def _switches(pid: int) -> int:
    """Voluntary plus involuntary context switches of ``pid`` so far (every time it was woken)."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    return int(fields["voluntary_ctxt_switches"]) + int(fields["nonvoluntary_ctxt_switches"])


async def test_requests_reach_the_server_without_waking_the_supervisor(conns: Any) -> None:
    conn = conns(server_entry("probe.py"), tools=["env", "stdin"])
    await conn.connect()
    supervisor = conn.supervisor_pid
    assert supervisor is not None and supervisor != conn.pid
    # The server reads the host's socket itself, one-way: it cannot write back into it.
    assert json.loads((await conn.call_tool("stdin", {})).text) == {"kind": "socket", "write": "EPIPE"}
    before = _switches(supervisor)
    for _ in range(30):
        await child_report(conn)
    # Relayed, every request woke the supervisor at least once (30+); now nothing does.
    assert _switches(supervisor) - before <= 3


async def test_closing_from_outside_still_ends_the_servers_input(conns: Any, watch: ProcessWatch) -> None:
    """SIGTERM to the supervisor (``console-bridge kill``) shuts the server's stdin: it exits at EOF."""
    conn = conns(server_entry("probe.py"), tools=["env"])
    await conn.connect()
    await child_report(conn)
    supervisor, server = conn.supervisor_pid, conn.pid
    assert supervisor is not None and server is not None
    os.kill(supervisor, signal.SIGTERM)
    with anyio.fail_after(10):
        while pid_alive(supervisor):
            await anyio.sleep(0.02)
    assert not pid_alive(server)
    assert "asked to close from outside" in conn.status().stderr_tail
    with pytest.raises(ConnectionClosed):
        await child_report(conn)


# --------------------------------------------------------------- process tree


@pytest.mark.parametrize("inherit", [False, True], ids=["devnull", "inherit-stdio"])
@pytest.mark.parametrize("how", ["close", "cancel"])
async def test_setsid_grandchild_dies_with_the_connection(
    conns: Any, watch: ProcessWatch, tmp_path: Path, inherit: bool, how: str
) -> None:
    pid_file = tmp_path / "grandchild.pid"
    args = ["--inherit-stdio"] if inherit else []
    conn = conns(server_entry("setsid_grandchild.py", *args, env={"GRANDCHILD_PID_FILE": str(pid_file)}), tools=["t"])
    await conn.connect()
    grandchild = int(wait_for_file(pid_file))
    watch.add_pid(grandchild)
    assert pid_alive(grandchild)
    assert os.getsid(grandchild) != os.getsid(conn.pid)  # it really left the server's session
    assert (await conn.call_tool("t", {})).text == "ok"

    await (conn.close() if how == "close" else conn.cancel())

    assert not pid_alive(grandchild)
    assert not pid_alive(conn.status().pid or 0)
    watch.assert_gone()
    with pytest.raises(ConnectionClosed):
        await conn.call_tool("t", {})
