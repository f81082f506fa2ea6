"""Turning ``Limits`` into what this host can enforce, and the supervisor's command line.

Mechanisms, strongest first: a cgroup (v2 where delegated, v1 where mounted) for memory,
processes and CPU; a size-capped tmpfs in the supervisor's private mount namespace for
the TMPDIR (needs ``CAP_SYS_ADMIN``); rlimits as the floor (``RLIMIT_AS`` per process
for memory when no cgroup can hold it; ``RLIMIT_FSIZE`` on the server for the recording,
which caps each raw output file it writes). Under ``enforce="required"`` a limit with no
mechanism is a ``LaunchRefused`` naming it, the reason and the fix.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from console_bridge._confinement._cgroups import SessionCgroups, create_session_cgroups, remove_group
from console_bridge._confinement._limits import LIMIT_NAMES, LimitReport, Limits
from console_bridge._errors import LaunchRefused

__all__ = ["SUPERVISOR", "Confinement", "Supervision", "can_mount_tmpfs", "plan_confinement", "supervisor_command"]

SUPERVISOR = Path(__file__).with_name("_supervisor.py")
_CAP_SYS_ADMIN = 21
_FIX = {
    "memory": "run where a cgroup (v2 delegated to this user, or a writable v1 memory hierarchy) is available",
    "processes": "run where a cgroup with the pids controller is writable (v2 delegated, or v1)",
    "cpu": "run where a cgroup with the cpu controller is writable, or set cpu=None",
    "tmpdir": "run as a user that may mount (CAP_SYS_ADMIN), or set tmpdir=None",
    "recording": "set recording=None",
}


def can_mount_tmpfs() -> bool:
    """True when this process may create a mount namespace and mount a tmpfs (CAP_SYS_ADMIN)."""
    if os.environ.get("CONSOLE_BRIDGE_NO_TMPFS"):
        return False
    try:
        for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> _CAP_SYS_ADMIN & 1)
    except (OSError, ValueError):
        pass
    return False


@dataclass
class Confinement:
    """One session's enforced limits: the groups made, the reports, the supervisor settings."""

    limits: Limits
    reports: dict[str, LimitReport]
    cgroups: SessionCgroups
    tmpfs_size: int | None
    rlimits: dict[str, int] = field(default_factory=dict)

    def release(self) -> None:
        """Remove the groups (when the supervisor never ran to remove them itself)."""
        self.cgroups.close_files()
        for group in self.cgroups.paths:
            remove_group(group)

    def report_dict(self) -> dict[str, dict[str, Any]]:
        return {name: report.as_dict() for name, report in self.reports.items()}


@dataclass(frozen=True)
class Supervision:
    """What a supervised stdio child gets beyond the defaults: limits, its TMPDIR, folders to remove."""

    confinement: Confinement | None
    tmpdir: Path | None
    cleanup: tuple[Path, ...] = ()

    def as_kwargs(self) -> dict[str, Any]:
        return {"confinement": self.confinement, "tmpdir": self.tmpdir, "cleanup": list(self.cleanup)}


def plan_confinement(limits: Limits, session_id: str) -> Confinement:
    """Create the session's cgroups and decide every limit's mechanism; refuse what cannot hold."""
    memory, tmpdir, recording = limits.bytes("memory"), limits.bytes("tmpdir"), limits.bytes("recording")
    groups = create_session_cgroups(session_id, memory=memory, processes=limits.processes, cpu=limits.cpu)
    reports: dict[str, LimitReport] = {}
    rlimits: dict[str, int] = {}
    missing: dict[str, str] = {}
    values: dict[str, int | float | None] = {
        "memory": memory,
        "processes": limits.processes,
        "cpu": limits.cpu,
        "tmpdir": tmpdir,
        "recording": recording,
    }
    for name in ("memory", "processes", "cpu"):
        value = values[name]
        if value is None:
            reports[name] = LimitReport(None, None)
        elif name in groups.by_limit:
            reports[name] = LimitReport(value, groups.version)
        elif name == "memory":
            rlimits["as"] = int(value)
            reports[name] = LimitReport(value, "rlimit", "RLIMIT_AS per process (no cgroup for the whole tree)")
        else:
            missing[name] = groups.errors.get(name, "no cgroup controller for it")
            reports[name] = LimitReport(value, None, missing[name])
    tmpfs_size: int | None = None
    if tmpdir is None:
        reports["tmpdir"] = LimitReport(None, None)
    elif can_mount_tmpfs():
        tmpfs_size = tmpdir
        reports["tmpdir"] = LimitReport(tmpdir, "tmpfs")
    else:
        missing["tmpdir"] = "this process may not mount a size-capped tmpfs (no CAP_SYS_ADMIN)"
        reports["tmpdir"] = LimitReport(tmpdir, None, missing["tmpdir"])
    if recording is None:
        reports["recording"] = LimitReport(None, None)
    else:
        rlimits["fsize"] = recording
        reports["recording"] = LimitReport(recording, "rlimit", "RLIMIT_FSIZE: each raw output file of the recording")
    confinement = Confinement(limits, {n: reports[n] for n in LIMIT_NAMES}, groups, tmpfs_size, rlimits)
    if missing and limits.enforce == "required":
        confinement.release()
        name, why = next(iter(missing.items()))
        others = f" (also: {', '.join(sorted(set(missing) - {name}))})" if len(missing) > 1 else ""
        raise LaunchRefused(
            f"limit {name}={values[name]} cannot be enforced on this host: {why}{others}. Fix: {_FIX[name]}; or pass "
            "Limits(..., enforce='best_effort') to start anyway (status().limits then says what holds). "
            "Nothing was started.",
            details={"limit": name, "reasons": missing},
        )
    return confinement


def supervisor_command(
    argv: list[str],
    *,
    cwd: str | None,
    grace: float,
    confinement: Confinement | None = None,
    tmpdir: Path | None = None,
    cleanup: list[Path] | None = None,
) -> list[str]:
    """``python -I -S _supervisor.py CONFIG`` for ``argv`` (the server, resolved to a path)."""
    config: dict[str, Any] = {"argv": argv, "cwd": cwd, "grace": grace, "cleanup": [str(p) for p in cleanup or []]}
    if confinement is not None:
        groups = confinement.cgroups
        nested = [groups.cells] if groups.cells is not None else []
        # The supervisor joins the first path of each hierarchy; nested groups are listed first so
        # that it removes them before their parents.
        config["cgroups"] = [str(path) for path in groups.paths]
        config["nested_cgroups"] = [str(path) for path in nested]
        config["rlimits"] = dict(confinement.rlimits)
        if confinement.tmpfs_size is not None and tmpdir is not None:
            config["tmpfs"] = {"path": str(tmpdir), "size": confinement.tmpfs_size}
    return [sys.executable, "-I", "-S", str(SUPERVISOR), json.dumps(config)]
