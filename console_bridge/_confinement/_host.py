"""What this host offers for confinement, detected once per process (reads /proc and /sys only).

``HostKind`` is the one place that knows about privileges, user namespaces, cgroup
versions and delegation, the systemd user manager, and the container this process runs in
(``_container``: which runtime, and a real ``unshare`` probe of what its profile allows); the limit strategies
(``_plan.py``) and the namespace choice are picked from it, never by ``if root:``
elsewhere. ``detect_host()`` caches its answer; ``detect_host(refresh=True)`` reads again.

Test hooks (documented, for simulating other hosts): ``CONSOLE_BRIDGE_CGROUP_ROOT``
replaces ``/sys/fs/cgroup``; ``CONSOLE_BRIDGE_SYSCTL_ROOT`` replaces ``/proc/sys``;
``CONSOLE_BRIDGE_NO_SYSTEMD=1`` hides the systemd manager; ``CONSOLE_BRIDGE_PLATFORM``
replaces ``sys.platform``; ``CONSOLE_BRIDGE_MACHINE`` replaces ``os.uname().machine``.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from console_bridge._confinement._container import Container, detect_container, probe_userns

__all__ = ["HostKind", "detect_host", "userns_problem"]

_CAP_SETGID = 6
_CAP_SETUID = 7
_CAP_SYS_ADMIN = 21
#: Architectures whose system call numbers the namespace code knows (``_namespaces.SYSCALLS``).
ARCHITECTURES = ("x86_64", "aarch64", "arm64")
#: Idmapped mounts (``mount_setattr(MOUNT_ATTR_IDMAP)``): root's sessions need them.
IDMAP_KERNEL = (5, 12)


def _sysctl(name: str) -> str | None:
    root = Path(os.environ.get("CONSOLE_BRIDGE_SYSCTL_ROOT") or "/proc/sys")
    try:
        return (root / name).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None


def _effective_caps() -> int:
    try:
        for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    except (OSError, ValueError):
        pass
    return 0


def _kernel() -> tuple[int, int]:
    release = os.uname().release if hasattr(os, "uname") else ""
    numbers = []
    for part in release.split("-")[0].split(".")[:2]:
        digits = "".join(ch for ch in part if ch.isdigit())
        numbers.append(int(digits) if digits else 0)
    major, minor, *_rest = [*numbers, 0, 0]
    return major, minor


def userns_problem() -> str | None:
    """Why an unprivileged process may not create a user namespace here, with the fix; None if it may."""
    platform = os.environ.get("CONSOLE_BRIDGE_PLATFORM") or sys.platform
    if not platform.startswith("linux"):
        return f"the platform is {platform}, not Linux (console-bridge confines sessions on Linux only)"
    if _sysctl("kernel/apparmor_restrict_unprivileged_userns") == "1":
        return (
            "AppArmor forbids unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns=1, "
            "Ubuntu 23.10 and later); allow them with `sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0` "
            "(persist it in /etc/sysctl.d/), or run as root"
        )
    if _sysctl("kernel/unprivileged_userns_clone") == "0":
        return (
            "the kernel forbids unprivileged user namespaces (kernel.unprivileged_userns_clone=0); allow them with "
            "`sudo sysctl -w kernel.unprivileged_userns_clone=1`"
        )
    if _sysctl("user/max_user_namespaces") == "0":
        return (
            "user namespaces are disabled (user.max_user_namespaces=0); enable them with "
            "`sudo sysctl -w user.max_user_namespaces=15000`"
        )
    return None


def _systemd_manager(uid: int, cgroup_v2: bool) -> str | None:
    """``"user"`` or ``"system"`` when ``systemd-run --scope`` can place a session in a scope of its own."""
    if os.environ.get("CONSOLE_BRIDGE_NO_SYSTEMD") or not cgroup_v2 or shutil.which("systemd-run") is None:
        return None
    if uid == 0:
        return "system" if Path("/run/systemd/system").is_dir() else None
    runtime = os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{uid}"
    if Path(runtime, "systemd", "private").exists() or Path(runtime, "bus").exists():
        return "user"
    return None


@dataclass(frozen=True, slots=True)
class HostKind:
    """The confinement facilities of this host, as this process sees them."""

    platform: str
    uid: int
    privileged: bool  # CAP_SYS_ADMIN: may mount in a mount namespace of its own
    userns_problem: str | None  # None: unprivileged user namespaces work (as far as sysctls say)
    cgroup_v2: bool  # the unified hierarchy is mounted at the cgroup root
    systemd: str | None  # "user" | "system" | None
    machine: str = "x86_64"  # os.uname().machine
    kernel: tuple[int, int] = (6, 0)
    can_map: bool = True  # CAP_SETUID and CAP_SETGID: may map other ids into a user namespace
    max_user_namespaces: str | None = None  # the sysctl as read (None: unreadable)
    container: Container | None = None  # the container this process runs in (None: a host)
    container_problem: str | None = None  # why the probe could not unshare in it (None: it could, or not probed)

    @property
    def linux(self) -> bool:
        return self.platform.startswith("linux")

    @property
    def namespace_mode(self) -> str:
        """``"mapped"``: root, whose sessions run as an unprivileged block of host ids (``_idmap``);
        ``"user"``: a normal user, mapped to itself."""
        return "mapped" if self.uid == 0 else "user"

    @property
    def namespace_problem(self) -> str | None:
        """Why no session view can be built here (None: it can)."""
        if not self.linux:
            return f"the platform is {self.platform}, not Linux (console-bridge confines sessions on Linux only)"
        if self.machine not in ARCHITECTURES:
            return (
                f"this architecture ({self.machine}) is not one whose system call numbers console-bridge knows "
                "(x86_64, aarch64); run on one of those"
            )
        if self.namespace_mode == "user":
            if self.userns_problem is None and self.container is not None and self.container_problem is not None:
                return self.container.problem(self.container_problem)
            return self.userns_problem
        if self.max_user_namespaces == "0":
            return (
                "user namespaces are disabled (user.max_user_namespaces=0), and started by root a session needs one "
                "so that its cells hold no host privilege; enable them with `sysctl -w user.max_user_namespaces=15000`"
            )
        if not (self.privileged and self.can_map):
            return (
                "this root lacks CAP_SYS_ADMIN, CAP_SETUID or CAP_SETGID (a container's root?), which building a "
                "session's view and mapping its ids to unprivileged host ids need, and a cell must never hold uid 0 "
                "of the host; run console-bridge as a normal user there (e.g. `docker run --user 1000`, "
                "`USER 1000` in the image)"
            )
        if self.kernel < IDMAP_KERNEL:
            return (
                f"started by root, a session's writable folders are bound through idmapped mounts (Linux 5.12 and "
                f"later), and this kernel is {self.kernel[0]}.{self.kernel[1]}; run console-bridge as a normal user "
                "(its cells then hold that user's ids), or on a newer kernel"
            )
        return None

    @property
    def name(self) -> str:
        who = "root" if self.uid == 0 else "non-root"
        tree = "cgroup v2" if self.cgroup_v2 else "cgroup v1"
        extra = f", systemd {self.systemd} manager" if self.systemd else ""
        inside = f" in a {self.container.label}" if self.container is not None else ""
        return f"{who}{inside} on {tree}{extra}"


_CACHED: HostKind | None = None


def detect_host(refresh: bool = False) -> HostKind:
    global _CACHED
    if _CACHED is not None and not refresh:
        return _CACHED
    platform = os.environ.get("CONSOLE_BRIDGE_PLATFORM") or sys.platform
    root = Path(os.environ.get("CONSOLE_BRIDGE_CGROUP_ROOT") or "/sys/fs/cgroup")
    cgroup_v2 = (root / "cgroup.controllers").is_file()
    uid = os.geteuid() if hasattr(os, "geteuid") else -1
    linux = platform.startswith("linux")
    caps = _effective_caps() if linux else 0
    problem = userns_problem()
    container = detect_container() if linux else None
    # Only a container's profile can forbid what the sysctls allow: probe there, once, as the session will.
    probed = probe_userns() if container is not None and uid != 0 and problem is None else None
    _CACHED = HostKind(
        platform=platform,
        uid=uid,
        privileged=bool(caps >> _CAP_SYS_ADMIN & 1),
        userns_problem=problem,
        cgroup_v2=cgroup_v2,
        systemd=_systemd_manager(uid, cgroup_v2) if linux else None,
        machine=os.environ.get("CONSOLE_BRIDGE_MACHINE") or (os.uname().machine if hasattr(os, "uname") else ""),
        kernel=_kernel(),
        can_map=bool(caps >> _CAP_SETUID & 1 and caps >> _CAP_SETGID & 1),
        max_user_namespaces=_sysctl("user/max_user_namespaces"),
        container=container,
        container_problem=probed,
    )
    return _CACHED
