"""The registry proves an entry before ``kill``, ``ps`` or a sweep acts on it (issue 20, item 5).

Any process of the user can write a ``session.json`` under the state folder. Each attack
forges one and checks that nothing happens but a report: no signal to an unrelated process,
no folder removed outside the sessions root, no cgroup emptied that is not the session's own.
These need no console: a real supervisor (the stdlib script) stands in where one is needed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from console_bridge._confinement._cgroups import CGROUP_PREFIX
from console_bridge._confinement._plan import supervisor_command
from console_bridge._confinement._registry import SessionEntry, own_cgroup_bases, sessions_root, sweep_report, verify
from tests.support.cli import cli_path

SID = "20200101T000000-0badc0de"


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CONSOLE_BRIDGE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("CONSOLE_BRIDGE_CGROUP_ROOT", str(tmp_path / "cgroot"))  # a fake cgroup tree, never the host's
    return sessions_root()


@pytest.fixture
def victim() -> Iterator[subprocess.Popen[bytes]]:
    """An unrelated process of this user that nothing may signal."""
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    yield proc
    proc.kill()
    proc.wait()
    assert proc.stdin is not None
    proc.stdin.close()


def _entry(root: Path, session_id: str = SID, **fields: object) -> SessionEntry:
    folder = root / session_id
    (folder / "tmp").mkdir(parents=True, exist_ok=True)
    values: dict[str, object] = {
        "id": session_id,
        "folder": str(folder),
        "host_pid": 999_999_999,
        "host_started": 1.0,
        "created": 1.0,
    }
    values.update(fields)
    entry = SessionEntry(**values)  # type: ignore[arg-type]
    data = json.dumps(entry.__dict__).encode()
    (folder / "session.json").write_bytes(data)  # written as a forger would, not through save()
    return entry


def _cli(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CONSOLE_BRIDGE_STATE_DIR": str(state.parent)}
    return subprocess.run([cli_path(), *args], capture_output=True, text=True, env=env, timeout=60, check=False)


def test_a_forged_entry_cannot_make_kill_signal_an_unrelated_process(
    state: Path, victim: subprocess.Popen[bytes]
) -> None:
    started = psutil.Process(victim.pid).create_time()
    _entry(state, supervisor_pid=victim.pid, supervisor_started=started, host_pid=victim.pid, host_started=started)
    verdict = verify(state / SID)
    assert verdict.state == "refused" and f"pid {victim.pid} is not the console-bridge supervisor" in verdict.reason
    for args in (("kill", SID), ("kill", "--force", SID)):
        done = _cli(state, *args)
        assert done.returncode == 2, done.stderr
        assert "left alone" in done.stderr and "not the console-bridge supervisor" in done.stderr
        assert victim.poll() is None  # not signalled
    listed = _cli(state, "ps", "--json")
    assert json.loads(listed.stdout) == [] and "left alone" in listed.stderr
    assert (state / SID / "session.json").is_file()  # the forged entry is reported, not removed
    # Issue 31: said plainly, without telling the user to delete it; top says it once, not at each refresh
    assert "cannot be proven a console-bridge session of this user" in listed.stderr, listed.stderr
    assert "remove it yourself" not in listed.stderr and "yours" not in listed.stderr
    top = _cli(state, "top", "--interval", "0.1", "--count", "3")
    assert top.returncode == 0, top.stderr
    assert top.stderr.count("cannot be proven") == 1, top.stderr


def test_a_forged_stale_entry_cannot_make_the_sweep_remove_a_folder_or_kill_a_cgroup(
    state: Path, tmp_path: Path, victim: subprocess.Popen[bytes]
) -> None:
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "data.txt").write_text("keep me")
    fake_group = tmp_path / "some-cgroup"  # what the sweep would SIGKILL: the procs listed in it
    fake_group.mkdir()
    (fake_group / "cgroup.procs").write_text(f"{victim.pid}\n")
    [base, *_] = sorted(own_cgroup_bases())
    other = base / f"{CGROUP_PREFIX}20200101T000000-00000001"  # a real-looking group of another session
    other.mkdir(parents=True)
    (other / "cgroup.procs").write_text(f"{victim.pid}\n")
    ids = [f"20200101T000000-0000000{n}" for n in range(2, 7)]
    _entry(state, ids[0], folder=str(precious))  # the folder it names is not its own
    _entry(state, ids[1], cgroups=[str(fake_group)])  # a cgroup not beneath the bridge's own
    _entry(state, ids[2], cgroups=[str(other)])  # another session's group
    _entry(state, ids[3], cgroups=[f"{base}/{CGROUP_PREFIX}{ids[3]}/../../../{fake_group.name}"])
    _entry(state, ids[4], id=SID)  # the entry names another session than its folder
    (state / "20200101T000000-00000009").symlink_to(precious)  # a session folder that is a symlink

    report = sweep_report(min_age=0.0)

    assert report.swept == []
    reasons = {verdict.folder.name: verdict.reason for verdict in report.refused}
    assert set(reasons) == {*ids, "20200101T000000-00000009"}, reasons
    assert "names the folder" in reasons[ids[0]]
    assert "beneath this process's own cgroups" in reasons[ids[1]] and "beneath" in reasons[ids[2]]
    assert "plain absolute path" in reasons[ids[3]]
    assert "names session" in reasons[ids[4]] and "symlink" in reasons["20200101T000000-00000009"]
    assert (precious / "data.txt").read_text() == "keep me"
    assert victim.poll() is None and fake_group.is_dir() and other.is_dir()
    assert all((state / name).exists() for name in reasons)  # left alone, folders included


def test_a_proven_stale_entry_is_still_swept(state: Path) -> None:
    [base, *_] = sorted(own_cgroup_bases())
    group = base / f"{CGROUP_PREFIX}{SID}"
    group.mkdir(parents=True)
    _entry(state, cgroups=[str(group)])
    report = sweep_report()
    assert report.swept == [SID] and report.refused == []
    assert not (state / SID).exists() and not group.exists()


def test_a_real_supervisor_is_proven_and_only_then_signalled(state: Path) -> None:
    entry = _entry(state)
    argv = supervisor_command(["/bin/cat"], cwd=None, grace=1.0, cleanup=[entry.path])
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    try:
        # (until the child has exec'd it still runs pytest's command line: not yet provable, rightly)
        deadline = time.monotonic() + 30
        while psutil.Process(proc.pid).cmdline()[1:3] != ["-I", "-S"] and time.monotonic() < deadline:
            time.sleep(0.01)
        entry.supervisor_pid, entry.supervisor_started = proc.pid, psutil.Process(proc.pid).create_time()
        entry.save()
        assert verify(entry.path).state == "live"
        wrong = SessionEntry(**{**entry.__dict__, "supervisor_started": entry.supervisor_started - 5})
        assert not wrong.signal_supervisor(signal.SIGTERM)  # another start time: a recycled pid, not ours
        assert entry.signal_supervisor(signal.SIGTERM)
        assert proc.wait(timeout=30) is not None
    finally:
        proc.kill()
        proc.wait()
        assert proc.stdin is not None
        proc.stdin.close()
