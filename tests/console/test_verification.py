"""AsyncConsole against a fake mcp-console: every wrong server is stopped before any call.

The fake (``fake_mcp_console.py``) runs through a wrapper shell script written into
``tmp_path``; the wrapper carries the mode and the log/info/counter paths (the bridge
passes the server only a short environment allowlist). The fake writes its own pid and
the pid of a ``sleep`` child it starts in a new session, so the tests can prove the
whole tree is gone, and logs every JSON-RPC method it receives, so they can prove no
``tools/call`` was made.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import stat
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from console_bridge import (
    AsyncConsole,
    ConnectionClosed,
    DependenciesRefused,
    SandboxMismatch,
    VerificationFailed,
    VersionRefused,
)
from console_bridge._vetting._version import QUALIFIED_VERSIONS
from tests.support.waiting import until

FAKE = Path(__file__).resolve().parent / "fake_mcp_console.py"
VENV = Path(__file__).resolve().parents[2] / ".venv"
INSTALL = 'pip install "mcp-console==0.0.6"'
QUALIFIED = ", ".join(QUALIFIED_VERSIONS)
PREFIX = "console-bridge-"

pytestmark = pytest.mark.anyio


@dataclass
class Fake:
    command: Path
    log: Path
    info_file: Path
    counter: Path

    def methods(self) -> list[str]:
        return self.log.read_text(encoding="utf-8").split() if self.log.exists() else []

    def info(self) -> dict[str, Any]:
        return json.loads(self.info_file.read_text(encoding="utf-8"))

    def version_runs(self) -> int:
        return len(self.counter.read_text(encoding="utf-8").split()) if self.counter.exists() else 0

    def version_pids(self) -> list[int]:
        """The pid of the child a hanging ``--version`` started (version_hang_child), if any."""
        marker = Path(str(self.info_file) + ".version-child")
        return [int(marker.read_text(encoding="utf-8"))] if marker.exists() else []


def make_fake(tmp_path: Path, mode: str) -> Fake:
    """A wrapper script that execs the fake with this interpreter, in ``mode``.

    A session's server sees only its view of the host: the fake (script and wrapper) lives in
    a folder of its own, which the view holds read-only as the server's installation, and it
    writes its logs into the recordings folder (``console_for``'s), which the view holds
    writable for the server."""
    folder = tmp_path / "recordings" / f"fake-{mode}"
    (folder / "server").mkdir(parents=True)
    script = folder / "server" / FAKE.name
    shutil.copyfile(FAKE, script)
    shutil.copytree(FAKE.parents[1] / "data" / "sandbox_descriptions", folder / "data" / "sandbox_descriptions")
    fake = Fake(
        folder / "server" / "mcp-console", folder / "methods.log", folder / "info.json", folder / "version-runs"
    )
    settings = {"FAKE_MODE": mode, "FAKE_LOG": fake.log, "FAKE_INFO": fake.info_file, "FAKE_COUNTER": fake.counter}
    lines = ["#!/bin/sh", *(f"export {key}={shlex.quote(str(value))}" for key, value in settings.items())]
    lines.append(f'exec {shlex.quote(sys.executable)} -I {shlex.quote(str(script))} "$@"')
    fake.command.write_text("\n".join(lines) + "\n", encoding="utf-8")
    fake.command.chmod(0o755)
    return fake


def private_tmpdirs() -> set[Path]:
    """Every session's private TMPDIR (``<state>/sessions/<id>/tmp``)."""
    return set((Path(os.environ["CONSOLE_BRIDGE_STATE_DIR"]) / "sessions").glob("*/tmp"))


def alive(pids: list[int]) -> list[int]:
    """The pids still naming a live process (zombies count as dead)."""
    found = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                found.append(pid)
        except psutil.NoSuchProcess:
            continue
    return found


async def wait_dead(pids: list[int], within: float = 3.0) -> list[int]:
    return await until(lambda: alive(pids), lambda left: not left, bound=within)


def kill_leftovers(fake: Fake) -> None:
    """Test hygiene only: never leave a fake's processes behind, whatever the outcome."""
    if not fake.info_file.exists():
        return
    info = fake.info()
    for pid in alive([info["pid"], info["child"]]):
        try:
            proc = psutil.Process(pid)
            if "fake_mcp_console" in " ".join(proc.cmdline()) or proc.name() == "sleep":
                proc.kill()
        except psutil.Error:
            continue


@pytest.fixture(autouse=True)
def temp_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test gets its own ``tempfile.gettempdir()``, so before/after sets of private
    TMPDIRs are exact even while other sessions run on the machine."""
    root = tmp_path / "tmproot"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    monkeypatch.setenv("CONSOLE_BRIDGE_STATE_DIR", str(tmp_path / "state"))
    return root


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


def console_for(fake: Fake | Path, workspace: Path, **kwargs: Any) -> AsyncConsole:
    command = fake.command if isinstance(fake, Fake) else fake
    defaults: dict[str, Any] = {
        "command": command,
        "python": VENV,
        "recordings_dir": workspace.parent / "recordings",
        "startup_timeout": 15.0,
        "timeout": 10.0,
        "poll_window": 2.0,
        "shutdown_grace": 1.0,
    }
    return AsyncConsole(workspace=workspace, **(defaults | kwargs))


# ------------------------------------------------------------- wrong servers

BAD_SERVERS = [
    ("network", SandboxMismatch, "direct network access"),
    ("no_sandbox", SandboxMismatch, "no sandbox"),
    ("inherit_codex", SandboxMismatch, "inherited from Codex"),
    ("unknown_sentence", SandboxMismatch, "could not be verified"),
    ("requirements", DependenciesRefused, "requirements"),
    ("extra_tool", VerificationFailed, "exactly one tool"),
    ("no_timeout", VerificationFailed, "timeout_ms"),
    ("wrong_name", VerificationFailed, "'other'"),
    ("reported_version", VerificationFailed, "'0.0.5'"),
]


@pytest.mark.parametrize(("mode", "error", "needle"), BAD_SERVERS, ids=[case[0] for case in BAD_SERVERS])
async def test_wrong_server_is_stopped_before_any_call(
    tmp_path: Path, workspace: Path, mode: str, error: type[Exception], needle: str
) -> None:
    fake = make_fake(tmp_path, mode)
    before = private_tmpdirs()
    console = console_for(fake, workspace)
    try:
        with pytest.raises(VerificationFailed) as caught:
            await console.start()
        assert type(caught.value) is error, caught.value
        message = str(caught.value)
        assert needle in message
        assert "before any call" in message or "stopped" in message

        methods = fake.methods()
        assert methods[:1] == ["initialize"]
        assert "tools/call" not in methods

        info = fake.info()
        assert caught.value.pid == info["pid"]
        assert await wait_dead([info["pid"], info["child"]]) == []

        tmpdir = Path(info["tmpdir"])
        assert tmpdir.parent.parent == Path(os.environ["CONSOLE_BRIDGE_STATE_DIR"]) / "sessions"
        assert not tmpdir.exists()
        assert private_tmpdirs() - before == set()

        assert console.status().state == "closed"
        with pytest.raises(ConnectionClosed):
            await console.start()
        with pytest.raises(ConnectionClosed):
            await console.send(python="1")
    finally:
        kill_leftovers(fake)


async def test_sandbox_mismatch_names_both_policies(tmp_path: Path, workspace: Path) -> None:
    fake = make_fake(tmp_path, "network")
    try:
        with pytest.raises(SandboxMismatch) as caught:
            await console_for(fake, workspace).start()
        details = caught.value.details
        assert details["advertised"]["network"] == "enabled"
        assert details["expected"] == {
            "sandboxed": True,
            "network": "restricted",
            "writable": ["tmpdir"],
            "inherit_codex": False,
        }
    finally:
        kill_leftovers(fake)


async def test_workspace_profile_against_read_only_server_is_a_mismatch(tmp_path: Path, workspace: Path) -> None:
    """The fake always advertises the read-only sandbox; asking for the workspace profile must fail closed."""
    fake = make_fake(tmp_path, "ok")
    try:
        with pytest.raises(SandboxMismatch, match="workspace"):
            await console_for(fake, workspace, profile="workspace").start()
        assert "tools/call" not in fake.methods()
        assert "sandbox.profile=workspace" in fake.info()["argv"]
    finally:
        kill_leftovers(fake)


async def test_dependencies_allow_without_requirements_is_refused(tmp_path: Path, workspace: Path) -> None:
    fake = make_fake(tmp_path, "ok")
    try:
        with pytest.raises(VerificationFailed, match="does not offer `requirements`") as caught:
            await console_for(fake, workspace, dependencies="allow").start()
        assert type(caught.value) is VerificationFailed
        assert "tool.parameters.requirements.enabled=false" not in fake.info()["argv"]
        assert "tools/call" not in fake.methods()
    finally:
        kill_leftovers(fake)


async def test_unrequested_language_is_refused(tmp_path: Path, workspace: Path) -> None:
    """The fake offers python and sql; a python-only console must not accept a server that also runs SQL."""
    fake = make_fake(tmp_path, "ok")
    try:
        with pytest.raises(VerificationFailed, match="sql") as caught:
            await console_for(fake, workspace, languages=["python"]).start()
        assert type(caught.value) is VerificationFailed
        assert "languages=[python]" in fake.info()["argv"]
        assert "tools/call" not in fake.methods()
    finally:
        kill_leftovers(fake)


# ------------------------------------------------------------ the control case


async def test_ok_server_starts_sends_and_closes(tmp_path: Path, workspace: Path) -> None:
    fake = make_fake(tmp_path, "ok")
    before = private_tmpdirs()
    console = console_for(fake, workspace)
    try:
        await console.start()
        info = fake.info()
        procs = [psutil.Process(info["pid"]), psutil.Process(info["child"])]
        assert console.pid == info["pid"]
        status = console.status()
        assert status.state == "idle"
        assert status.version == "0.0.6"
        assert status.sandbox == {
            "sandboxed": True,
            "network": "restricted",
            "writable": ["tmpdir"],
            "inherit_codex": False,
        }
        assert status.tmpdir == Path(info["tmpdir"]) and status.tmpdir.is_dir()
        assert status.tmpdir in private_tmpdirs() - before
        assert info["mcp_console_home"] == str(tmp_path / "recordings")
        assert info["cwd"] == str(workspace)

        argv = info["argv"]
        assert argv[:2] == ["serve", "--no-config"]
        for setting in (
            f"python={VENV}",
            "sandbox.network=restricted",
            "sandbox.profile=read_only",
            "sandbox.tempdir=managed",
            "languages=[python, sql]",
            "tool.parameters.requirements.enabled=false",
        ):
            assert argv[argv.index(setting) - 1] == "-c", setting
        assert "--no-sandbox" not in argv and "--writable-root" not in argv

        result = await console.send(python="print(1)")
        assert result.text == "ok" and not result.is_error and not result.running
        assert fake.methods().count("tools/call") == 2  # the start-time confinement probe, then this send

        (handle,) = console.tools()
        props = handle.input_schema["properties"]
        assert props["control"]["anyOf"] == [{"type": "string", "enum": ["interrupt"]}, {"type": "null"}]
        assert props["timeout_ms"]["anyOf"][0]["maximum"] == 2000 and props["timeout_ms"]["default"] == 2000
        assert "requirements" not in handle.input_schema["properties"]

        await console.close()
        assert console.status().state == "closed"
        assert [p for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE] == []
        assert not Path(info["tmpdir"]).exists()
        assert private_tmpdirs() - before == set()
        await console.close()  # idempotent
        with pytest.raises(ConnectionClosed):
            await console.send(python="1")
    finally:
        await console.cancel()
        kill_leftovers(fake)


async def test_version_005_gets_no_006_settings(tmp_path: Path, workspace: Path) -> None:
    fake = make_fake(tmp_path, "v005")
    try:
        async with console_for(fake, workspace) as console:
            assert console.version == "0.0.5"
            argv = fake.info()["argv"]
            assert "sandbox.network=restricted" in argv
            assert not any(arg.startswith(("sandbox.profile", "sandbox.tempdir")) for arg in argv)
            assert (await console.send(python="1")).text == "ok"
    finally:
        kill_leftovers(fake)


async def test_cancel_kills_the_tree_including_children_that_left_the_group(tmp_path: Path, workspace: Path) -> None:
    fake = make_fake(tmp_path, "ok")
    try:
        async with console_for(fake, workspace) as console:
            info = fake.info()
            assert os.getpgid(info["child"]) != os.getpgid(info["pid"])
            await console.cancel()
            assert await wait_dead([info["pid"], info["child"]]) == []
            assert not Path(info["tmpdir"]).exists()
        assert fake.methods().count("tools/call") == 1  # only the start-time confinement probe
    finally:
        kill_leftovers(fake)


async def test_writable_roots_reach_the_server_and_the_expected_sandbox(tmp_path: Path, workspace: Path) -> None:
    """A granted root is passed with --writable-root, so the read-only text no longer matches: fail closed."""
    root = tmp_path / "out"
    root.mkdir()
    fake = make_fake(tmp_path, "ok")
    try:
        with pytest.raises(SandboxMismatch) as caught:
            await console_for(fake, workspace, args=["--writable-root", str(root)]).start()
        argv = fake.info()["argv"]
        assert argv[argv.index("--writable-root") + 1] == str(root.resolve())
        assert str(root.resolve()) in caught.value.details["expected"]["writable"]
    finally:
        kill_leftovers(fake)


# ---------------------------------------------------------- version refusals

VERSION_CASES = [
    ("version_wrong", ["is version 0.0.7", "not qualified"]),
    ("version_garbage", ["'hello'", "not an mcp-console version"]),
    ("version_fail", ["exit status 1"]),
]


@pytest.mark.parametrize(("mode", "needles"), VERSION_CASES, ids=[case[0] for case in VERSION_CASES])
async def test_unqualified_version_is_refused(tmp_path: Path, workspace: Path, mode: str, needles: list[str]) -> None:
    fake = make_fake(tmp_path, mode)
    before = private_tmpdirs()
    with pytest.raises(VersionRefused) as caught:
        await console_for(fake, workspace).start()
    message = str(caught.value)
    for needle in [*needles, QUALIFIED, INSTALL]:
        assert needle in message
    assert fake.version_runs() == 1
    assert not fake.info_file.exists()  # never served
    assert private_tmpdirs() - before == set()  # nothing was made


@pytest.mark.parametrize("mode", ["version_hang", "version_hang_child"])
async def test_hanging_version_fails_within_the_timeout(tmp_path: Path, workspace: Path, mode: str) -> None:
    fake = make_fake(tmp_path, mode)
    started = time.monotonic()
    with pytest.raises(VersionRefused) as caught:
        await console_for(fake, workspace, version_timeout=2).start()
    elapsed = time.monotonic() - started
    assert elapsed < 15.0, elapsed  # bounded by version_timeout (the fake hangs for 60 s); slack for a loaded CI
    message = str(caught.value)
    for needle in ["did not answer within 2s", QUALIFIED, INSTALL]:
        assert needle in message
    assert not fake.info_file.exists()
    if mode == "version_hang_child":
        assert fake.version_pids()
    assert await wait_dead(fake.version_pids()) == []  # nothing the version check started lives on


async def test_missing_binary_is_refused(tmp_path: Path, workspace: Path) -> None:
    missing = tmp_path / "no-such" / "mcp-console"
    with pytest.raises(VersionRefused) as caught:
        await console_for(missing, workspace).start()
    message = str(caught.value)
    for needle in [str(missing), "does not exist", QUALIFIED, INSTALL]:
        assert needle in message


async def test_command_not_on_path_is_refused(workspace: Path) -> None:
    with pytest.raises(VersionRefused) as caught:
        await console_for(Path("mcp-console-no-such-command"), workspace).start()
    message = str(caught.value)
    for needle in ["'mcp-console-no-such-command'", "not found on PATH", QUALIFIED, INSTALL]:
        assert needle in message


@pytest.mark.parametrize("kind", ["not_executable", "directory"])
async def test_non_executable_binary_is_refused(tmp_path: Path, workspace: Path, kind: str) -> None:
    target = tmp_path / "mcp-console"
    if kind == "directory":
        target.mkdir()
    else:
        target.write_text("#!/bin/sh\necho 'mcp-console 0.0.6'\n", encoding="utf-8")
        target.chmod(stat.S_IRUSR | stat.S_IWUSR)
    with pytest.raises(VersionRefused) as caught:
        await console_for(target, workspace).start()
    message = str(caught.value)
    for needle in [str(target), "not an executable file", QUALIFIED, INSTALL]:
        assert needle in message


async def test_version_check_is_cached_per_binary(tmp_path: Path, workspace: Path) -> None:
    fake = make_fake(tmp_path, "ok")
    try:
        for _ in range(2):
            async with console_for(fake, workspace) as console:
                assert console.version == "0.0.6"
        assert fake.version_runs() == 1
        assert fake.methods().count("initialize") == 2

        # A changed binary (new size and mtime) is checked again.
        with fake.command.open("a", encoding="utf-8") as handle:
            handle.write("# reinstalled\n")
        async with console_for(fake, workspace):
            pass
        assert fake.version_runs() == 2
    finally:
        kill_leftovers(fake)


async def test_refused_version_is_not_cached(tmp_path: Path, workspace: Path) -> None:
    fake = make_fake(tmp_path, "version_wrong")
    for _ in range(2):
        with pytest.raises(VersionRefused):
            await console_for(fake, workspace).start()
    assert fake.version_runs() == 2


async def test_a_server_that_drops_the_deny_rules_is_a_sandbox_mismatch(
    tmp_path: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The advertised text cannot show deny rules: the start-time probe catches a server that
    ignores them (the fake runs the probe unsandboxed), before any user cell."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("secret")
    monkeypatch.setenv("HOME", str(home))
    fake = make_fake(tmp_path, "drop_deny")
    console = console_for(fake, workspace)
    try:
        with pytest.raises(SandboxMismatch) as caught:
            await console.start()
        message = str(caught.value)
        assert "probe" in message and "before any user cell" in message
        # home is outside the view (no name at all); the recordings the server writes are inside it
        # and only the sandbox denies them: the unsandboxed fake reads that canary
        assert any("console-bridge-canary" in path for path in caught.value.details["readable"])
        assert fake.methods().count("tools/call") == 1  # the probe, and nothing after it
        assert await wait_dead([fake.info()["pid"]]) == []
        assert private_tmpdirs() == set()
    finally:
        kill_leftovers(fake)
