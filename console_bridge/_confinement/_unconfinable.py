"""Hosts where no session can be confined, and the one refusal every entry point gives there.

A session's read view is built in a private mount namespace: as root, or as a normal user
inside a user namespace. Where neither is possible -- macOS and Windows (mcp-console runs
there, console-bridge's confinement does not), a Linux that forbids unprivileged user
namespaces -- :func:`refuse_unconfinable` raises :class:`LaunchRefused` saying which platform,
what is missing and what the user can do. ``AsyncConsole`` (and so ``Console``, the session
managers, ``run``, ``serve`` and the Jupyter magics) calls it when it is built, before anything
is looked up or started; ``plan_confinement`` calls it again; ``doctor`` shows the same words.
"""

from __future__ import annotations

from dataclasses import dataclass

from console_bridge._confinement._host import HostKind, detect_host
from console_bridge._errors import LaunchRefused

__all__ = ["HostGap", "host_gap", "refuse_unconfinable"]

_PLATFORMS = {"darwin": "macOS", "win32": "Windows", "cygwin": "Windows (Cygwin)", "msys": "Windows (MSYS)"}
_LINUX_VM = (
    "run console-bridge in a Linux virtual machine or on a Linux CI runner (GitHub Actions: `runs-on: "
    "ubuntu-24.04`, see examples/ci/), where a normal user may create user namespaces"
)
_FIXES = {
    "darwin": f"{_LINUX_VM}; on a Mac, e.g. a Lima, Colima, OrbStack or UTM VM (a container needs "
    "`--security-opt seccomp=` this package's sandbox_profiles/seccomp-container.json to create namespaces)",
    "win32": f"run it inside WSL 2 (a real Linux kernel; its Ubuntu and Debian allow user namespaces), or {_LINUX_VM}",
}


@dataclass(frozen=True, slots=True)
class HostGap:
    """Why no session can be confined on a host: which platform, what is missing, what to do."""

    platform: str  # "macOS (darwin)", "Windows (win32)", "Linux"
    missing: str
    fix: str

    def text(self) -> str:
        """Which platform, what is missing, what to do (doctor's words)."""
        what = f"console-bridge cannot confine a session on {self.platform}: {self.missing}"
        return f"{what}. What you can do: {self.fix}"

    def message(self) -> str:
        """The refusal's message: :meth:`text`, then that nothing started."""
        return f"{self.text()}. Nothing was started; `console-bridge doctor` lists every check."


def _label(platform: str) -> str:
    for prefix, name in _PLATFORMS.items():
        if platform.startswith(prefix):
            return f"{name} ({platform})"
    return platform


def host_gap(host: HostKind) -> HostGap | None:
    """What keeps ``host`` from confining a session, or None when a session's view can be built."""
    if not host.linux:  # (from host.platform itself: namespace_problem reads the process's platform)
        kind = "win32" if _label(host.platform).startswith("Windows") else host.platform
        return HostGap(
            _label(host.platform),
            "console-bridge confines sessions with Linux namespaces (a private mount namespace holds each "
            "session's read view) and Linux limits, which this platform does not have; mcp-console runs here, "
            "but without them nothing would hide the host's files from cells or hold the session's limits",
            _FIXES.get(kind, _LINUX_VM),
        )
    problem = host.namespace_problem
    if problem is None:
        return None
    # Linux without user namespaces: the detected problem names the setting and its fix.
    missing, _sep, fix = problem.partition("; ")
    if host.namespace_mode == "user":
        missing += ", and a normal user needs a user namespace to build a session's private mount namespace"
    return HostGap("Linux", missing, fix or "allow unprivileged user namespaces")


def refuse_unconfinable(host: HostKind | None = None) -> None:
    """Raise :class:`LaunchRefused` (nothing started) when no session can be confined on this host."""
    host = host if host is not None else detect_host()
    gap = host_gap(host)
    if gap is not None:
        details = {"platform": host.platform, "missing": gap.missing, "fix": gap.fix, "reason": host.namespace_problem}
        raise LaunchRefused(gap.message(), details=details)
