"""Turning ``Limits`` into what this host can enforce, and the supervisor's command line.

Each limit gets the strongest mechanism the host offers (see ``_host.HostKind``):

* memory, processes, cpu: a **cgroup v2** subtree this process may delegate to
  (``"cgroup2"``), else a transient **systemd scope** of the session's own
  (``systemd-run --scope``, the user manager for a normal user: ``"systemd-scope"``), else
  a writable **cgroup v1** hierarchy (``"cgroup1"``), else rlimits: ``RLIMIT_AS`` per
  process for memory (``"rlimit"``) and, in the session's own user namespace,
  ``RLIMIT_NPROC`` for processes (``"userns-rlimit"``: the kernel counts every task of the
  session's namespace against it, whatever the cell forks). CPU has no rlimit form.
* tmpdir: a size-capped tmpfs in the session's view (``"tmpfs"``), on every host that
  can build the view.
* recording: ``RLIMIT_FSIZE`` on the server, set before each cell to what is left of the
  session's total, and raw output cut after the cell past it (``"rlimit"``, see ``_disk``).
* writes: nothing to hold when the cells can write nothing but their TMPDIR
  (``"read-only-view"``), else the bridge's accounting (``"accounting"``, see ``_disk``): a
  watcher that stops the cells once they overdraw. /dev/shm in the sandbox gets the TMPDIR's
  cap the same way.

``enforce="required"`` refuses (``LaunchRefused``) a limit with no mechanism at all;
``"strict"`` also refuses one held only by a per-process rlimit; ``"best_effort"`` starts
with what holds. Where no view can be built (no user namespaces, not Linux) every
session is refused whatever ``enforce`` says: the view is a security boundary.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from console_bridge._confinement._cgroups import (
    PIDS_HEADROOM,
    SessionCgroups,
    create_session_cgroups,
    remove_group,
    scope_group,
)
from console_bridge._confinement._host import HostKind, detect_host
from console_bridge._confinement._limits import LIMIT_NAMES, LimitReport, Limits, Mechanism, show_size
from console_bridge._confinement._mount_steps import MountPlan
from console_bridge._confinement._unconfinable import refuse_unconfinable
from console_bridge._errors import LaunchRefused

__all__ = ["SUPERVISOR", "TREE_WIDE", "Confinement", "Supervision", "plan_confinement", "supervisor_command"]

SUPERVISOR = Path(__file__).with_name("_supervisor.py")
#: Mechanisms that hold a limit for the whole session tree. ``enforce="strict"`` accepts these but
#: ``userns-rlimit``: the contract counts an rlimit, even one counted over a user namespace, among
#: the weaker mechanisms that only ``"required"`` accepts.
TREE_WIDE = frozenset(
    {
        Mechanism.CGROUP2,
        Mechanism.CGROUP1,
        Mechanism.SYSTEMD_SCOPE,
        Mechanism.TMPFS,
        Mechanism.USERNS_RLIMIT,
        Mechanism.READ_ONLY_VIEW,
    }
)
#: The lowest RLIMIT_AS backstop: a worker with R and DuckDB maps ~0.9 GiB of address space at rest.
MIN_ADDRESS_SPACE = 2 << 30
_FIX = {
    "memory": "run where a cgroup is available (v2 delegated to this user, a systemd user manager, or a "
    "writable v1 memory hierarchy)",
    "processes": "run as a normal user (user namespaces count its tasks) or where a cgroup with the pids "
    "controller is writable (v2 delegated, a systemd manager, or v1)",
    "cpu": "run where a cgroup with the cpu controller is writable or a systemd manager runs, or set cpu=None",
    "tmpdir": "set tmpdir=None",
    "recording": "set recording=None",
    "writes": "set writes=None, or use a profile whose cells write only their TMPDIR (the default read-only one)",
    "files": "set files=None, or use a profile whose cells write only their TMPDIR (the default read-only one)",
}


@dataclass
class Confinement:
    """One session's enforced limits: the groups made, the reports, the supervisor settings."""

    limits: Limits
    reports: dict[str, LimitReport]
    cgroups: SessionCgroups
    tmpfs_size: int | None
    host: HostKind
    rlimits: dict[str, int] = field(default_factory=dict)  # on the supervisor (and so the server)
    child_rlimits: dict[str, int] = field(default_factory=dict)  # on the server, inside its namespaces
    scope: list[str] | None = None  # systemd-run ... -- (the supervisor runs in a scope of its own)
    unit: str | None = None
    scope_env: dict[str, str] = field(default_factory=dict)  # what systemd-run needs to find its manager

    def release(self) -> None:
        """Remove the groups (when the supervisor never ran to remove them itself)."""
        self.cgroups.close_files()
        if self.cgroups.owned:
            for group in self.cgroups.paths:
                remove_group(group)

    def adopt_scope(self, supervisor_pid: int) -> bool:
        """Once the supervisor runs in its systemd scope: read the limits' counters from the scope's group."""
        if self.scope is None:
            return False
        group = scope_group(supervisor_pid)
        if group is None:
            return False
        if group.name == "host":  # the supervisor moved itself into the scope's leaf (split_scope)
            group = group.parent
        held = {name: group for name in ("memory", "processes", "cpu") if self.reports[name].enforced_by}
        cells = group / "cells" if (group / "cells").is_dir() else None
        self.cgroups = SessionCgroups(version="cgroup2", paths=[group], by_limit=held, cells=cells, owned=False)
        return True

    def mechanism(self, name: str) -> Mechanism | None:
        return self.reports[name].enforced_by

    def report_dict(self) -> dict[str, dict[str, Any]]:
        return {name: report.as_dict() for name, report in self.reports.items()}


@dataclass(frozen=True)
class Supervision:
    """What a supervised stdio child gets beyond the defaults: limits, its TMPDIR, its view, folders
    to remove. The transport starts its child through :meth:`command` and :attr:`env` (it knows
    no confinement: ``_transport._stdio.Supervised``)."""

    confinement: Confinement | None = None
    tmpdir: Path | None = None
    cleanup: tuple[Path, ...] = ()
    view: MountPlan | None = None
    holds: tuple[str, ...] = ()  # writable folders the supervisor locks shared until it ends (``_shared_roots``)

    def command(self, argv: list[str], *, cwd: str | None, grace: float) -> list[str]:
        """The command line that starts ``argv`` under the supervisor (see :func:`supervisor_command`)."""
        return supervisor_command(
            argv,
            cwd=cwd,
            grace=grace,
            confinement=self.confinement,
            tmpdir=self.tmpdir,
            cleanup=list(self.cleanup),
            view=self.view,
            holds=list(self.holds),
        )

    @property
    def env(self) -> dict[str, str]:
        """Variables the command needs on top of the server's (systemd-run finds the user manager through
        these; the supervisor drops them before the server starts)."""
        return dict(self.confinement.scope_env) if self.confinement is not None else {}


def _scope_command(host: HostKind, unit: str, memory: int | None, tasks: int | None, cpu: float | None) -> list[str]:
    """``systemd-run --scope`` with the session's limits as unit properties."""
    argv = [shutil.which("systemd-run") or "systemd-run"]
    if host.systemd == "user":
        argv.append("--user")
    # OOMPolicy=continue: an OOM kill of the worker is the cell's limit hit; systemd's default (stop)
    # would end the whole session.
    # Delegate=yes: the supervisor splits the scope into a host group and a cells group (see
    # _supervisor.split_scope), so a fork bomb meets the cells' limit and the server keeps headroom.
    argv += ["--scope", "--quiet", "--collect", f"--unit={unit}", "-p", "OOMPolicy=continue", "-p", "Delegate=yes"]
    if memory is not None:
        argv += ["-p", f"MemoryMax={memory}", "-p", "MemorySwapMax=0"]
    if tasks is not None:
        argv += ["-p", f"TasksMax={tasks}"]
    if cpu is not None:
        argv += ["-p", f"CPUQuota={round(cpu * 100)}%"]
    return [*argv, "--"]


def _scope_env(host: HostKind) -> dict[str, str]:
    if host.systemd != "user":
        return {}
    env = {"XDG_RUNTIME_DIR": os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{host.uid}"}
    if "DBUS_SESSION_BUS_ADDRESS" in os.environ:
        env["DBUS_SESSION_BUS_ADDRESS"] = os.environ["DBUS_SESSION_BUS_ADDRESS"]
    return env


def refuse_without_view(host: HostKind) -> None:
    """No session view can be built here (not Linux, no user namespaces): the one refusal, see ``_unconfinable``."""
    refuse_unconfinable(host)


@dataclass
class _Choices:
    """What planning decided besides the reports: the rlimits to set, and the limits that do not hold
    (``missing``: nothing holds them; ``weak``: only a mechanism ``enforce="strict"`` refuses)."""

    rlimits: dict[str, int] = field(default_factory=dict)  # on the supervisor (and so the server)
    child_rlimits: dict[str, int] = field(default_factory=dict)  # on the server, inside its namespaces
    missing: dict[str, str] = field(default_factory=dict)
    weak: dict[str, str] = field(default_factory=dict)


def _tree_limit(
    name: str, value: int | float | None, groups: SessionCgroups, unit: str | None, choices: _Choices
) -> LimitReport:
    """memory, processes or cpu: the session's scope, else its cgroup, else the rlimit form, else nothing."""
    if value is None:
        return LimitReport(None, None)
    if unit is not None:
        note = (
            f"{unit}: cells get the limit in its cells group, the server and its helpers {PIDS_HEADROOM} more"
            if name == "processes"
            else unit
        )
        return LimitReport(value, Mechanism.SYSTEMD_SCOPE, note)
    if name in groups.by_limit and groups.version is not None:
        return LimitReport(value, Mechanism(groups.version))
    if name == "memory":
        return _watched_memory(value, choices)
    if name == "processes":
        return _namespace_processes(value, choices)
    why = groups.errors.get(name, "no cgroup controller for it")
    choices.missing[name] = why
    return LimitReport(value, None, why)


def _watched_memory(value: int | float, choices: _Choices) -> LimitReport:
    """No cgroup: the bridge watches the cells' memory (the sandbox's resident memory plus its tmpfs),
    and RLIMIT_AS per process stays as the backstop, no lower than a worker maps at rest (~1 GiB)."""
    choices.rlimits["as"] = max(int(value), MIN_ADDRESS_SPACE)
    choices.weak["memory"] = "only the bridge's sampled watch (and RLIMIT_AS per process) holds it, not a cgroup"
    return LimitReport(
        value,
        Mechanism.WATCHED,
        "the resident memory of the sandbox's processes plus its /dev tmpfs, sampled every 20 ms while a cell "
        "runs (overshoot: what a cell allocates between two samples); the cells are stopped past it. "
        f"RLIMIT_AS per process at {show_size(choices.rlimits['as'])} is the backstop (no cgroup for the whole tree)",
    )


def _namespace_processes(value: int | float, choices: _Choices) -> LimitReport:
    """No cgroup: every session has a user namespace of its own (root's: unprivileged ids), whose tasks
    RLIMIT_NPROC counts."""
    choices.child_rlimits["nproc"] = int(value) + PIDS_HEADROOM
    choices.weak["processes"] = "only RLIMIT_NPROC counted over the session's user namespace holds it, not a cgroup"
    return LimitReport(
        value,
        Mechanism.USERNS_RLIMIT,
        "RLIMIT_NPROC counted over the session's user namespace (cells get the limit, the server and its "
        f"helpers {PIDS_HEADROOM} more tasks)",
    )


def _tmpdir_limit(tmpdir: int | None) -> LimitReport:
    if tmpdir is None:
        return LimitReport(None, None)
    return LimitReport(
        tmpdir,
        Mechanism.TMPFS,
        "a size-capped tmpfs in the session's view; /dev/shm in the sandbox: the same cap, by accounting",
    )


def _recording_limit(recording: int | None, choices: _Choices) -> LimitReport:
    if recording is None:
        return LimitReport(None, None)
    choices.rlimits["fsize"] = recording
    choices.weak["recording"] = "RLIMIT_FSIZE and cuts after each cell hold it, not a file system cap"
    return LimitReport(
        recording,
        Mechanism.RLIMIT,
        "the session's whole recording: RLIMIT_FSIZE on the server up to what is left, a cell's raw output past "
        "it cut after the cell",
    )


_DISK = {
    "writes": (
        "cells can write nothing but their TMPDIR",
        "the bytes added to the writable folders are measured while cells run; past the limit the cells are "
        "stopped (overshoot: what the cells write in 5 ms while a cell runs, 0.1 s between cells; margin "
        "stated: 256 MiB)",
    ),
    "files": (
        "cells can create nothing but in their TMPDIR",
        "the files and folders added to the writable folders are counted with the writes (a look when a file "
        "system's free blocks or inodes change, at least every 0.25 s while a cell runs); past the limit the "
        "cells are stopped",
    ),
}


def _disk_limit(name: str, value: int | float | None, writable: bool, choices: _Choices) -> LimitReport:
    """writes or files: nothing to hold when cells write only their TMPDIR, else the bridge's accounting."""
    nothing, how = _DISK[name]
    if value is None:
        return LimitReport(None, None)
    if not writable:
        return LimitReport(value, Mechanism.READ_ONLY_VIEW, nothing)
    choices.weak[name] = "the bridge's accounting stops the cells once they overdraw; no file system cap holds it"
    return LimitReport(value, Mechanism.ACCOUNTING, how)


def _scope(
    limits: Limits, session_id: str, host: HostKind, groups: SessionCgroups, memory: int | None
) -> tuple[SessionCgroups, list[str] | None, str | None, dict[str, str]]:
    """Where cgroups hold only part of the tree limits and a systemd manager runs, a scope of the
    session's own holds them all and the partial groups are given back: (groups, scope, unit, env)."""
    tree = {"memory": memory, "processes": limits.processes, "cpu": limits.cpu}
    wanted = {name for name, value in tree.items() if value is not None}
    if not wanted - set(groups.by_limit) or host.systemd is None:
        return groups, None, None, {}
    for group in groups.paths:
        remove_group(group)
    unit = f"console-bridge-{session_id}.scope"
    tasks = limits.processes + PIDS_HEADROOM if limits.processes is not None else None
    scope = _scope_command(host, unit, memory, tasks, limits.cpu)
    return SessionCgroups(version=None), scope, unit, _scope_env(host)


def plan_confinement(
    limits: Limits, session_id: str, host: HostKind | None = None, *, writable: bool = True
) -> Confinement:
    """Decide every limit's mechanism and create the session's cgroups; refuse what cannot hold.

    ``writable``: the cells may write folders of the host (the workspace or writable roots)."""
    host = host if host is not None else detect_host()
    refuse_without_view(host)
    memory, tmpdir, recording = limits.bytes("memory"), limits.bytes("tmpdir"), limits.bytes("recording")
    values: dict[str, int | float | None] = {
        "memory": memory,
        "processes": limits.processes,
        "cpu": limits.cpu,
        "tmpdir": tmpdir,
        "recording": recording,
        "writes": limits.bytes("writes"),
        "files": limits.files,
    }
    groups = create_session_cgroups(session_id, memory=memory, processes=limits.processes, cpu=limits.cpu)
    groups, scope, unit, scope_env = _scope(limits, session_id, host, groups, memory)
    choices = _Choices()
    reports = {name: _tree_limit(name, values[name], groups, unit, choices) for name in ("memory", "processes", "cpu")}
    reports["tmpdir"] = _tmpdir_limit(tmpdir)
    reports["recording"] = _recording_limit(recording, choices)
    for name in ("writes", "files"):
        reports[name] = _disk_limit(name, values[name], writable, choices)
    confinement = Confinement(
        limits,
        {n: reports[n] for n in LIMIT_NAMES},
        groups,
        tmpdir,
        host,
        choices.rlimits,
        choices.child_rlimits,
        scope,
        unit,
        scope_env,
    )
    refused = dict(choices.missing)
    if limits.enforce == "strict":
        refused.update(choices.weak)
    if refused and limits.enforce != "best_effort":
        confinement.release()
        raise _refusal(values=values, refused=refused, missing=choices.missing, host=host)
    return confinement


def _refusal(
    *, values: dict[str, int | float | None], refused: dict[str, str], missing: dict[str, str], host: HostKind
) -> LaunchRefused:
    """The refusal of the first limit that does not hold as ``enforce`` asks, naming the others and the fix."""
    name, why = next(iter(refused.items()))
    others = f" (also: {', '.join(sorted(set(refused) - {name}))})" if len(refused) > 1 else ""
    if name in missing:
        fix = f"{_FIX[name]}; or pass Limits(..., enforce='best_effort') (CLI: --best-effort) to start anyway"
    else:
        option = {
            "tmpdir": "tmpdir-limit",
            "recording": "recording-limit",
            "writes": "writes-limit",
            "files": "files-limit",
        }.get(name, name)
        where = "run where a cgroup holds it (v2 delegated to this user, a systemd user manager, or v1), "
        fix = (
            "drop enforce='strict' (CLI: leave out --strict; the default 'required' holds it with the weaker "
            f"mechanism and reports that), {where if name in ('memory', 'processes', 'cpu') else ''}or set "
            f"{name}=None (CLI: --{option} none), which leaves it with no limit at all"
        )
    value = values[name]
    shown = show_size(value) if name in ("memory", "tmpdir", "recording", "writes") else value
    return LaunchRefused(
        f"limit {name}={shown} cannot be enforced "
        f"{'' if name in missing else 'by a cgroup or a file system cap (which enforce=strict asks for) '}"
        f"on this host ({host.name}): {why}{others}. Fix: {fix}. status().limits and `console-bridge doctor` "
        "say what holds. Nothing was started.",
        details={"limit": name, "reasons": refused},
    )


def supervisor_command(
    argv: list[str],
    *,
    cwd: str | None,
    grace: float,
    confinement: Confinement | None = None,
    tmpdir: Path | None = None,
    cleanup: list[Path] | None = None,
    view: MountPlan | None = None,
    holds: list[str] | None = None,
) -> list[str]:
    """``python -I -S _supervisor.py CONFIG`` for ``argv`` (the server, resolved to a path),
    inside ``systemd-run --scope`` when the session's limits live in a scope of its own."""
    config: dict[str, Any] = {"argv": argv, "cwd": cwd, "grace": grace, "cleanup": [str(p) for p in cleanup or []]}
    prefix: list[str] = []
    if confinement is not None:
        groups = confinement.cgroups
        nested = [groups.cells] if groups.cells is not None else []
        # The supervisor joins the first path of each hierarchy; nested groups are listed first so
        # that it removes them before their parents.
        config["cgroups"] = [str(path) for path in groups.paths]
        config["nested_cgroups"] = [str(path) for path in nested]
        config["rlimits"] = dict(confinement.rlimits)
        config["child_rlimits"] = dict(confinement.child_rlimits)
        prefix = list(confinement.scope or [])
        if confinement.scope_env:
            config["drop_env"] = sorted(confinement.scope_env)
        if confinement.scope is not None and confinement.limits.processes is not None:
            config["scope_cells"] = {"processes": confinement.limits.processes}
    if view is not None:
        config["view"] = view
    if holds:
        config["holds"] = holds
    return [*prefix, sys.executable, "-I", "-S", str(SUPERVISOR), json.dumps(config)]
