"""Containers as a host kind: which runtime runs this process, and the exact fix when its profile
forbids the namespaces a session needs.

A container is told by what its runtime leaves behind (``/.dockerenv``, ``/run/.containerenv``,
``container=`` in PID 1's environment, Kubernetes' service variables and account secrets) or by a
cgroup namespace that is not the host's (the initial one has a fixed inode). What its seccomp
and AppArmor profiles allow is not readable from anywhere: :func:`probe_userns` tries the real
``unshare(CLONE_NEWUSER|CLONE_NEWNS)`` in a throwaway child, as a session's supervisor will.

Each runtime is a strategy (:data:`RUNTIMES`): how it is recognised and how its user applies a
seccomp profile (and lifts AppArmor); :meth:`Container.fix` words the one refusal a session
gives there. The profile is the one this package ships: Docker's default plus the few calls
bubblewrap needs (``sandbox_profiles/seccomp-container.json``, see the README).

Test hook: ``CONSOLE_BRIDGE_HOST_ROOT`` replaces ``/`` for every file read here (not ``environ``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from console_bridge._confinement._child import run_child

__all__ = ["RUNTIMES", "Container", "detect_container", "probe_userns", "seccomp_profile_path"]

#: The inode of the initial cgroup namespace (``PROC_CGROUP_INIT_INO`` in the kernel).
INIT_CGROUP_NS = 0xEFFFFFFB
PROFILE_NAME = "seccomp-container.json"
_CLONE_NEWUSER_NEWNS = 0x10000000 | 0x00020000
_PROBE = (
    "import ctypes, sys\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "sys.stdout.write(str(ctypes.get_errno() if libc.unshare(int(sys.argv[1])) else 0))\n"
)


def seccomp_profile_path() -> Path:
    """Where this installation's container seccomp profile is (inside the wheel, or the repo's)."""
    shipped = resources.files("console_bridge").joinpath("sandbox_profiles", PROFILE_NAME)
    if shipped.is_file():
        return Path(str(shipped))
    return Path(__file__).resolve().parents[2] / "sandbox_profiles" / PROFILE_NAME


def _docker_fix(profile: str, apparmor: bool) -> str:
    extra = " --security-opt apparmor=unconfined" if apparmor else ""
    return (
        f"start the container with `docker run --security-opt seccomp={profile}{extra}` (the file is "
        "installed here; copy it to the Docker host), or run console-bridge outside the container"
    )


def _podman_fix(profile: str, apparmor: bool) -> str:
    extra = " --security-opt apparmor=unconfined" if apparmor else ""
    return (
        f"start the container with `podman run --security-opt seccomp={profile}{extra}` (the file is "
        "installed here; copy it to the Podman host)"
    )


def _kubernetes_fix(profile: str, apparmor: bool) -> str:
    lift = (
        "; AppArmor confines it too: also `securityContext.appArmorProfile: {type: Unconfined}` (Kubernetes "
        "1.30+; before: the annotation `container.apparmor.security.beta.kubernetes.io/<container>: unconfined`)"
        if apparmor
        else ""
    )
    return (
        "give the container `securityContext.seccompProfile: {type: Localhost, localhostProfile: "
        f"console-bridge/{PROFILE_NAME}}}` with {profile} copied to each node's kubelet seccomp folder "
        f"(/var/lib/kubelet/seccomp/console-bridge/{PROFILE_NAME}){lift}"
    )


def _other_fix(profile: str, apparmor: bool) -> str:
    extra = " and an AppArmor profile that allows mounts (or none)" if apparmor else ""
    return (
        f"run the container with the seccomp profile {profile} (Docker's default plus the namespace and mount "
        f"calls bubblewrap needs){extra}, or run console-bridge outside the container"
    )


@dataclass(frozen=True, slots=True)
class Runtime:
    """A container runtime: its name and how its user applies the shipped profile."""

    name: str
    label: str
    fix: Callable[[str, bool], str]


RUNTIMES: dict[str, Runtime] = {
    "docker": Runtime("docker", "Docker", _docker_fix),
    "podman": Runtime("podman", "Podman", _podman_fix),
    "kubernetes": Runtime("kubernetes", "Kubernetes", _kubernetes_fix),
    "container": Runtime("container", "", _other_fix),
}


@dataclass(frozen=True, slots=True)
class Container:
    """This process runs in a container: which runtime (``RUNTIMES``), the signs it was told by,
    and the AppArmor profile confining it (None: AppArmor is off or the process is unconfined)."""

    runtime: str
    signs: tuple[str, ...]
    apparmor: str | None = None

    @property
    def label(self) -> str:
        """``"Docker container"``, ``"Podman container"``, ..., or ``"container"`` (runtime unknown)."""
        return f"{RUNTIMES[self.runtime].label} container".lstrip()

    def fix(self, profile: Path | str | None = None) -> str:
        """The options that let a session build its namespaces in this container (one sentence)."""
        path = str(profile if profile is not None else seccomp_profile_path())
        return RUNTIMES[self.runtime].fix(path, self.apparmor is not None)

    def problem(self, error: str) -> str:
        """``HostKind.namespace_problem``'s words when the probe failed: what, then ``; `` and the fix."""
        confined = f" and AppArmor profile {self.apparmor!r}" if self.apparmor else ""
        return (
            f"in this {self.label} (told by {', '.join(self.signs)}) creating a user namespace failed "
            f"({error}): the container's seccomp profile{confined} forbids the namespaces a session needs; "
            + self.fix()
        )


def _root() -> Path:
    return Path(os.environ.get("CONSOLE_BRIDGE_HOST_ROOT") or "/")


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _pid1_container(root: Path) -> str | None:
    """``container=`` in PID 1's environment (readable when we are PID 1's user), else None."""
    try:
        raw = (root / "proc/1/environ").read_bytes()
    except OSError:
        return None
    for item in raw.split(b"\0"):
        if item.startswith(b"container="):
            return item[len(b"container=") :].decode("utf-8", "replace")
    return None


def _cgroup_namespaced(root: Path) -> bool:
    try:
        link = os.readlink(root / "proc/self/ns/cgroup")
    except OSError:
        return False
    digits = link.partition("[")[2].rstrip("]")
    return digits.isdigit() and int(digits) != INIT_CGROUP_NS


def _apparmor(root: Path) -> str | None:
    if not (root / "sys/kernel/security/apparmor").exists():
        return None
    for name in ("proc/self/attr/apparmor/current", "proc/self/attr/current"):
        text = _read(root / name)
        if text is not None:
            label = text.strip().rstrip("\0").strip()
            return None if not label or label == "unconfined" else label
    return None


def detect_container(environ: Mapping[str, str] | None = None) -> Container | None:
    """The container this process runs in, or None on a host (reads files under
    ``CONSOLE_BRIDGE_HOST_ROOT`` or ``/``, and ``environ``)."""
    root = _root()
    env = os.environ if environ is None else environ
    signs: list[str] = []
    runtime = None
    if env.get("KUBERNETES_SERVICE_HOST") or (root / "var/run/secrets/kubernetes.io").exists():
        runtime = "kubernetes"
        signs.append("KUBERNETES_SERVICE_HOST" if env.get("KUBERNETES_SERVICE_HOST") else "Kubernetes secrets")
    containerenv = _read(root / "run/.containerenv")
    if containerenv is not None:
        runtime = runtime or "podman"
        signs.append("/run/.containerenv")
    if (root / ".dockerenv").exists():
        runtime = runtime or "docker"
        signs.append("/.dockerenv")
    declared = _pid1_container(root)
    if declared is not None:
        runtime = runtime or ("podman" if declared == "podman" else "docker" if declared == "docker" else "container")
        signs.append(f"container={declared} in PID 1's environment")
    if _cgroup_namespaced(root):
        runtime = runtime or "container"
        signs.append("a cgroup namespace of its own")
    if runtime is None:
        return None
    return Container(runtime, tuple(signs), _apparmor(root))


def probe_userns(*, timeout: float = 10.0) -> str | None:
    """None when a child may ``unshare(CLONE_NEWUSER|CLONE_NEWNS)`` here, else why not (e.g.
    ``unshare(CLONE_NEWUSER|CLONE_NEWNS): Operation not permitted``)."""
    done = run_child(_PROBE, str(_CLONE_NEWUSER_NEWNS), timeout=timeout)
    if isinstance(done, str):
        return done
    out = done.stdout.strip()
    if done.returncode != 0 or not out.isdigit():
        return f"the probe failed: {(done.stderr.strip() or out or f'exit status {done.returncode}')[-300:]}"
    code = int(out)
    return None if code == 0 else f"unshare(CLONE_NEWUSER|CLONE_NEWNS): {os.strerror(code)}"
