"""Issue 35: one remasker per host process (``_confinement/_remaskd.py``), not one per session. Two
sessions of one host process share its one inotify instance and both keep their names hidden; killing
it ends every session that relied on it (fail closed) and the next session starts a new one; a
session's end takes its watches with it; the last session's end stops the helper; nothing leaks."""

from __future__ import annotations

import os
import signal
import textwrap
import time
from pathlib import Path

import anyio
import pytest

from console_bridge import AsyncConsole, ConnectionClosed
from console_bridge._confinement import _remask_host
from tests.support.binaries import binary_for

pytestmark = [pytest.mark.anyio, pytest.mark.console, pytest.mark.usefixtures("no_leaks")]

READ = "print(repr(open('secret.env').read()))"


def _profile(tmp_path: Path) -> Path:
    profile = tmp_path / "hiding.yaml"
    profile.write_text(
        textwrap.dedent(
            """\
            name: hiding
            server: {sandbox.profile: workspace, sandbox.network: restricted, sandbox.tempdir: managed}
            expects: {sandboxed: true, network: restricted, writable: [tmpdir, workspace]}
            deny_read: ["{workspace}/secret.env"]
            """
        )
    )
    return profile


def _workspaces(tmp_path: Path, count: int) -> list[Path]:
    out = []
    for n in range(count):
        folder = tmp_path / f"ws{n}"
        folder.mkdir()
        (folder / "secret.env").write_text(f"TOKEN-START-{n}\n")
        out.append(folder)
    return out


def _inotify_fds(pid: int) -> list[int]:
    """The inotify instances process ``pid`` holds (its descriptors that are one)."""
    found = []
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{name}") == "anon_inode:inotify":
                found.append(int(name))
        except OSError:
            continue
    return found


def _watched_inodes(pid: int) -> set[int]:
    """The inodes the helper's one instance watches (``/proc/PID/fdinfo``: ``inotify wd:.. ino:HEX``)."""
    (fd,) = _inotify_fds(pid)
    text = Path(f"/proc/{pid}/fdinfo/{fd}").read_text()
    lines = [line.split() for line in text.splitlines() if line.startswith("inotify wd:")]
    return {int(part[4:], 16) for parts in lines for part in parts if part.startswith("ino:")}


def _read(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError:
        return b""


def _tree(pid: int) -> list[int]:
    """``pid`` and every descendant (read from /proc)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                parent = int(Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(name))
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        todo.extend(children.get(current, []))
    return out


def _supervisor_of(c: AsyncConsole) -> int:
    assert c.pid is not None
    return int(Path(f"/proc/{c.pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


async def _replace_and_read(c: AsyncConsole, workspace: Path, token: str) -> str:
    os.rename(workspace / "secret.env", workspace / "secret.env.bak")
    (workspace / "secret.env").write_text(f"{token}\n")
    await anyio.sleep(0.3)  # the helper acts within milliseconds (test_hidden_names measures the window)
    return (await c.run(python=READ)).combined


async def test_two_sessions_share_one_inotify_instance_and_both_stay_hidden(tmp_path: Path) -> None:
    a_ws, b_ws = _workspaces(tmp_path, 2)
    profile = str(_profile(tmp_path))
    async with (
        AsyncConsole(a_ws, command=binary_for("0.0.6"), profile=profile) as a,
        AsyncConsole(b_ws, command=binary_for("0.0.6"), profile=profile) as b,
    ):
        helper = _remask_host.current()
        assert helper is not None and helper.users == 2
        assert len(_inotify_fds(helper.pid)) == 1
        # no session holds an instance for its hidden names: no remasker (a fork of the supervisor's
        # python) in either tree, and no inotify descriptor where this user may read them
        for c in (a, b):
            root = _supervisor_of(c)
            tree = _tree(root)
            pythons = [pid for pid in tree if b"_supervisor.py" in _read(f"/proc/{pid}/cmdline")]
            assert pythons == [root], tree
            assert all(not _inotify_fds(pid) for pid in tree if os.access(f"/proc/{pid}/fd", os.R_OK)), tree
        watched = _watched_inodes(helper.pid)
        assert {os.stat(a_ws).st_ino, os.stat(b_ws).st_ino} <= watched
        assert "TOKEN" not in await _replace_and_read(a, a_ws, "TOKEN-A")
        assert "TOKEN" not in await _replace_and_read(b, b_ws, "TOKEN-B")
        assert len(_inotify_fds(helper.pid)) == 1
    # the last session's end stopped the helper and removed its socket's folder
    assert _remask_host.current() is None
    assert helper.process.returncode is not None and not os.path.exists(helper.folder)


async def test_a_sessions_end_removes_its_watches(tmp_path: Path) -> None:
    a_ws, b_ws = _workspaces(tmp_path, 2)
    profile = str(_profile(tmp_path))
    async with AsyncConsole(a_ws, command=binary_for("0.0.6"), profile=profile) as a:
        helper = _remask_host.current()
        assert helper is not None
        async with AsyncConsole(b_ws, command=binary_for("0.0.6"), profile=profile):
            both = _watched_inodes(helper.pid)
            assert os.stat(b_ws).st_ino in both
        deadline = time.monotonic() + 10
        while os.stat(b_ws).st_ino in _watched_inodes(helper.pid) and time.monotonic() < deadline:
            await anyio.sleep(0.02)
        left = _watched_inodes(helper.pid)
        assert os.stat(b_ws).st_ino not in left and os.stat(a_ws).st_ino in left
        assert len(left) < len(both)
        assert _remask_host.current() is helper and helper.users == 1
        assert "TOKEN" not in await _replace_and_read(a, a_ws, "TOKEN-A")


async def test_killing_the_helper_ends_its_sessions_and_the_next_session_starts_a_new_one(tmp_path: Path) -> None:
    a_ws, b_ws, c_ws = _workspaces(tmp_path, 3)
    profile = str(_profile(tmp_path))
    async with (
        AsyncConsole(a_ws, command=binary_for("0.0.6"), profile=profile) as a,
        AsyncConsole(b_ws, command=binary_for("0.0.6"), profile=profile) as b,
    ):
        helper = _remask_host.current()
        assert helper is not None
        servers = [a.pid, b.pid]
        os.kill(helper.pid, signal.SIGKILL)
        # fail closed: with nobody keeping the names hidden, both sessions' trees are ended
        deadline = time.monotonic() + 10
        while any(pid is not None and os.path.exists(f"/proc/{pid}") for pid in servers):
            assert time.monotonic() < deadline, "a session kept running without its remasker"
            await anyio.sleep(0.02)
        for c in (a, b):
            with pytest.raises(ConnectionClosed):
                await c.run(python="1 + 1")
        # the next session starts a new helper, and it remasks
        async with AsyncConsole(c_ws, command=binary_for("0.0.6"), profile=profile) as c:
            fresh = _remask_host.current()
            assert fresh is not None and fresh is not helper and fresh.pid != helper.pid
            assert "TOKEN" not in await _replace_and_read(c, c_ws, "TOKEN-C")
    assert _remask_host.current() is None
    assert not os.path.exists(helper.folder)


@pytest.mark.skipif(
    os.geteuid() == 0, reason="root's sessions are remasked in the helper itself (Helper.run_here): no spare child"
)
async def test_a_failed_remask_ends_that_session_and_no_other(tmp_path: Path) -> None:
    """The helper's child for a job dies (here: killed before the job, as a crash would): the session
    whose names it was to mask is ended, with the reason on its stderr; the other session, and the
    helper, go on (the next job has a new child)."""
    import psutil

    a_ws, b_ws = _workspaces(tmp_path, 2)
    profile = str(_profile(tmp_path))
    async with (
        AsyncConsole(a_ws, command=binary_for("0.0.6"), profile=profile) as a,
        AsyncConsole(b_ws, command=binary_for("0.0.6"), profile=profile) as b,
    ):
        helper = _remask_host.current()
        assert helper is not None
        (spare,) = psutil.Process(helper.pid).children()
        spare.kill()
        deadline = time.monotonic() + 10
        while spare.status() != psutil.STATUS_ZOMBIE:  # (the helper reaps it at its next job)
            assert time.monotonic() < deadline
            await anyio.sleep(0.01)
        server = a.pid
        (a_ws / "secret.env").write_text("TOKEN-LATE\n")  # an event for a's hidden name: a job for the dead child
        deadline = time.monotonic() + 10
        while server is not None and os.path.exists(f"/proc/{server}"):
            assert time.monotonic() < deadline, "the session ran on after its remask failed"
            await anyio.sleep(0.02)
        with pytest.raises(ConnectionClosed, match="the shared remasker failed"):
            await a.run(python="1 + 1")
        assert helper.alive() and _remask_host.current() is helper
        assert "TOKEN" not in await _replace_and_read(b, b_ws, "TOKEN-B")


def test_the_helper_outlives_the_thread_that_started_it() -> None:
    """Sessions build their supervision in worker threads, which end when idle (anyio: 10 s): a
    parent-death signal is sent when the *thread* that forked ends, so the helper must not ask for
    one (it would take every session with it); it ends when the host closes its stdin."""
    import threading

    started: list[_remask_host.RemaskHelper] = []
    thread = threading.Thread(target=lambda: started.append(_remask_host.RemaskHelper()))
    thread.start()
    thread.join()
    (helper,) = started
    try:
        time.sleep(0.3)
        assert helper.alive()
    finally:
        helper.stop()
    assert helper.process.returncode == 0 and not os.path.exists(helper.folder)


def test_the_helper_ends_with_its_host_process() -> None:
    """Nothing outlives its owner: a host killed at once (no release) takes its helper and the
    helper's folder with it."""
    import subprocess
    import sys

    code = (
        "from console_bridge._confinement import _remask_host\n"
        "helper = _remask_host.acquire()\n"
        "print(helper.pid, helper.folder, flush=True)\n"
        "import time; time.sleep(60)\n"
    )
    host = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert host.stdout is not None
        pid_text, folder = host.stdout.readline().split()
        pid = int(pid_text)
        assert os.path.exists(f"/proc/{pid}")
    finally:
        host.kill()
        host.wait()
        if host.stdout is not None:
            host.stdout.close()
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{pid}") or os.path.exists(folder):
        assert time.monotonic() < deadline, "the helper outlived its host"
        time.sleep(0.02)


def test_a_registration_whose_remask_fails_is_refused_and_its_link_hung_up(tmp_path: Path) -> None:
    """The protocol, as the server's process speaks it (``_remask.register``): namespaces the helper
    cannot enter (here a descriptor that is no mount namespace) make the first scan fail; the session
    is refused with the reason and the helper hangs up (what a supervisor ends its session on); the
    helper goes on."""
    import socket

    from console_bridge._confinement import _remask

    helper = _remask_host.RemaskHelper()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as link:
            link.connect(helper.path)
            namespaces = [os.open("/proc/self/ns/user", os.O_RDONLY), os.open(os.devnull, os.O_RDONLY)]
            with pytest.raises(OSError, match=r"refused the session's hidden names .*setns"):
                _remask.register(link.fileno(), {"names": [str(tmp_path / "secret")], "etc": None}, namespaces)
            link.settimeout(10)
            assert link.recv(1) == b""  # hung up
        assert helper.alive()
    finally:
        helper.stop()
