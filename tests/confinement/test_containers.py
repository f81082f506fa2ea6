"""Containers as a host kind: detection from what each runtime leaves behind (simulated under
``CONSOLE_BRIDGE_HOST_ROOT``), the one-line refusal naming each runtime's fix, the real
``unshare`` probe on this host, and the shipped seccomp profile against Docker's default.

The real containers (Docker's default profile refused, the shipped profile confined) are run by
``scripts/ci-container.sh``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from console_bridge import LaunchRefused
from console_bridge._confinement._container import (
    INIT_CGROUP_NS,
    Container,
    detect_container,
    probe_userns,
    seccomp_profile_path,
)
from console_bridge._confinement._unconfinable import host_gap, refuse_unconfinable
from tests.confinement.conftest import host_kind

REPO = Path(__file__).resolve().parents[2]
DOCKER_DEFAULT = Path(__file__).parent / "data" / "moby-seccomp-default.json"
EPERM = "unshare(CLONE_NEWUSER|CLONE_NEWNS): Operation not permitted"


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CONSOLE_BRIDGE_HOST_ROOT", str(tmp_path))
    (tmp_path / "proc/self/ns").mkdir(parents=True)
    (tmp_path / "proc/self/ns/cgroup").symlink_to(f"cgroup:[{INIT_CGROUP_NS}]")
    return tmp_path


def test_a_host_is_no_container(root: Path) -> None:
    assert detect_container({}) is None


@pytest.mark.parametrize(
    ("path", "text", "runtime"),
    [
        (".dockerenv", "", "docker"),
        ("run/.containerenv", 'engine="podman-4.3.1"\n', "podman"),
        ("var/run/secrets/kubernetes.io/serviceaccount/token", "x", "kubernetes"),
        ("proc/1/environ", "PATH=/bin\0container=podman\0", "podman"),
        ("proc/1/environ", "container=lxc\0", "container"),
    ],
)
def test_each_runtime_is_told_by_what_it_leaves(root: Path, path: str, text: str, runtime: str) -> None:
    (root / path).parent.mkdir(parents=True, exist_ok=True)
    (root / path).write_text(text)
    found = detect_container({})
    assert found is not None and found.runtime == runtime and found.apparmor is None


def test_kubernetes_wins_over_the_runtime_under_it(root: Path) -> None:
    (root / ".dockerenv").write_text("")
    found = detect_container({"KUBERNETES_SERVICE_HOST": "10.0.0.1"})
    assert found is not None and found.runtime == "kubernetes"
    assert found.signs == ("KUBERNETES_SERVICE_HOST", "/.dockerenv")


def test_a_cgroup_namespace_of_its_own_is_a_container(root: Path) -> None:
    (root / "proc/self/ns/cgroup").unlink()
    (root / "proc/self/ns/cgroup").symlink_to("cgroup:[4026532711]")
    found = detect_container({})
    assert found is not None and found.runtime == "container"
    assert found.signs == ("a cgroup namespace of its own",)


def test_the_apparmor_profile_is_read_only_where_apparmor_is_on(root: Path) -> None:
    (root / ".dockerenv").write_text("")
    (root / "proc/self/attr").mkdir(parents=True)
    (root / "proc/self/attr/current").write_text("docker-default (enforce)\n")
    found = detect_container({})
    assert found is not None and found.apparmor is None  # no /sys/kernel/security/apparmor
    (root / "sys/kernel/security/apparmor").mkdir(parents=True)
    found = detect_container({})
    assert found is not None and found.apparmor == "docker-default (enforce)"
    (root / "proc/self/attr/current").write_text("unconfined\n")
    found = detect_container({})
    assert found is not None and found.apparmor is None


def _refusal(container: Container) -> str:
    with pytest.raises(LaunchRefused) as info:
        refuse_unconfinable(host_kind(container=container, container_problem=EPERM))
    message = str(info.value)
    assert "\n" not in message
    return message


def test_docker_refuses_in_one_line_naming_the_shipped_profile_by_its_installed_path() -> None:
    message = _refusal(Container("docker", ("/.dockerenv",)))
    profile = seccomp_profile_path()
    assert profile.is_file() and profile.name == "seccomp-container.json"
    assert f"`docker run --security-opt seccomp={profile}`" in message
    assert "Docker container" in message and EPERM in message and "apparmor" not in message
    assert message.startswith("console-bridge cannot confine a session on Linux: in this Docker container")


def test_apparmor_adds_its_option_for_docker_and_podman() -> None:
    docker = _refusal(Container("docker", ("/.dockerenv",), "docker-default (enforce)"))
    assert f"--security-opt seccomp={seccomp_profile_path()} --security-opt apparmor=unconfined`" in docker
    podman = _refusal(Container("podman", ("/run/.containerenv",), "containers-default-0.50 (enforce)"))
    assert f"`podman run --security-opt seccomp={seccomp_profile_path()} --security-opt apparmor=unconfined`" in podman


def test_kubernetes_gets_the_pod_fields() -> None:
    message = _refusal(Container("kubernetes", ("KUBERNETES_SERVICE_HOST",), "cri-containerd.apparmor.d (enforce)"))
    assert "seccompProfile: {type: Localhost, localhostProfile: console-bridge/seccomp-container.json}" in message
    assert "appArmorProfile: {type: Unconfined}" in message
    assert "container.apparmor.security.beta.kubernetes.io/<container>: unconfined" in message


def test_a_sysctl_that_forbids_user_namespaces_is_named_first() -> None:
    problem = "the kernel forbids unprivileged user namespaces (...); allow them with `sysctl ...`"
    host = host_kind(userns_problem=problem, container=Container("docker", ("/.dockerenv",)), container_problem=EPERM)
    assert host.namespace_problem == problem


def test_a_container_whose_profile_allows_namespaces_is_not_refused() -> None:
    host = host_kind(container=Container("podman", ("/run/.containerenv",)), container_problem=None)
    assert host.namespace_problem is None and host_gap(host) is None
    assert host.name == "non-root in a Podman container on cgroup v2"


def test_the_probe_unshares_for_real_here() -> None:
    # This machine allows user namespaces (the confinement tests need them): the probe must agree.
    assert probe_userns(timeout=30) is None


def _readme_additions() -> list[str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("### A container's seccomp profile", 1)[1].split("\n#", 1)[0]
    match = re.search(r"adds exactly one rule, allowing (.+?):", section)
    assert match is not None, "the README must list the added system calls"
    return re.findall(r"`([a-z0-9_]+)`", match.group(1))


def test_the_shipped_profile_is_dockers_default_plus_the_documented_rule() -> None:
    default = json.loads(DOCKER_DEFAULT.read_text(encoding="utf-8"))
    shipped = json.loads((REPO / "sandbox_profiles" / "seccomp-container.json").read_text(encoding="utf-8"))
    assert shipped == json.loads(seccomp_profile_path().read_text(encoding="utf-8"))
    *same, added = shipped["syscalls"]
    assert {key: value for key, value in shipped.items() if key != "syscalls"} == {
        key: value for key, value in default.items() if key != "syscalls"
    }
    assert same == default["syscalls"]
    assert added["action"] == "SCMP_ACT_ALLOW" and set(added) == {"names", "action", "comment"}
    assert added["names"] == _readme_additions()
    # Docker's default forbids exactly these to a container without CAP_SYS_ADMIN
    # (clone only with namespace flags); nothing that it already allows is added.
    plain = {
        name
        for rule in default["syscalls"]
        if not rule.get("includes") and not rule.get("args")
        for name in rule["names"]
    }
    assert not set(added["names"]) & plain
    assert "clone3" not in added["names"]  # (its ENOSYS makes the C library fall back to clone)


BWRAP = (
    "mcp-console refused the call: bwrap: No permissions to create a new namespace, likely because the kernel "
    "does not allow non-privileged user namespaces.\n[output produced while idle]\nlocal resolver ..."
)


def test_bubblewraps_own_refusal_is_one_line_naming_the_containers_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    # A profile that allows unshare but not clone with namespace flags: the supervisor builds the
    # view, then mcp-console's bubblewrap fails in the probe cell (measured: scripts/ci-container.sh).
    from console_bridge._console import _launcher
    from console_bridge._errors import ServerError

    host = host_kind(container=Container("docker", ("/.dockerenv",)))
    monkeypatch.setattr(_launcher, "detect_host", lambda: host)
    refusal = _launcher.sandbox_refusal(ServerError(BWRAP))
    assert isinstance(refusal, LaunchRefused) and "\n" not in str(refusal)
    assert str(refusal).startswith("mcp-console's sandbox could not start the probe cell: bwrap: No permissions")
    profile = seccomp_profile_path()
    fix = f"In this Docker container: start the container with `docker run --security-opt seccomp={profile}`"
    assert fix in str(refusal)
    other = ServerError("mcp-console refused the call: something else")
    assert _launcher.sandbox_refusal(other) is other


def test_a_mount_point_another_session_removed_is_not_blamed_on_the_container(monkeypatch: pytest.MonkeyPatch) -> None:
    """mcp-console makes folders in a shared workspace to mount over (.agents, .git, ...) and removes them
    at close: a session starting then finds one gone (seen once in the Jupyter kernel tests, the kernel's
    session and its spare on one workspace). The start tries once more; a refusal names the folder and the
    cause, not a container's seccomp profile."""
    from console_bridge._console import _launcher
    from console_bridge._errors import ServerError

    host = host_kind(container=Container("docker", ("/.dockerenv",)))
    monkeypatch.setattr(_launcher, "detect_host", lambda: host)
    gone = ServerError("bwrap: Can't mount tmpfs on /newroot/home/u/project/.agents: No such file or directory")
    assert _launcher.vanished_mount_point(gone) == "/home/u/project/.agents"
    refusal = _launcher.sandbox_refusal(gone)
    assert isinstance(refusal, LaunchRefused) and "(/home/u/project/.agents) vanished" in str(refusal)
    assert "another session on this workspace" in str(refusal) and "seccomp" not in str(refusal)
    assert _launcher.vanished_mount_point(ServerError(BWRAP)) is None  # a namespace refused: the container's fix
    assert "seccomp" in str(_launcher.sandbox_refusal(ServerError(BWRAP)))


def test_an_unknown_runtime_is_named_as_a_container() -> None:
    message = _refusal(Container("container", ("a cgroup namespace of its own",)))
    assert message.startswith("console-bridge cannot confine a session on Linux: in this container (told by a cgroup")
    assert f"run the container with the seccomp profile {seccomp_profile_path()}" in message
    assert host_kind(container=Container("container", ())).name == "non-root in a container on cgroup v2"
