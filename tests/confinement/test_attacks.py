"""Confinement, attacked through the library with the real binary and real kernel facilities.

Each test asserts that the attack failed AND that the session still works afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from console_bridge import AsyncConsole, LaunchRefused, Limits
from tests.confinement.conftest import plant_home
from tests.support.binaries import binary_for
from tests.support.places import ROOT

pytestmark = [pytest.mark.anyio, pytest.mark.console, pytest.mark.usefixtures("no_leaks")]

CANARY = "CANARY-7f3a"
HAS_R = shutil.which("R") is not None
#: What holds the process limit for the whole tree: a cgroup where the host delegates one, else (a
#: normal user) RLIMIT_NPROC counted over the session's user namespace.
TREE_WIDE = ("cgroup1", "cgroup2", "systemd-scope", "userns-rlimit")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temporary HOME holding credential stores with canaries."""
    places = (".ssh/id_rsa", ".aws/credentials", ".netrc", ".config/gh/hosts.yml", ".kube/config")
    return plant_home(tmp_path, monkeypatch, places, CANARY)


def _console(workspace: Path, version: str = "0.0.6", **kwargs: object) -> AsyncConsole:
    return AsyncConsole(workspace, command=binary_for(version), **kwargs)  # type: ignore[arg-type]


async def _works(console: AsyncConsole) -> None:
    result = await console.run(python="print(1 + 1)") if "python" in console.languages else None
    if result is not None:
        assert result.text.strip().endswith("2"), result.text
        assert result.error is None, result.error  # a cell that hit nothing is not blamed for an earlier one


@pytest.mark.parametrize("version", ["0.0.5", "0.0.6"])
@pytest.mark.parametrize("profile", ["read-only", "workspace"])
async def test_secrets_and_other_sessions_are_unreadable(
    version: str, profile: str, home: Path, tmp_path: Path, workspace: Path, recordings: Path
) -> None:
    git = workspace / ".git"
    git.mkdir()
    (git / "config").write_text(f"[http]\n\textraheader = AUTHORIZATION: basic {CANARY}\n")
    langs = ("python", "sql", "r") if HAS_R and version == "0.0.6" else ("python", "sql")
    other_ws = tmp_path / "other"
    other_ws.mkdir()
    async with _console(other_ws, version, recordings_dir=recordings) as bystander:
        planted = await bystander.run(
            python=f"import os; p = os.path.join(os.environ['TMPDIR'], 'secret.txt'); open(p, 'w').write('{CANARY}');"
            " print(p)"
        )
        secret_tmp = planted.text.strip().splitlines()[-1]
        bystander_recording = bystander.status().recording
        assert bystander_recording is not None
        targets = [
            str(home / ".ssh" / "id_rsa"),
            str(home / ".aws" / "credentials"),
            str(home / ".netrc"),
            str(home / ".config" / "gh" / "hosts.yml"),
            str(git / "config"),
            "/etc/shadow",
            secret_tmp,
            str(bystander_recording / ("transcript.md" if version == "0.0.6" else "transcript.qmd")),
        ]
        async with _console(workspace, version, profile=profile, languages=langs, recordings_dir=recordings) as c:
            for target in targets:
                out = await c.run(python=f"print(open({target!r}).read())")
                assert CANARY not in out.combined and "root:" not in out.combined, (target, out.combined)
                assert "Error" in out.combined, (target, out.combined)  # PermissionError / FileNotFoundError
                sql = await c.run(sql=f"select content from read_text('{target}')")
                assert CANARY not in sql.combined and "root:" not in sql.combined, (target, sql.combined)
                if "r" in langs:
                    r_out = await c.run(r=f'tryCatch(cat(readLines("{target}")), error = function(e) cat("denied"))')
                    assert CANARY not in r_out.combined and "root:" not in r_out.combined, (target, r_out.combined)
            listing = await c.run(python=f"import os; print(os.listdir({str(home / '.ssh')!r}))")
            assert "id_rsa" not in listing.text
            status = c.status()
            # home is outside the view (nothing of it has a name); the workspace's .git is inside it and denied
            assert not any(
                entry["path"] == str(home) or str(home).startswith(entry["path"] + "/") for entry in status.view
            )
            assert str(git) in status.deny_read
            await _works(c)
        # the bystander is untouched
        assert (await bystander.run(python=f"print(open({secret_tmp!r}).read())")).text.strip() == CANARY


async def test_profile_deny_read_adds_paths(tmp_path: Path, workspace: Path, recordings: Path) -> None:
    private = workspace / "private"
    private.mkdir()
    (private / "data.csv").write_text(f"{CANARY}\n")
    (workspace / "public.csv").write_text("a\n1\n")
    profile = tmp_path / "narrow.yaml"
    profile.write_text(
        textwrap.dedent(
            """\
            name: narrow
            server: {sandbox.profile: read_only, sandbox.network: restricted, sandbox.tempdir: managed}
            expects: {sandboxed: true, network: restricted, writable: [tmpdir]}
            deny_read: ["{workspace}/private"]
            """
        )
    )
    async with _console(workspace, profile=str(profile), recordings_dir=recordings) as console:
        out = await console.run(python="print(open('private/data.csv').read())")
        assert CANARY not in out.combined and "PermissionError" in out.combined
        assert (await console.run(python="print(open('public.csv').read())")).text.startswith("a")


def test_profile_deny_read_is_validated(tmp_path: Path) -> None:
    profile = tmp_path / "bad.yaml"
    profile.write_text(
        "server: {sandbox.profile: read_only}\nexpects: {sandboxed: true, network: restricted, writable: [tmpdir]}\n"
        'deny_read: ["relative/path"]\n'
    )
    with pytest.raises(LaunchRefused, match="relative"):
        AsyncConsole(tmp_path, profile=str(profile))


@pytest.mark.anyio
@pytest.mark.console
async def test_the_worker_is_under_the_process_limit_when_start_returns(workspace: Path, recordings: Path) -> None:
    """The worker the probe booted is adopted while the probe runs (its cgroup move off the
    first cell's path): when start() returns it already holds the cells' process limit."""
    async with _console(workspace, limits=Limits(processes=64), recordings_dir=recordings) as console:
        confined = console._confined
        assert confined.confinement is not None
        worker = confined.worker.process
        assert worker is not None and worker.cmdline()[1] == "worker"
        cells = confined.confinement.cgroups.cells
        if cells is not None:  # a nested cells group (cgroup v1, a systemd scope)
            assert str(worker.pid) in (cells / "cgroup.procs").read_text().split()
        else:  # the user-namespace rlimit
            assert "nproc" in confined.confinement.child_rlimits
            assert worker.rlimit(psutil.RLIMIT_NPROC) == (64, 64)
        assert (await console.run(python="1 + 1")).text.strip() == "2"
        assert confined.worker.process is worker  # the first cell found it adopted


def _fork_bomb(child: str) -> str:
    """A cell that forks until refused; each child runs ``child``, then exits (never waited for)."""
    return textwrap.dedent(
        f"""\
        import os, time
        n = 0
        try:
            for _ in range(5000):
                if os.fork() == 0:
                    {child}
                    os._exit(0)
                n += 1
        except OSError as exc:
            print("refused after", n, type(exc).__name__)
        """
    )


async def test_fork_bomb_stops_at_the_process_limit(tmp_path: Path, workspace: Path, recordings: Path) -> None:
    code = _fork_bomb("time.sleep(600)")
    other = tmp_path / "bystander"
    other.mkdir()
    async with (
        _console(other, recordings_dir=recordings) as bystander,
        _console(workspace, limits=Limits(processes=128), recordings_dir=recordings) as console,
    ):
        assert console.status().limits["processes"]["enforced_by"] in TREE_WIDE
        out = await console.run(python=code, timeout=60)
        assert "refused after" in out.combined, out.combined
        assert int(out.combined.split("refused after")[1].split()[0]) < 128
        assert out.error is not None and out.error.kind == "limit" and out.error.name == "processes", out.error
        assert "process limit" in out.error.message
        await _works(console)
        await _works(bystander)
        assert (await bystander.run(python="import os; os.fork() or os._exit(0); print('forked')")).text


async def test_zombies_a_fork_bomb_leaves_fail_no_later_cell_that_starts_nothing(
    workspace: Path, recordings: Path
) -> None:
    # Children that exit at once but are never waited for stay as zombies of the worker and keep
    # counting against the limit (a cgroup's pids and RLIMIT_NPROC alike) until the worker restarts.
    code = _fork_bomb("pass")
    fork = "import os\npid = os.fork()\nif pid == 0:\n    os._exit(0)\nos.waitpid(pid, 0)\nprint('forked')"
    async with _console(workspace, limits=Limits(processes=64), recordings_dir=recordings) as console:
        await _works(console)  # the smallest limits leave an idle session room: nothing is blamed on it
        out = await console.run(python=code, timeout=60)
        assert "refused after" in out.combined and out.error is not None and out.error.name == "processes"
        await _works(console)
        await _works(console)
        again = await console.run(python=fork)  # the zombies still hold the limit: a fork is refused, and said so
        assert again.error is not None and again.error.name == "processes", (again.error, again.combined)
        assert "restart() frees them" in again.error.message
        await console.restart()
        freed = await console.run(python=fork)
        assert freed.text == "forked\n" and freed.error is None, (freed.error, freed.combined)


async def test_a_fork_bomb_that_catches_its_refusals_and_reaps_is_still_a_limit(
    tmp_path: Path, workspace: Path, recordings: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 30: under ``userns-rlimit`` a bomb that caught its EAGAIN and waited for its children left
    nothing behind by its end: held, but not reported. The watch's peak of the sandbox's tasks tells."""
    empty = tmp_path / "no-cgroups"
    empty.mkdir()
    monkeypatch.setenv("CONSOLE_BRIDGE_CGROUP_ROOT", str(empty))  # no cgroup: RLIMIT_NPROC holds it
    code = textwrap.dedent(
        """\
        import os, time
        kids, refused = [], 0
        for _ in range(500):
            try:
                pid = os.fork()
            except OSError:
                refused += 1
                break
            if pid == 0:
                time.sleep(0.5)
                os._exit(0)
            kids.append(pid)
        for pid in kids:
            os.waitpid(pid, 0)
        print("forked", len(kids), "refused", refused)
        """
    )
    limits = Limits(processes=64, memory=None, enforce="best_effort")
    async with _console(workspace, limits=limits, recordings_dir=recordings) as console:
        assert console.status().limits["processes"]["enforced_by"] == "userns-rlimit"
        out = await console.run(python=code, timeout=60)
        assert "refused 1" in out.text and out.error is not None, out.combined
        assert out.error.kind == "limit" and out.error.name == "processes", out.error
        await _works(console)


async def test_memory_hog_stops_at_the_memory_limit(workspace: Path, recordings: Path) -> None:
    # A cgroup holds 256 MiB for the whole tree; where none can (a normal user without a delegated
    # cgroup) the bridge watches the sandbox's resident memory (issue 30: 256 MiB did not start there).
    async with _console(workspace, limits=Limits(memory="256MiB"), recordings_dir=recordings) as console:
        assert console.status().limits["memory"]["enforced_by"] in {*TREE_WIDE, "watched"}
        out = await console.run(python="blocks = []\nwhile True:\n    blocks.append(bytearray(32 << 20))")
        assert out.error is not None and out.error.kind == "limit" and out.error.name == "memory", (out.error, out.text)
        assert "memory limit" in out.error.message
        await _works(console)
        # the host and the limit are fine: a modest allocation still works
        # (under RLIMIT_AS the worker lives on and keeps what the cell allocated: let it go first)
        ok = await console.run(python="blocks = None\nx = bytearray(64 << 20); print(len(x))")
        assert str(64 << 20) in ok.text


async def test_tmpdir_fill_stops_at_its_cap(workspace: Path, recordings: Path) -> None:
    async with _console(workspace, limits=Limits(tmpdir="32MiB"), recordings_dir=recordings) as console:
        assert console.status().limits["tmpdir"]["enforced_by"] == "tmpfs"
        code = (
            "import os\np = os.path.join(os.environ['TMPDIR'], 'fill')\nwith open(p, 'wb') as f:\n"
            "    for _ in range(100):\n        f.write(b'x' * (1 << 20))"
        )
        out = await console.run(python=code)
        assert "No space left on device" in out.combined, out.combined
        assert out.error is not None and out.error.kind == "limit" and out.error.name == "tmpdir", out.error
        host_tmp = console.status().tmpdir
        assert host_tmp is not None
        # The tmpfs lives in the session's own mount namespace: nothing landed on the host's disk.
        assert sum(f.stat().st_size for f in host_tmp.rglob("*") if f.is_file()) == 0
        # the TMPDIR is still full, but the next cell did not run into it: no limit on it
        after = await console.run(python="print(2)")
        assert after.error is None and after.text.strip() == "2", after
        await console.run(python="import os; os.remove(os.path.join(os.environ['TMPDIR'], 'fill'))")
        await _works(console)


async def test_output_flood_leaves_at_most_the_recording_cap(workspace: Path, recordings: Path) -> None:
    cap = 16 << 20
    async with _console(workspace, limits=Limits(recording=cap), recordings_dir=recordings) as console:
        out = await console.run(
            python="import sys\nchunk = 'y' * (1 << 20) + '\\n'\nfor _ in range(300):\n    sys.stdout.write(chunk)",
            timeout=120,
        )
        assert out.text  # the server kept answering
        await _works(console)
        recording = console.status().recording
    assert recording is not None
    size = sum(f.stat().st_size for f in recording.rglob("*") if f.is_file())
    assert size <= cap + (1 << 20), size


def _session_cpu(console: AsyncConsole) -> float:
    """CPU seconds used by the session's whole tree right now."""
    sup = console.status().supervisor_pid
    assert sup is not None
    procs = [psutil.Process(sup), *psutil.Process(sup).children(recursive=True)]
    total = 0.0
    for proc in procs:
        try:
            times = proc.cpu_times()
            total += times.user + times.system
        except psutil.Error:
            continue
    return total


async def test_cpu_returns_to_idle_after_a_cell_timeout(workspace: Path, recordings: Path) -> None:
    from console_bridge import CellTimeout

    spin = textwrap.dedent(
        """\
        import subprocess, sys, threading
        def burn():
            while True:
                pass
        threading.Thread(target=burn, daemon=True).start()
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        import time
        time.sleep(60)
        """
    )
    async with _console(workspace, recordings_dir=recordings) as console:
        with pytest.raises(CellTimeout) as info:
            await console.run(python=spin, timeout=2)
        assert "restarted" in info.value.result.combined  # type: ignore[union-attr]
        deadline = time.monotonic() + 2.0
        while True:
            before = _session_cpu(console)
            time.sleep(0.5)
            used = _session_cpu(console) - before
            if used < 0.1 or time.monotonic() > deadline:
                break
        assert used < 0.1, f"the session still burns {used / 0.5:.0%} of a CPU after the timeout"
        await _works(console)


def test_enforce_required_without_a_mechanism_refuses(
    tmp_path: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch, state_dir: Path
) -> None:
    import anyio

    empty = tmp_path / "no-cgroups"
    empty.mkdir()
    empty.chmod(0o500)
    monkeypatch.setenv("CONSOLE_BRIDGE_CGROUP_ROOT", str(empty))

    async def start() -> None:
        async with _console(workspace, limits=Limits(cpu=1.0, memory=None)):
            pass

    # CPU has no rlimit form: without a cgroup nothing can hold it, on any host kind.
    with pytest.raises(LaunchRefused, match="cpu") as info:
        anyio.run(start)
    assert "best_effort" in str(info.value) and "--best-effort" in str(info.value)
    assert not list((state_dir / "sessions").iterdir())

    async def best_effort() -> dict[str, dict[str, object]]:
        async with _console(workspace, limits=Limits(cpu=1.0, enforce="best_effort")) as console:
            assert (await console.run(python="print(3)")).text.strip() == "3"
            return console.status().limits

    limits = anyio.run(best_effort)
    assert limits["cpu"]["enforced_by"] is None
    assert limits["memory"]["enforced_by"] == "watched"
    # every session has a user namespace (root's too, as unprivileged host ids), whose tasks RLIMIT_NPROC counts
    assert limits["processes"]["enforced_by"] == "userns-rlimit"


HOST_SCRIPT = """
import json, sys, time
from console_bridge import Console
with Console(sys.argv[1], command=sys.argv[2], recordings_dir=sys.argv[3]) as console:
    console.run(python="import subprocess; subprocess.Popen(['sleep', '1000.4242'])")
    status = console.status()
    print(json.dumps({"sup": status.supervisor_pid, "folder": str(status.tmpdir.parent),
                      "recording": str(status.recording)}), flush=True)
    time.sleep(600)
"""


def _sleepers(token: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if token in " ".join(proc.info["cmdline"] or []):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def test_sigkill_of_the_host_leaves_nothing(workspace: Path, recordings: Path, state_dir: Path) -> None:
    env = {**os.environ, "CONSOLE_BRIDGE_STATE_DIR": str(state_dir)}
    host = subprocess.Popen(
        [sys.executable, "-c", HOST_SCRIPT, str(workspace), str(binary_for("0.0.6")), str(recordings)],
        stdout=subprocess.PIPE,
        env=env,
        cwd=ROOT,
    )
    try:
        assert host.stdout is not None
        info = json.loads(host.stdout.readline())
        tree = [psutil.Process(info["sup"]), *psutil.Process(info["sup"]).children(recursive=True)]
        assert _sleepers("1000.4242")
        host.kill()
        host.wait()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and (
            any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in tree) or Path(info["folder"]).exists()
        ):
            time.sleep(0.05)
        assert not [p.pid for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        assert not _sleepers("1000.4242")
        assert not Path(info["folder"]).exists()
        transcript = Path(info["recording"]) / "transcript.md"
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and "Recording finished" not in transcript.read_text():
            time.sleep(0.05)
        assert "Recording finished" in transcript.read_text()
    finally:
        host.kill()
        host.wait()
        if host.stdout is not None:
            host.stdout.close()


async def test_setsid_descendants_whose_parent_dies_fast_never_escape(workspace: Path, recordings: Path) -> None:
    token = f"2000.{os.getpid()}"
    code = textwrap.dedent(
        f"""\
        import os
        for _ in range(200):
            pid = os.fork()
            if pid == 0:
                os.setsid()
                if os.fork() == 0:
                    os.execv("/bin/sleep", ["sleep", "{token}"])
                os._exit(0)
            os.waitpid(pid, 0)
        print("spawned")
        """
    )
    async with _console(workspace, recordings_dir=recordings, limits=Limits(processes=1024)) as console:
        out = await console.run(python=code, timeout=60)
        assert "spawned" in out.text
        # each grandchild execs `sleep` after its parent was reaped: on a loaded host a few may not
        # have exec'd yet when the cell returns (bounded wait on what the kernel shows)
        ready = time.monotonic() + 10
        while len(_sleepers(token)) < 200 and time.monotonic() < ready:
            time.sleep(0.05)
        assert len(_sleepers(token)) == 200
        await _works(console)
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and _sleepers(token):
        time.sleep(0.05)
    assert _sleepers(token) == [], "a setsid descendant outlived its session"


async def test_a_host_that_died_is_swept_on_the_next_start(workspace: Path, recordings: Path, state_dir: Path) -> None:
    from console_bridge._confinement._registry import SessionEntry, sessions_root

    root = sessions_root()
    folder = root / "20200101T000000-deadbeef"
    (folder / "tmp").mkdir(parents=True)
    SessionEntry(
        id="20200101T000000-deadbeef", folder=str(folder), host_pid=999_999_999, host_started=1.0, created=1.0
    ).save()
    async with _console(workspace, recordings_dir=recordings) as console:
        assert not folder.exists()
        await _works(console)


def test_signals_reach_nothing_outside_the_session() -> None:
    """The supervisor is stdlib-only and starts isolated (-I -S): nothing from the host's site."""
    from console_bridge._confinement._plan import supervisor_command

    argv = supervisor_command(["/bin/true"], cwd=None, grace=1.0)
    assert argv[1:3] == ["-I", "-S"]
    assert signal.SIGUSR1  # the kill-now signal exists on this platform
    done = subprocess.run(argv, capture_output=True, timeout=10)
    assert done.returncode == 0, done.stderr


async def test_put_and_get_files_never_follow_a_planted_symlink(
    tmp_path: Path, workspace: Path, recordings: Path
) -> None:
    from console_bridge import NotAllowed

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "host-secret.txt").write_text(CANARY)
    async with _console(workspace, recordings_dir=recordings) as console:
        path = await console.put_file("in/data.csv", b"a,b\n1,2\n")
        out = await console.run(python=f"print(open({path!r}).read()); import os; print(os.environ['TMPDIR'])")
        assert "a,b" in out.text and path.startswith(out.text.strip().splitlines()[-1])
        # The cell plants symlinks to host places; the host side refuses to follow them.
        await console.run(
            python=(
                "import os; t = os.environ['TMPDIR']\n"
                f"os.symlink({str(outside / 'host-secret.txt')!r}, os.path.join(t, 'leak.txt'))\n"
                f"os.symlink({str(outside)!r}, os.path.join(t, 'dir'))\n"
                "open(os.path.join(t, 'result.txt'), 'w').write('42')"
            )
        )
        assert await console.get_file("result.txt") == b"42"
        for name in ("leak.txt", "dir/host-secret.txt"):
            with pytest.raises(NotAllowed):
                await console.get_file(name)
        with pytest.raises(NotAllowed):
            await console.put_file("dir/planted.txt", b"x")
        for bad in ("../x", "/etc/passwd", "a/../../b", ""):
            with pytest.raises(NotAllowed):
                await console.put_file(bad, b"x")
        with pytest.raises(NotAllowed, match="max_bytes"):
            await console.get_file("result.txt", max_bytes=1)
        assert sorted(os.listdir(outside)) == ["host-secret.txt"]
        await _works(console)


async def test_the_recording_cap_does_not_cap_the_cells_own_files(workspace: Path, recordings: Path) -> None:
    async with _console(workspace, limits=Limits(recording="8MiB"), recordings_dir=recordings) as console:
        out = await console.run(
            python="import os\np = os.path.join(os.environ['TMPDIR'], 'big')\n"
            "open(p, 'wb').write(b'z' * (32 << 20))\nprint(os.path.getsize(p))"
        )
        assert str(32 << 20) in out.text, out.text
