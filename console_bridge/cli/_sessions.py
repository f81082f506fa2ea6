"""``console-bridge ps`` and ``console-bridge kill``: every live session of this user, from any process."""

from __future__ import annotations

import datetime as dt
import json
import signal
import time
from typing import Any

import click

from console_bridge._confinement._registry import SessionEntry, Verdict, sweep_report, verdicts
from console_bridge.cli._common import PREFIX, ExitCode, fail, table
from console_bridge.cli._output import host_line

__all__ = ["kill_command", "ps_command"]


def _live() -> tuple[list[SessionEntry], list[Verdict]]:
    """The proven live (or starting) sessions, and the folders refused (each reported on stderr)."""
    report = sweep_report()  # sessions whose host and supervisor died: trees killed, folders and groups removed
    refused = {verdict.folder: verdict for verdict in report.refused}
    live: list[SessionEntry] = []
    for verdict in verdicts():
        if verdict.state == "refused":
            refused.setdefault(verdict.folder, verdict)
        elif verdict.state in ("live", "starting") and verdict.entry is not None:
            live.append(verdict.entry)
    for verdict in refused.values():
        click.echo(
            f"{PREFIX}: left alone: {host_line(str(verdict.folder))}: {host_line(verdict.reason)} "
            "(not provably a console-bridge session of this user; remove it yourself if it is yours)",
            err=True,
        )
    return live, list(refused.values())


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
    }


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
        [host_line(str(s[key])) for key in ("id", "owner", "profile")] + [_age(s["age_s"]), str(s["host_pid"])]
        + [_limits(s["limits"]), host_line(s["workspace"])]
        for s in sessions
    ]
    click.echo(table(["ID", "OWNER", "PROFILE", "AGE", "HOST PID", "LIMITS", "WORKSPACE"], rows))


def _limits(limits: dict[str, Any]) -> str:
    """``memory:cgroup2 processes:userns-rlimit ...``: what holds each limit (none: not enforced)."""
    return " ".join(f"{name}:{host_line(str(how or 'none'))}" for name, how in limits.items()) or "-"


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
