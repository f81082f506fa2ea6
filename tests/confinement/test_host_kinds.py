"""Host kinds and the view's plan, pure: no process starts, nothing is mounted.

Each host kind users run on is simulated by its facts (``HostKind``) or by the documented
test hooks (``CONSOLE_BRIDGE_CGROUP_ROOT``, ``CONSOLE_BRIDGE_SYSCTL_ROOT``,
``CONSOLE_BRIDGE_PLATFORM``); the mechanism chosen for every limit, and every refusal's
message, are asserted.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from console_bridge import LaunchRefused, Limits
from console_bridge._confinement._host import detect_host, userns_problem
from console_bridge._confinement._limits import Mechanism
from console_bridge._confinement._plan import plan_confinement, supervisor_command
from console_bridge._confinement._view import build_view, etc_secrets
from tests.confinement.conftest import host_kind


@pytest.fixture
def no_cgroups(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    empty = tmp_path / "no-cgroups"
    empty.mkdir()
    monkeypatch.setenv("CONSOLE_BRIDGE_CGROUP_ROOT", str(empty))
    return empty


def test_a_normal_user_without_cgroups_gets_rlimits_it_names(no_cgroups: Path) -> None:
    plan = plan_confinement(Limits(), "t-normal", host_kind())
    reports = plan.report_dict()
    assert reports["processes"]["enforced_by"] == "userns-rlimit"
    assert "user namespace" in reports["processes"]["note"]
    assert reports["memory"]["enforced_by"] == "watched" and "RLIMIT_AS" in reports["memory"]["note"]
    assert reports["tmpdir"]["enforced_by"] == "tmpfs"
    assert plan.child_rlimits["nproc"] > 256 and plan.rlimits["as"] == 4 << 30
    assert plan.scope is None


def test_mechanisms_are_the_strings_users_see(no_cgroups: Path) -> None:
    """``Mechanism`` is a ``StrEnum``: a member equals its string, and ``status().limits`` shows the
    plain string (a printed status or a JSON report looks as before)."""
    assert {m.value for m in Mechanism} == {
        "cgroup2", "cgroup1", "systemd-scope", "rlimit", "userns-rlimit", "tmpfs", "accounting", "read-only-view",
        "watched",
    }  # fmt: skip
    assert all(m == m.value and f"{m}" == m.value for m in Mechanism)
    plan = plan_confinement(Limits(), "t-strings", host_kind())
    assert plan.mechanism("processes") is Mechanism.USERNS_RLIMIT
    shown = [report["enforced_by"] for report in plan.report_dict().values() if report["enforced_by"] is not None]
    assert shown and all(type(mechanism) is str for mechanism in shown)
    assert "Mechanism" not in repr(plan.report_dict()) and json.loads(json.dumps(plan.report_dict()))
    plan.release()


def test_the_files_limit_is_accounted_where_cells_write_the_host_and_free_elsewhere(no_cgroups: Path) -> None:
    writable = plan_confinement(Limits(files=1000), "t-files", host_kind(), writable=True).report_dict()["files"]
    assert writable["enforced_by"] == "accounting" and writable["value"] == 1000
    read_only = plan_confinement(Limits(), "t-files2", host_kind(), writable=False).report_dict()["files"]
    assert read_only["enforced_by"] == "read-only-view" and read_only["value"] == 100_000
    with pytest.raises(LaunchRefused, match=r"files=1000 .*--files-limit none"):
        plan_confinement(
            Limits(files=1000, memory=None, processes=None, recording=None, writes=None, enforce="strict"),
            "t-files3",
            host_kind(),
            writable=True,
        )


def test_strict_refuses_a_per_process_rlimit_and_names_the_way_out(no_cgroups: Path) -> None:
    with pytest.raises(LaunchRefused) as info:
        plan_confinement(Limits(enforce="strict", recording=None), "t-strict", host_kind())
    message = str(info.value)
    assert "memory" in message and "by a cgroup or a file system cap" in message and "RLIMIT_AS" in message
    assert "enforce='strict'" in message and "Nothing was started" in message


def test_strict_accepts_only_a_cgroup_or_a_file_system_cap(no_cgroups: Path) -> None:
    limits = Limits(enforce="strict", memory=None, recording=None, processes=None)
    plan = plan_confinement(limits, "t-strict2", host_kind(), writable=False)
    assert plan.mechanism("tmpdir") == "tmpfs" and plan.mechanism("writes") == "read-only-view"
    # RLIMIT_NPROC over the session's user namespace holds the whole tree, but it is an rlimit: the
    # contract's weaker kind, which "required" accepts and reports and "strict" refuses
    with pytest.raises(LaunchRefused) as info:
        plan_confinement(dataclasses.replace(limits, processes=256), "t-strict4", host_kind(), writable=False)
    assert "limit processes=256 cannot be enforced by a cgroup or a file system cap" in str(info.value)
    assert "RLIMIT_NPROC" in str(info.value) and "Nothing was started" in str(info.value)
    assert plan_confinement(Limits(), "t-required2", host_kind()).mechanism("processes") == "userns-rlimit"
    # cells that may write host folders: the writes limit is the bridge's accounting, not tree-wide
    with pytest.raises(LaunchRefused, match="limit writes=1GiB cannot be enforced by a cgroup or a file system"):
        plan_confinement(limits, "t-strict3", host_kind(), writable=True)
    assert plan_confinement(Limits(), "t-required", host_kind()).mechanism("writes") == "accounting"


def test_root_without_cgroups_counts_processes_in_its_user_namespace(no_cgroups: Path) -> None:
    # root's sessions run as unprivileged ids in a user namespace of their own, whose tasks RLIMIT_NPROC counts
    plan = plan_confinement(Limits(memory=None), "t-root", host_kind(uid=0, privileged=True))
    assert plan.mechanism("processes") == "userns-rlimit" and "nproc" in plan.child_rlimits
    with pytest.raises(LaunchRefused, match="processes"):
        plan_confinement(Limits(memory=None, enforce="strict"), "t-root2", host_kind(uid=0, privileged=True))


def test_a_systemd_user_manager_puts_the_session_in_a_scope_of_its_own(
    no_cgroups: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/run/user/1000")
    plan = plan_confinement(Limits(memory="1GiB", processes=64, cpu=1.5), "t-scope", host_kind(systemd="user"))
    assert {plan.mechanism(name) for name in ("memory", "processes", "cpu")} == {"systemd-scope"}
    assert plan.scope is not None
    argv = supervisor_command(["/bin/true"], cwd=None, grace=1.0, confinement=plan)
    scope = argv[: argv.index("--") + 1]
    assert scope[1:4] == ["--user", "--scope", "--quiet"]
    assert "--unit=console-bridge-t-scope.scope" in scope
    assert "OOMPolicy=continue" in scope  # a worker's OOM kill must not stop the whole session
    assert f"MemoryMax={1 << 30}" in scope and "TasksMax=128" in scope and "CPUQuota=150%" in scope
    assert plan.scope_env == {"XDG_RUNTIME_DIR": "/run/user/1000"}
    assert '"drop_env": ["XDG_RUNTIME_DIR"]' in argv[-1]


def test_no_user_namespaces_refuses_every_session_with_the_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sysctl = tmp_path / "sys"
    (sysctl / "kernel").mkdir(parents=True)
    (sysctl / "kernel" / "apparmor_restrict_unprivileged_userns").write_text("1\n")
    monkeypatch.setenv("CONSOLE_BRIDGE_SYSCTL_ROOT", str(sysctl))
    problem = userns_problem()
    assert problem is not None and "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0" in problem
    with pytest.raises(LaunchRefused) as info:
        plan_confinement(Limits(enforce="best_effort"), "t-apparmor", host_kind(userns_problem=problem))
    assert "apparmor_restrict_unprivileged_userns" in str(info.value) and "doctor" in str(info.value)
    # root does not need user namespaces
    plan_confinement(
        Limits(enforce="best_effort"), "t-apparmor-root", host_kind(uid=0, privileged=True, userns_problem=problem)
    )
    (sysctl / "kernel" / "apparmor_restrict_unprivileged_userns").write_text("0\n")
    (sysctl / "user").mkdir()
    (sysctl / "user" / "max_user_namespaces").write_text("0\n")
    assert "user.max_user_namespaces" in (userns_problem() or "")


@pytest.mark.parametrize("platform", ["darwin", "win32"])
def test_other_platforms_are_refused_by_name(platform: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONSOLE_BRIDGE_PLATFORM", platform)
    host = detect_host(refresh=True)
    try:
        assert host.namespace_problem is not None and platform in host.namespace_problem
        with pytest.raises(LaunchRefused, match=platform):
            plan_confinement(Limits(), "t-platform", host)
    finally:
        monkeypatch.delenv("CONSOLE_BRIDGE_PLATFORM")
        detect_host(refresh=True)


# ----------------------------------------------------------------------------------------- the view


@pytest.fixture
def host_tree(tmp_path: Path) -> Path:
    root = tmp_path / "host"
    for folder in (
        "usr/bin",
        "etc/ssl/private",
        "opt",
        "home/alice/.ssh",
        "home/alice/project/.git",
        "home/alice/venv/bin",
        "home/alice/data",
        "srv",
    ):
        (root / folder).mkdir(parents=True)
    (root / "bin").symlink_to("usr/bin")
    (root / "etc" / "hosts").write_text("127.0.0.1 localhost\n")
    secret = root / "etc" / "app-secret.conf"
    secret.write_text("password=1\n")
    secret.chmod(0o600)
    (root / "etc" / "ssl" / "private").chmod(0o700)
    (root / "home" / "alice" / "venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    return root


def _view(host_tree: Path, **kwargs: object) -> object:
    alice = host_tree / "home" / "alice"
    options: dict[str, object] = {
        "root": host_tree / "state" / "view",
        "workspace": alice / "project",
        "workspace_writable": False,
        "environments": [(alice / "venv", "the worker's Python environment")],
        "tmpdir": host_tree / "state" / "tmp",
        "tmpdir_size": 32 << 20,
        "home": alice,
        "runtime": [str(host_tree / name) for name in ("usr", "bin", "etc", "opt", "lib32")],
        "etc_masks": etc_secrets(str(host_tree / "etc")),
    }
    options.update(kwargs)
    return build_view(**options)  # type: ignore[arg-type]


def test_the_view_holds_what_the_session_runs_and_nothing_else(host_tree: Path) -> None:
    alice = host_tree / "home" / "alice"
    view = _view(host_tree, read_roots=[alice / "data"])
    inside = [
        host_tree / "usr" / "bin" / "python3",
        host_tree / "etc" / "hosts",
        alice / "venv" / "bin",
        alice / "project" / "a.csv",
        alice / "data" / "x.parquet",
        host_tree / "state" / "tmp" / "f",
    ]
    outside = [
        alice / ".ssh" / "id_rsa",
        alice / ".bash_history",
        alice / "other-project" / ".env",
        host_tree / "srv" / "x",
        host_tree / "etc" / "app-secret.conf",
        host_tree / "etc" / "ssl" / "private",
        host_tree / "state" / "sessions" / "other" / "tmp" / "secret",
        Path("/tmp/x"),
        Path("/root/x"),
    ]
    for path in inside:
        assert view.contains(path), path  # type: ignore[attr-defined]
    for path in outside:
        assert not view.contains(path), path  # type: ignore[attr-defined]
    described = {entry["path"]: entry for entry in view.describe()}  # type: ignore[attr-defined]
    assert described[str(alice / "data")]["why"] == "read root" and not described[str(alice / "data")]["writable"]
    assert not described[str(alice / "project")]["writable"]


def test_the_plan_is_ordered_and_recreates_symlinks(host_tree: Path) -> None:
    alice = host_tree / "home" / "alice"
    view = _view(host_tree, workspace_writable=True, writable_roots=[alice / "data"])
    steps = view.plan()["steps"]  # type: ignore[attr-defined]
    ops = [(step["op"], step.get("path")) for step in steps]
    assert ("symlink", str(host_tree / "bin")) in ops
    binds = [step for step in steps if step["op"] == "bind"]
    depths = [step["path"].count("/") for step in binds]
    assert depths == sorted(depths)
    assert {step["path"]: step["writable"] for step in binds}[str(alice / "project")] is True
    assert ops.index(("tmpfs", "/tmp")) < min(i for i, (op, _) in enumerate(ops) if op == "bind")
    masks = [path for op, path in ops if op == "mask"]
    assert str(host_tree / "etc" / "app-secret.conf") in masks and str(host_tree / "etc" / "ssl" / "private") in masks
    tmpfs = [step for step in steps if step["op"] == "tmpfs" and step["path"] == str(host_tree / "state" / "tmp")]
    assert tmpfs and tmpfs[0]["size"] == 32 << 20 and tmpfs[0]["mode"] == 0o700


def test_etc_secrets_lists_what_others_may_not_read(host_tree: Path) -> None:
    found = etc_secrets(str(host_tree / "etc"))
    assert str(host_tree / "etc" / "app-secret.conf") in found
    assert str(host_tree / "etc" / "hosts") not in found
    if os.geteuid() != 0:
        assert all(not os.access(path, os.R_OK) or path.endswith(("app-secret.conf", "private")) for path in found)


def test_a_confinement_that_cannot_be_set_up_is_a_refusal(tmp_path: Path) -> None:
    """The supervisor's setup line (or systemd-run's failure) turns the crash into LaunchRefused."""
    from console_bridge import AsyncConsole, ConnectionClosed

    console = AsyncConsole(tmp_path)
    crash = ConnectionClosed(
        "initialize: server 'mcp-console' crashed",
        stderr_tail=(
            "console-bridge supervisor: building the session's view failed: pivot_root: Operation not permitted"
        ),
    )
    refusal = console._launcher.confinement_refusal(crash)
    assert isinstance(refusal, LaunchRefused)
    assert "pivot_root" in str(refusal) and "doctor" in str(refusal) and "Nothing ran" in str(refusal)
    other = ConnectionClosed("initialize: server 'mcp-console' crashed", stderr_tail="segfault")
    assert console._launcher.confinement_refusal(other) is other


def test_a_mask_never_covers_the_sessions_own_folders(host_tree: Path) -> None:
    """A state folder inside the recordings folder (a denied place) must stay writable for the server:
    mcp-console's deny rules keep it from cells, the view does not mask it."""
    recordings = host_tree / "rec"
    cache = recordings / "state" / "sessions" / "s1" / "cache"
    cache.mkdir(parents=True)
    view = _view(
        host_tree,
        recording_base=recordings,
        server_dirs=[(cache, "cache")],
        tmpdir=recordings / "state" / "sessions" / "s1" / "tmp",
        masks=[str(recordings / "state")],
    )
    masks = view.masks  # type: ignore[attr-defined]
    assert str(recordings / "state") not in masks
    assert view.contains(cache)  # type: ignore[attr-defined]


def test_run_names_every_limit_best_effort_left_unenforced(tmp_path: Path) -> None:
    """`run --best-effort` says on stderr which limits nothing holds here, and only those (as a normal
    user without a cgroup: the CPU cap; memory is watched there)."""
    import json
    import subprocess
    import sys

    (tmp_path / "a.py").write_text("print(6 * 7)\n")
    cli = Path(sys.executable).with_name("console-bridge")
    args = [str(cli), "run", "--best-effort", "--memory", "1GiB", "--cpu", "1.5", "--artifacts", "out", "a.py"]
    proc = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0 and proc.stdout == "42\n", proc.stderr
    limits = json.loads((tmp_path / "out" / "report.json").read_text())["limits"]
    loose = {name for name, report in limits.items() if report["value"] is not None and report["enforced_by"] is None}
    named = {line.split("limit ")[1].split()[0] for line in proc.stderr.splitlines() if "is NOT enforced" in line}
    assert named == loose, proc.stderr
    host = detect_host()
    if os.geteuid() != 0 and not host.cgroup_v2 and host.systemd is None:  # no cgroup can be ours here
        assert "cpu" in loose and "memory" not in loose
