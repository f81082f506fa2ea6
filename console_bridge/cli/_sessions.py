"""``console-bridge ps`` and ``console-bridge kill``: every live session of this user, from any process."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import signal
import sys
import time
from typing import Any

import click

from console_bridge._confinement._registry import SessionEntry, Verdict, sweep_report, verdicts
from console_bridge._console._usage import registry_usage
from console_bridge.cli._common import PREFIX, ExitCode, fail, table
from console_bridge.cli._output import host_line

__all__ = ["kill_command", "ps_command", "top_command"]


def _live(reported: set[str] | None = None) -> tuple[list[SessionEntry], list[Verdict]]:
    """The proven live (or starting) sessions, and the folders refused: each said once on stderr (once
    per ``reported`` set: ``top`` says it at its first refresh, not at each)."""
    report = sweep_report()  # sessions whose host and supervisor died: trees killed, folders and groups removed
    refused = {verdict.folder: verdict for verdict in report.refused}
    live: list[SessionEntry] = []
    for verdict in verdicts():
        if verdict.state == "refused":
            refused.setdefault(verdict.folder, verdict)
        elif verdict.state in ("live", "starting") and verdict.entry is not None:
            live.append(verdict.entry)
    for verdict in refused.values():
        if reported is not None:
            if str(verdict.folder) in reported:
                continue
            reported.add(str(verdict.folder))
        click.echo(
            f"{PREFIX}: not listed, left alone: {host_line(str(verdict.folder))}: it cannot be proven a "
            f"console-bridge session of this user ({host_line(verdict.reason)})",
            err=True,
        )
    return live, list(refused.values())


def _usage(entry: SessionEntry) -> dict[str, Any]:
    usage = registry_usage(entry.cgroups, entry.supervisor_pid, entry.recording)
    return dataclasses.asdict(usage)


def _as_dict(entry: SessionEntry) -> dict[str, Any]:
    return {
        "id": entry.id,
        "owner": entry.owner,
        "profile": entry.profile,
        "workspace": entry.workspace,
        "created": dt.datetime.fromtimestamp(entry.created, dt.UTC).isoformat(timespec="seconds"),
        "age_s": round(time.time() - entry.created, 1),
        "host_pid": entry.host_pid,
        "host_alive": entry.host_alive(),
        "supervisor_pid": entry.supervisor_pid,
        "server_pid": entry.server_pid,
        "recording": entry.recording,
        "recordings_root": entry.recording_base,
        "limits": dict(entry.limits),
        "usage": _usage(entry),
    }


def _bytes(value: int | None) -> str:
    if value is None:
        return "-"
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if value >= size:
            return f"{value / size:.1f}{unit}"
    return f"{value}B"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}s"


def _age(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h"


@click.command("ps")
@click.option("--json", "as_json", is_flag=True, help="One JSON array of sessions instead of a table.")
def ps_command(as_json: bool) -> None:
    """List every live console session of this user (any process), after sweeping dead ones.

    \b
    Examples:
      console-bridge ps
      console-bridge ps --json | jq '.[] | select(.owner == "agent-1") | .id'
    """
    sessions = [_as_dict(entry) for entry in _live()[0]]
    if as_json:
        click.echo(json.dumps(sessions, indent=1))
        return
    if not sessions:
        click.echo("no live console-bridge sessions")
        return
    rows = [
        [host_line(str(s[key])) for key in ("id", "owner", "profile")]
        + [_age(s["age_s"]), str(s["host_pid"])]
        + _usage_cells(s["usage"])
        + [_limits(s["limits"]), host_line(s["workspace"])]
        for s in sessions
    ]
    click.echo(table(["ID", "OWNER", "PROFILE", "AGE", "HOST PID", *_USAGE_HEADERS, "LIMITS", "WORKSPACE"], rows))


_USAGE_HEADERS = ("CPU", "MEM", "PEAK", "PROCS")


def _limits(limits: dict[str, Any]) -> str:
    """``memory:cgroup2 processes:userns-rlimit ...``: what holds each limit (none: not enforced)."""
    return " ".join(f"{name}:{host_line(str(how or 'none'))}" for name, how in limits.items()) or "-"


def _usage_cells(usage: dict[str, Any]) -> list[str]:
    procs = usage.get("processes")
    return [
        _seconds(usage.get("cpu_seconds")),
        _bytes(usage.get("memory")),
        _bytes(usage.get("memory_peak")),
        "-" if procs is None else str(procs),
    ]


@click.command("top")
@click.option(
    "--interval", type=click.FloatRange(min=0.1), default=2.0, show_default=True, help="Seconds between refreshes."
)
@click.option("--count", type=click.IntRange(min=1), help="Stop after this many refreshes (default: until Ctrl-C).")
def top_command(interval: float, count: int | None) -> None:
    """Show every live console session's CPU and memory, refreshing (like `docker stats`).

    CPU% is the share of one CPU used since the last refresh; MEM and PEAK are the session's memory
    now and at most (its cgroup's count where it has one, else its processes' resident size).

    \b
    Examples:
      console-bridge top
      console-bridge top --interval 5 --count 3
    """
    before: dict[str, tuple[float, float]] = {}
    reported: set[str] = set()  # folders not provably sessions of this user: said at the first refresh
    shown = 0
    tty = sys.stdout.isatty()
    try:
        while True:
            now = time.monotonic()
            rows = []
            for entry in _live(reported)[0]:
                usage = _usage(entry)
                cpu = usage.get("cpu_seconds")
                share = "-"
                if cpu is not None and entry.id in before:
                    then, used = before[entry.id]
                    share = f"{100 * max(0.0, cpu - used) / max(now - then, 1e-6):.0f}%"
                if cpu is not None:
                    before[entry.id] = (now, cpu)
                rows.append([host_line(entry.id), host_line(entry.owner), share, *_usage_cells(usage)[1:]])
            headers = ["ID", "OWNER", "CPU%", "MEM", "PEAK", "PROCS"]
            text = table(headers, rows) if rows else "no live console-bridge sessions"
            click.echo(("\x1b[H\x1b[2J" if tty else "") + text + ("" if tty else "\n"))
            shown += 1
            if count is not None and shown >= count:
                return
            time.sleep(interval)
    except KeyboardInterrupt:
        return


@click.command("kill")
@click.argument("ids", nargs=-1, required=True)
@click.option("--force", is_flag=True, help="Kill the session's processes at once (the recording is not finalized).")
@click.option("--timeout", type=float, default=10.0, show_default=True, help="Seconds to wait for each session to end.")
def kill_command(ids: tuple[str, ...], force: bool, timeout: float) -> None:
    """Stop sessions by ID (see `console-bridge ps`).

    By default the session is closed cleanly through its supervisor: the server's stdin is
    closed, so the recording is finalized, then the tree is stopped and its folders removed.
    The process that owns the session sees it closed (ConnectionClosed).

    \b
    Examples:
      console-bridge kill 20261130T061501-1a2b3c4d
      console-bridge kill --force $(console-bridge ps --json | jq -r '.[].id')
    """
    proven, refused = _live()
    live = {entry.id: entry for entry in proven}
    unknown = [session_id for session_id in ids if session_id not in live]
    if unknown:
        left = {verdict.folder.name for verdict in refused} & set(unknown)
        why = f" ({', '.join(sorted(left))} left alone, see above)" if left else ""
        fail(f"no live session with id {', '.join(unknown)}{why}; `console-bridge ps` lists them", ExitCode.USAGE)
    for session_id in ids:
        entry = live[session_id]
        if entry.supervisor_pid is None:
            fail(f"session {session_id} is still starting (no supervisor yet); retry in a moment", ExitCode.USAGE)
        sent = entry.signal_supervisor(signal.SIGUSR1 if force else signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while sent and entry.alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        if entry.alive():
            fail(f"session {session_id} did not end within {timeout:g}s; retry with --force", ExitCode.TIMEOUT)
        click.echo(f"{session_id}: {'killed' if force else 'closed'}", err=True)
