"""Hosts console-bridge cannot confine: every entry point refuses at once, saying the same thing as doctor.

macOS and Windows are simulated with the ``CONSOLE_BRIDGE_PLATFORM`` hook, a Linux that forbids
unprivileged user namespaces with ``CONSOLE_BRIDGE_SYSCTL_ROOT`` (a fake ``/proc/sys``) for the
non-root user ``cbtest``; the entry points are the real ones (``AsyncConsole``, ``Console``, both
session managers, and the ``run``, ``serve`` and ``doctor`` commands as processes).
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from console_bridge import AsyncConsole, AsyncSessionManager, Console, LaunchRefused, SessionManager
from console_bridge._confinement._host import detect_host
from console_bridge._confinement._unconfinable import host_gap
from tests.confinement.conftest import host_kind
from tests.support.cli import cli_env, cli_path

REPO = Path(__file__).resolve().parents[2]
FIX_WORDS = {"darwin": ("macOS (darwin)", "Linux virtual machine"), "win32": ("Windows (win32)", "WSL 2")}


@pytest.fixture(params=["darwin", "win32"])
def platform(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("CONSOLE_BRIDGE_PLATFORM", request.param)
    detect_host(refresh=True)
    try:
        yield request.param
    finally:
        monkeypatch.delenv("CONSOLE_BRIDGE_PLATFORM")
        detect_host(refresh=True)


def _children() -> set[int]:
    return {proc.pid for proc in psutil.Process().children(recursive=True)}


def _assert_names_the_gap(message: str, platform: str) -> None:
    name, fix = FIX_WORDS[platform]
    assert f"on {name}:" in message, message
    assert "Linux namespaces" in message and "What you can do:" in message and fix in message, message
    assert "Nothing was started" in message, message


# ---------------------------------------------------------------------------------------- pure


def test_the_gap_names_platform_missing_and_fix() -> None:
    mac = host_gap(host_kind(platform="darwin", userns_problem="the platform is darwin, not Linux"))
    assert mac is not None and mac.platform == "macOS (darwin)" and "Lima" in mac.fix
    windows = host_gap(host_kind(platform="win32", userns_problem="the platform is win32, not Linux"))
    assert windows is not None and windows.platform == "Windows (win32)" and "WSL 2" in windows.fix
    apparmor = (
        "AppArmor forbids unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns=1, "
        "Ubuntu 23.10 and later); allow them with `sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`"
    )
    linux = host_gap(host_kind(userns_problem=apparmor))
    assert linux is not None and linux.platform == "Linux"
    assert "apparmor_restrict_unprivileged_userns=1" in linux.missing and "user namespace" in linux.missing
    assert linux.fix.startswith("allow them with `sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`")
    # root builds its view without user namespaces; a Linux with them is fine
    assert host_gap(host_kind(uid=0, privileged=True, userns_problem=apparmor)) is None
    assert host_gap(host_kind()) is None


# ------------------------------------------------------------------------------ library entry points


def test_every_library_entry_point_refuses_before_anything(platform: str, tmp_path: Path) -> None:
    before = _children()
    missing = tmp_path / "does-not-exist"
    attempts = {
        "AsyncConsole": lambda: AsyncConsole(tmp_path),
        # the platform comes first: not "the workspace does not exist"
        "AsyncConsole(missing workspace)": lambda: AsyncConsole(missing),
        "Console": lambda: Console(tmp_path),
        "AsyncSessionManager": lambda: AsyncSessionManager(tmp_path, warm=0),
        "AsyncSessionManager(workspace=None)": lambda: AsyncSessionManager(None, warm=1),
        "SessionManager": lambda: SessionManager(tmp_path, warm=1),
    }
    for what, attempt in attempts.items():
        with pytest.raises(LaunchRefused) as info:
            attempt()
        _assert_names_the_gap(str(info.value), platform)
        assert info.value.details["platform"] == platform, what
    assert _children() == before  # nothing was started, not even the version check
    assert os.listdir(tmp_path) == []


# ---------------------------------------------------------------------------------- the commands


def _cli(*args: str, cwd: Path, env: dict[str, str], timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [cli_path(), *args], cwd=cwd, env=env, input="", capture_output=True, text=True, timeout=timeout, check=False
    )


def test_run_serve_and_doctor_say_the_same(platform: str, tmp_path: Path) -> None:
    env = cli_env(tmp_path) | {"CONSOLE_BRIDGE_PLATFORM": platform}
    (tmp_path / "analysis.py").write_text("print('never runs')\n")
    started = time.monotonic()
    run = _cli("run", "--artifacts", "artifacts", "analysis.py", cwd=tmp_path, env=env)
    assert run.returncode == 3, run.stdout + run.stderr
    assert "never runs" not in run.stdout
    _assert_names_the_gap(run.stderr, platform)
    for transport in (["--transport", "stdio"], ["--transport", "http", "--port", "0"]):
        serve = _cli("serve", *transport, cwd=tmp_path, env=env)
        assert serve.returncode == 3, serve.stdout + serve.stderr
        _assert_names_the_gap(serve.stderr, platform)
        assert "serving MCP" not in serve.stderr  # refused before it listened
    assert time.monotonic() - started < 45  # three refusals, no session attempts
    doctor = _cli("doctor", "--json", cwd=tmp_path, env=env)
    assert doctor.returncode == 1, doctor.stdout + doctor.stderr
    checks = {check["name"]: check for check in json.loads(doctor.stdout)["checks"]}
    assert checks["host"]["detail"] == FIX_WORDS[platform][0]
    assert checks["namespaces"]["status"] == "fail" and checks["namespaces"]["required"]
    assert checks["namespaces"]["detail"] in run.stderr  # the very words `run` refused with
    assert checks["sandbox"]["status"] == "skip" and checks["limits"]["status"] == "skip"
    text = _cli("doctor", cwd=tmp_path, env=env)
    assert text.returncode == 1 and "Required checks failed: namespaces." in text.stdout


def test_console_bridge_imports_without_fcntl(tmp_path: Path) -> None:
    """Windows has no fcntl: the package still imports there, so the refusal (not an ImportError) is what users see."""
    code = (
        "import sys, mcp, mcp.client.stdio\n"  # mcp picks its own platform code; ours must not need fcntl
        "sys.modules['fcntl'] = None\n"
        "import console_bridge\n"
        "from console_bridge import Console, LaunchRefused\n"
        "try:\n"
        f"    Console({str(tmp_path)!r})\n"
        "except LaunchRefused as exc:\n"
        "    print('REFUSED', exc)\n"
    )
    env = dict(os.environ, CONSOLE_BRIDGE_PLATFORM="win32", PYTHONPATH=str(REPO))
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("REFUSED console-bridge cannot confine a session on Windows (win32)")


# --------------------------------------------------- Linux without user namespaces (a real non-root user)


def _cbtest() -> pwd.struct_passwd:
    if os.geteuid() != 0 or shutil.which("runuser") is None:
        pytest.skip("needs root (to run as the test user cbtest with runuser)")
    try:
        return pwd.getpwnam("cbtest")
    except KeyError:
        pytest.skip("no non-root test user cbtest on this machine")


@pytest.mark.parametrize(
    ("sysctl", "value", "words"),
    [
        (
            "kernel/apparmor_restrict_unprivileged_userns",
            "1",
            "sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0",
        ),
        ("user/max_user_namespaces", "0", "sudo sysctl -w user.max_user_namespaces=15000"),
    ],
)
def test_a_linux_without_user_namespaces_refuses_a_normal_user(sysctl: str, value: str, words: str) -> None:
    user = _cbtest()
    tmp_path = Path(tempfile.mkdtemp(prefix="cb-unconfinable-"))  # pytest's tmp is root's alone
    try:
        _refused_as(user, tmp_path, sysctl, value, words)
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)


def _refused_as(user: pwd.struct_passwd, tmp_path: Path, sysctl: str, value: str, words: str) -> None:
    tmp_path.chmod(0o755)
    fake = tmp_path / "proc-sys"
    (fake / sysctl).parent.mkdir(parents=True)
    (fake / sysctl).write_text(value + "\n")
    work = tmp_path / "work"
    work.mkdir()
    (work / "analysis.py").write_text("print('never runs')\n")
    for path in (tmp_path, fake, *fake.rglob("*"), work, *work.rglob("*")):
        os.chown(path, user.pw_uid, user.pw_gid)
    env = cli_env(tmp_path) | {"CONSOLE_BRIDGE_SYSCTL_ROOT": str(fake), "HOME": user.pw_dir, "PYTHONPATH": str(REPO)}
    env.pop("XDG_RUNTIME_DIR", None)
    base = ["runuser", "-u", "cbtest", "--", "env", *(f"{k}={v}" for k, v in env.items())]
    python = f"{user.pw_dir}/repo/.venv/bin/python"
    if not os.access(python, os.X_OK):
        pytest.skip(f"{python} (the test user's venv) is missing")
    cli = [python, "-c", "from console_bridge.cli import main; main()"]
    run = subprocess.run(
        [*base, *cli, "run", "analysis.py"], cwd=work, capture_output=True, text=True, timeout=60, check=False
    )
    assert run.returncode == 3, run.stdout + run.stderr
    assert "cannot confine a session on Linux:" in run.stderr and words in run.stderr
    assert "What you can do:" in run.stderr and "never runs" not in run.stdout
    doctor = subprocess.run(
        [*base, *cli, "doctor", "--json"], cwd=work, capture_output=True, text=True, timeout=60, check=False
    )
    assert doctor.returncode == 1, doctor.stdout + doctor.stderr
    checks = {check["name"]: check for check in json.loads(doctor.stdout)["checks"]}
    assert checks["namespaces"]["status"] == "fail" and words in checks["namespaces"]["detail"]
