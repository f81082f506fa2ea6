"""``console-bridge ps`` / ``kill``: sessions of other processes, seen and stopped from outside."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.support.binaries import binary_for
from tests.support.places import ROOT

pytestmark = [pytest.mark.console]

CLI = ROOT / ".venv" / "bin" / "console-bridge"
HOST = """
import json, sys, time
from console_bridge import Console, ConnectionClosed, Owner
with Console(sys.argv[1], command=sys.argv[2], recordings_dir=sys.argv[3], owner=Owner("agent-7")) as console:
    console.run(python="x = 1")
    status = console.status()
    print(json.dumps({"id": status.session_id, "sup": status.supervisor_pid, "recording": str(status.recording)}),
          flush=True)
    sys.stdin.readline()
    try:
        console.run(python="print(x)")
        print("still open", flush=True)
    except ConnectionClosed as exc:
        print("closed:", str(exc).splitlines()[0], flush=True)
"""


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "CONSOLE_BRIDGE_STATE_DIR": str(tmp_path / "state")}


def _host(tmp_path: Path, env: dict[str, str]) -> tuple[subprocess.Popen[str], dict[str, object]]:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-c", HOST, str(ws), str(binary_for("0.0.6")), str(tmp_path / "rec")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    return proc, json.loads(proc.stdout.readline())


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CLI), *args], capture_output=True, text=True, env=env, timeout=60)


def _tree(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def _alive(procs: list[psutil.Process]) -> list[int]:
    return [p.pid for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def test_ps_lists_another_process_session_and_kill_closes_it_cleanly(tmp_path: Path, env: dict[str, str]) -> None:
    host, info = _host(tmp_path, env)
    try:
        listed = json.loads(_cli(env, "ps", "--json").stdout)
        [mine] = [s for s in listed if s["id"] == info["id"]]
        assert mine["owner"] == "agent-7" and mine["host_pid"] == host.pid and mine["host_alive"]
        assert mine["workspace"] == str(tmp_path / "ws") and mine["profile"] == "read-only"
        assert "x = 1" not in json.dumps(listed)  # no code, no arguments in the registry
        assert mine["server_pid"] and mine["recording"] == info["recording"]
        # what holds each limit is named (a weaker mechanism too), never dropped
        assert set(mine["limits"]) >= {"memory", "processes", "tmpdir"} and mine["limits"]["tmpdir"] == "tmpfs"
        assert all(how for how in mine["limits"].values()), mine["limits"]
        usage = mine["usage"]  # read from outside: the session's cgroups, else its processes
        assert usage["cpu_seconds"] > 0 and usage["memory"] > 0 and usage["processes"] >= 2, usage
        assert usage["recording_bytes"] > 0
        table = _cli(env, "ps").stdout
        assert info["id"] in table and "agent-7" in table and "tmpdir:tmpfs" in table
        assert table.splitlines()[0].split()[6:10] == ["CPU", "MEM", "PEAK", "PROCS"], table
        top = _cli(env, "top", "--interval", "0.2", "--count", "2")
        assert top.returncode == 0 and top.stdout.count(info["id"]) == 2, top.stdout
        assert top.stdout.splitlines()[0].split() == ["ID", "OWNER", "CPU%", "MEM", "PEAK", "PROCS"]
        tree = _tree(int(info["sup"]))  # type: ignore[call-overload]
        done = _cli(env, "kill", str(info["id"]))
        assert done.returncode == 0, done.stderr
        assert _alive(tree) == []
        transcript = Path(str(info["recording"])) / "transcript.md"
        assert "Recording finished" in transcript.read_text()
        assert host.stdin is not None and host.stdout is not None
        host.stdin.write("\n")
        host.stdin.flush()
        assert host.stdout.readline().startswith("closed:")
        assert host.wait(timeout=30) == 0
        assert json.loads(_cli(env, "ps", "--json").stdout) == []
    finally:
        host.kill()
        host.wait()
        for stream in (host.stdin, host.stdout):
            if stream is not None:
                stream.close()


def test_kill_unknown_id_is_a_usage_error(env: dict[str, str]) -> None:
    done = _cli(env, "kill", "nope")
    assert done.returncode == 2 and "no live session" in done.stderr


def test_ps_sweeps_a_session_whose_host_and_supervisor_died(tmp_path: Path, env: dict[str, str]) -> None:
    host, info = _host(tmp_path, env)
    try:
        tree = _tree(int(info["sup"]))  # type: ignore[call-overload]
        folder = Path(env["CONSOLE_BRIDGE_STATE_DIR"]) / "sessions" / str(info["id"])
        assert folder.is_dir()
        # Everything at once, the supervisor included: nothing gets to clean up.
        for proc in [psutil.Process(host.pid), *tree]:
            with contextlib.suppress(psutil.NoSuchProcess):  # a sandboxed helper may end with its parent
                proc.send_signal(signal.SIGKILL)
        host.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _alive(tree):
            time.sleep(0.05)
        assert json.loads(_cli(env, "ps", "--json").stdout) == []
        assert not folder.exists()
        assert _alive(tree) == []
    finally:
        host.kill()
        host.wait()
        for stream in (host.stdin, host.stdout):
            if stream is not None:
                stream.close()


def test_kill_during_a_cell_tells_its_owner_the_session_was_closed_from_outside(
    tmp_path: Path, env: dict[str, str]
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "long.py").write_text("import time\nprint('started', flush=True)\ntime.sleep(60)\n")
    run = subprocess.Popen(
        [str(CLI), "run", "--recordings-dir", str(tmp_path / "rec"), "long.py"],
        cwd=ws,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert run.stdout is not None and run.stdout.readline() == "started\n"
        [session] = json.loads(_cli(env, "ps", "--json").stdout)
        assert _cli(env, "kill", str(session["id"])).returncode == 0
        _, stderr = run.communicate(timeout=60)
        assert run.returncode == 1, stderr
        assert "the session was closed from outside while the cell ran (`console-bridge kill`" in stderr, stderr
        assert "refused the call" not in stderr
    finally:
        run.kill()
        run.communicate()
