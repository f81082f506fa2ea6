"""``console-bridge run``'s options and the state of one run: everything report.json and --json say."""

from __future__ import annotations

import datetime as dt
import mimetypes
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from console_bridge._confinement._limits import Limits
from console_bridge._console._session import AsyncConsole
from console_bridge._results import Image
from console_bridge.cli._common import ExitCode, iso
from console_bridge.cli._run_sources import FileRun

__all__ = ["Options", "RunState"]


@dataclass
class Options:
    workspace: Path
    profile: str
    writable_roots: tuple[str, ...]
    timeout: float | None
    poll_window: float
    artifacts: Path | None
    json_output: bool
    quiet: bool
    debug: bool
    python: str | None
    recordings_dir: str | None
    command: str | None
    raw: bool = False
    keep_recordings: int | None = 50
    project_config: bool = False
    startup_timeout: float = 60.0
    limits: Limits | None = None
    read_roots: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    collect: tuple[str, ...] = ()
    collect_max_bytes: int = 512 * 1024 * 1024  # all collected files together, held in memory until written
    max_output: int | None = 10 * 1024 * 1024  # a cell's output kept whole (past it, head and tail)
    parameters: tuple[tuple[str, str], ...] = ()  # a notebook's -p NAME VALUE
    allow_errors: bool = False  # a notebook's failing cell does not stop the run


@dataclass
class RunState:
    """Everything the report needs, filled in as the run goes."""

    files: list[FileRun]
    started_at: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.UTC))
    started: float = field(default_factory=time.monotonic)
    cell_time: float = 0.0  # seconds the cells ran (what --timeout counts)
    ended_at: dt.datetime | None = None
    exit_code: ExitCode = ExitCode.OK
    error: str | None = None
    debug_trace: str | None = None
    version: str | None = None
    command: str | None = None
    sandbox: dict[str, Any] | None = None
    limits: dict[str, dict[str, Any]] | None = None  # status().limits: each limit's value and what holds it
    images: list[tuple[str, Image]] = field(default_factory=list)
    recording: dict[str, Any] | None = None
    console: AsyncConsole | None = None
    retention: str | None = None
    collected: list[tuple[str, bytes]] = field(default_factory=list)
    collect_skipped: list[str] = field(default_factory=list)
    notebooks: dict[str, Any] = field(default_factory=dict)  # the notebooks run, by absolute path
    stop_signal: str | None = None  # the stop signal that ended the run (SIGTERM, SIGINT, SIGHUP)

    def fail(self, code: ExitCode, message: str) -> None:
        if self.exit_code == ExitCode.OK:
            self.exit_code, self.error = code, message

    def stopped_by(self, signum: signal.Signals) -> None:
        """A stop signal ended the run: that is its outcome (128 + the signal's number), whatever failed
        after it (a run stopped mid-file is not the code's error)."""
        self.stop_signal = signum.name
        running = next((run.source.name for run in self.files if run.status == "stopped"), None)
        left = sum(1 for run in self.files if run.status == "not run")
        where = f" while {running} ran" if running else ""
        rest = f"; {left} file{'s' if left != 1 else ''} not run" if left else ""
        self.exit_code = ExitCode(128 + signum.value)
        self.error = f"stopped by {signum.name}{where}{rest}; the session was closed and its evidence kept"

    def add_image(self, image: Image) -> str:
        extension = {"image/jpeg": ".jpg", "image/svg+xml": ".svg"}.get(image.mime_type) or (
            mimetypes.guess_extension(image.mime_type) or ".bin"
        )
        name = f"image-{len(self.images) + 1:03d}{extension}"
        self.images.append((name, image))
        return name

    def report(self, opts: Options, *, with_output: bool) -> dict[str, Any]:
        from console_bridge import __version__

        ended = self.ended_at or dt.datetime.now(dt.UTC)
        return {
            "console_bridge": __version__,
            "mcp_console": {"version": self.version, "command": self.command},
            "profile": opts.profile,
            "workspace": str(opts.workspace.resolve()),
            "writable_roots": [str(Path(root).expanduser().resolve()) for root in opts.writable_roots],
            "sandbox": self.sandbox,
            "limits": self.limits,
            "started_at": iso(self.started_at),
            "ended_at": iso(ended),
            "duration_s": round((ended - self.started_at).total_seconds(), 3),
            "exit_status": int(self.exit_code),
            "ended_by": self.stop_signal or ("error" if self.error is not None else "completed"),
            "error": self.error,
            "recording": self.recording,
            "files": [run.as_dict(with_output=with_output) for run in self.files],
        }
