"""``console-bridge run``: run files in one verified, sandboxed mcp-console session."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import mimetypes
import os
import shutil
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import click

from console_bridge._confinement._limits import Limits
from console_bridge._console._files import check_glob
from console_bridge._console._recordings import Recordings
from console_bridge._console._sandbox import SandboxPolicy
from console_bridge._console._session import AsyncConsole
from console_bridge._errors import BridgeError, CellTimeout
from console_bridge._results import CellResult, Image
from console_bridge.cli import _artifacts as artifacts
from console_bridge.cli._common import PREFIX, ExitCode, error_text, exit_code_for, fail, human_size, iso
from console_bridge.cli._detect import chunk_output, code_error, language_for
from console_bridge.cli._limit_options import limit_options, limits_from_options
from console_bridge.cli._output import CellOutput, host_block, host_line

__all__ = ["run_command"]

_TICK = 0.2  # seconds between redraws of the TTY status line
_STARTUP_TIMEOUT = 60.0  # seconds, the library's default (--startup-timeout)


# ---------------------------------------------------------------- what to run
@dataclass
class Source:
    """One file (or stdin) to run as one cell."""

    name: str
    path: str | None
    language: str
    code: str


@dataclass
class FileRun:
    """What happened to one source."""

    source: Source
    status: str = "not run"  # ok | error | timeout | interrupted | not run
    chunks: list[str] = field(default_factory=list)  # what was shown, image markers included
    streamed: list[str] = field(default_factory=list)  # each chunk's output as the library merges it
    images: list[str] = field(default_factory=list)
    elapsed: float | None = None
    error: str | None = None

    @property
    def output(self) -> str:
        return "".join(self.chunks)

    def as_dict(self, *, with_output: bool) -> dict[str, Any]:
        data: dict[str, Any] = {
            "file": self.source.name,
            "path": self.source.path,
            "language": self.source.language,
            "status": self.status,
            "elapsed_s": None if self.elapsed is None else round(self.elapsed, 3),
            "images": list(self.images),
            "error": self.error,
        }
        if with_output:
            data["output"] = self.output
        return data


def load_sources(files: tuple[str, ...], language: str | None) -> list[Source]:
    """Read every file up front (a usage error, exit 2, when one cannot be read or has no language)."""
    sources: list[Source] = []
    if files.count("-") > 1:
        raise click.UsageError("'-' (stdin) can be given only once")
    for name in files:
        lang = language or ("python" if name == "-" else language_for(name))
        if lang is None:
            raise click.UsageError(
                f"cannot tell the language of {name!r} from its extension (known: .py, .R/.r, .sql); pass --language"
            )
        if name == "-":
            code = sys.stdin.read()
            sources.append(Source("<stdin>", None, lang, code))
            continue
        path = Path(name)
        try:
            code = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise click.BadParameter(f"{name!r} is not UTF-8 text", param_hint="FILE") from None
        except OSError as exc:
            raise click.BadParameter(f"{name!r} cannot be read ({exc.strerror or exc})", param_hint="FILE") from None
        sources.append(Source(name, str(path.absolute()), lang, code))
    return sources


# ---------------------------------------------------------------- the terminal
class Terminal:
    """Streams the code's output to stdout and, on a TTY, a live status line to stderr."""

    def __init__(self, *, stream: bool, quiet: bool, raw: bool = False) -> None:
        self.stream = stream
        self.quiet = quiet
        self.cell_output = CellOutput(raw=raw, environ=os.environ)
        self.decorate = not quiet and _isatty(sys.stderr)
        self._stdout_tty = _isatty(sys.stdout)
        self.captured: list[str] = []
        self._stdout_ok = True
        self._shown = 0
        self._label: str | None = None
        self._since = time.monotonic()
        self._midline = False

    # output of the code
    def write(self, text: str) -> None:
        """Show the code's output, made inert (cli/_output.py) unless --raw."""
        self._show(self.cell_output.feed(text))

    def _show(self, text: str) -> None:
        if not text:
            return
        self.captured.append(text)
        if not self.stream or not self._stdout_ok:
            return
        self.clear()
        try:
            sys.stdout.write(self.cell_output.opening() + text)
            sys.stdout.flush()
        except BrokenPipeError:
            self._stdout_ok = False
            _silence_stdout()
        self._midline = not text.endswith("\n")

    def end_file(self) -> None:
        """Start the next file's output on a line of its own."""
        self._show(self.cell_output.flush())
        if self.captured and not self.captured[-1].endswith("\n"):
            self.write("\n")

    def end_output(self) -> None:
        """After the last file: close the GitHub Actions fence, if one was opened."""
        closing = self.cell_output.closing()
        if closing and self._stdout_ok:
            with contextlib.suppress(OSError, ValueError):
                sys.stdout.write(closing)
                sys.stdout.flush()

    # the status line
    def set_label(self, label: str | None) -> None:
        self._label = label
        self._since = time.monotonic()
        self.tick()

    def tick(self) -> None:
        if not self.decorate or self._label is None or (self._midline and self._stdout_tty):
            return
        elapsed = time.monotonic() - self._since
        line = f"[{PREFIX}] {host_line(self._label)} {elapsed:.1f}s"
        width = max(20, shutil.get_terminal_size((80, 24)).columns - 1)
        line = line[:width]
        pad = " " * max(0, self._shown - len(line))
        self._stderr(f"\r{line}{pad}")
        self._shown = len(line)

    def clear(self) -> None:
        if self._shown:
            self._stderr("\r" + " " * self._shown + "\r")
            self._shown = 0

    # messages: the host's own lines, inert whatever text of the cell they carry (even with --raw)
    def info(self, message: str) -> None:
        if not self.quiet:
            self.clear()
            self._stderr(f"[{PREFIX}] {host_line(message)}\n")

    def error(self, message: str, *, multiline: bool = False) -> None:
        """``console-bridge: MESSAGE`` as one line; ``multiline`` (--debug) keeps its lines, each prefixed."""
        self.clear()
        self._stderr(host_block(message, f"{PREFIX}: ") if multiline else f"{PREFIX}: {host_line(message)}\n")

    def _stderr(self, text: str) -> None:
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.write(text)
            sys.stderr.flush()


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _silence_stdout() -> None:
    """stdout's reader went away (``| head``): keep running, drop the rest of the output."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


# ---------------------------------------------------------------- one run
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
    images: list[tuple[str, Image]] = field(default_factory=list)
    recording: dict[str, Any] | None = None
    console: AsyncConsole | None = None
    retention: str | None = None
    collected: list[tuple[str, bytes]] = field(default_factory=list)
    collect_skipped: list[str] = field(default_factory=list)

    def fail(self, code: ExitCode, message: str) -> None:
        if self.exit_code == ExitCode.OK:
            self.exit_code, self.error = code, message

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
            "started_at": iso(self.started_at),
            "ended_at": iso(ended),
            "duration_s": round((ended - self.started_at).total_seconds(), 3),
            "exit_status": int(self.exit_code),
            "error": self.error,
            "recording": self.recording,
            "files": [run.as_dict(with_output=with_output) for run in self.files],
        }


def _describe(sandbox: dict[str, Any]) -> str:
    try:
        return SandboxPolicy(
            sandboxed=bool(sandbox["sandboxed"]),
            network=sandbox["network"],
            writable=frozenset(sandbox["writable"]),
            inherit_codex=bool(sandbox.get("inherit_codex", False)),
        ).describe()
    except (KeyError, TypeError, ValueError):
        return json.dumps(sandbox)


async def _ticker(term: Terminal) -> None:
    while True:
        await anyio.sleep(_TICK)
        term.tick()


async def _session(opts: Options, state: RunState, term: Terminal) -> None:
    async with anyio.create_task_group() as group:
        if term.decorate:
            group.start_soon(_ticker, term)
        try:
            await _drive(opts, state, term)
        finally:
            group.cancel_scope.cancel()


def _remaining(opts: Options, state: RunState) -> float | None:
    """What is left of --timeout: it counts the cells' run time, not the session's startup."""
    if opts.timeout is None:
        return None
    return opts.timeout - state.cell_time


async def _drive(opts: Options, state: RunState, term: Terminal) -> None:
    """Start, run every file in order (stopping at the first failure), close. Records every failure in
    ``state``; only cancellation (Ctrl-C) propagates."""
    languages = ["python", "sql"]
    if any(run.source.language == "r" for run in state.files):
        languages.append("r")
    term.set_label("starting mcp-console")
    try:
        console = AsyncConsole(
            opts.workspace,
            profile=opts.profile,
            writable_roots=opts.writable_roots,
            command=opts.command,
            python=opts.python,
            languages=languages,
            poll_window=opts.poll_window,
            startup_timeout=opts.startup_timeout,
            recordings_dir=opts.recordings_dir,
            project_config=opts.project_config,
            limits=opts.limits,
            read_roots=opts.read_roots,
            env=opts.env,
        )
        state.console = console
        try:
            await console.start()
            status = console.status()
            state.version, state.command = status.version, status.command
            if status.sandbox is not None:
                state.sandbox = {**status.sandbox, "description": _describe(status.sandbox)}
            term.info(
                f"mcp-console {state.version}, profile {opts.profile}: "
                f"{state.sandbox['description'] if state.sandbox else 'sandbox unknown'}"
            )
            total = len(state.files)
            for index, run in enumerate(state.files, start=1):
                label = f"running {run.source.name}" + (f" ({index}/{total})" if total > 1 else "")
                term.set_label(label)
                if not await _run_file(console, run, opts, state, term):
                    break
            if opts.collect:
                await _collect(console, opts, state, term)
        finally:
            term.set_label("stopping mcp-console")
            await console.close()
    except BridgeError as exc:
        state.fail(exit_code_for(exc), error_text(exc, debug=opts.debug))
        if opts.debug:
            state.debug_trace = traceback.format_exc()
    except Exception as exc:
        state.fail(
            ExitCode.CODE_ERROR,
            f"internal error ({type(exc).__name__}: {exc}); rerun with --debug for the traceback and report it",
        )
        state.debug_trace = traceback.format_exc()
    finally:
        term.set_label(None)
        term.clear()


async def _collect(console: AsyncConsole, opts: Options, state: RunState, term: Terminal) -> None:
    """Before close: read the files of the cell's TMPDIR that ``--collect`` names (never through a
    symlink); they are written into --artifacts/files after the session stopped."""
    term.set_label("collecting files")
    try:
        names = sorted({name for pattern in opts.collect for name in await console.list_files(pattern)})
    except BridgeError as exc:
        term.error(f"--collect: {error_text(exc)}")
        return
    total = 0
    for name in names:
        left = opts.collect_max_bytes - total
        try:
            data = await console.get_file(name, max_bytes=max(left, 0))
        except BridgeError as exc:
            state.collect_skipped.append(name)
            term.error(f"--collect: {name} not collected: {error_text(exc)}")
            continue
        total += len(data)
        state.collected.append((name, data))
    if not names:
        term.info(f"--collect {' '.join(opts.collect)}: no file in the TMPDIR matched")


async def _run_file(console: AsyncConsole, run: FileRun, opts: Options, state: RunState, term: Terminal) -> bool:
    """Run one source as one cell; True when it succeeded and the next may run."""
    name, language = run.source.name, run.source.language
    remaining = _remaining(opts, state)
    if remaining is not None and remaining <= 0:
        run.status = "timeout"
        run.error = f"not started: the run passed --timeout={opts.timeout:g}s"
        state.fail(ExitCode.TIMEOUT, f"the run passed --timeout={opts.timeout:g}s before {name} started")
        return False
    started = time.monotonic()

    def on_output(chunk: CellResult) -> None:
        text = chunk_output(chunk)
        run.streamed.append(text)
        if text:
            run.chunks.append(text)
            term.write(text)
        for image in chunk.images:
            image_name = state.add_image(image)
            run.images.append(image_name)
            marker = f"[image {image_name}: {image.mime_type}, {human_size(len(image.data))}]\n"
            if run.chunks and not run.chunks[-1].endswith("\n"):
                marker = "\n" + marker
            run.chunks.append(marker)
            term.write(marker)

    if not run.source.code.strip():
        run.status, run.elapsed = "ok", 0.0
        return True
    try:
        code: dict[str, Any] = {language: run.source.code}
        result = await console.run(**code, timeout=remaining, on_output=on_output)
    except CellTimeout as exc:
        # What the interrupt itself printed (where the code was): not streamed by on_output.
        partial = exc.result.combined if exc.result is not None else ""
        streamed = "".join(run.streamed)
        if partial.startswith(streamed) and partial[len(streamed) :].strip() not in ("", "[done]"):
            rest = partial[len(streamed) :]
            run.chunks.append(rest)
            term.write(rest)
        run.status = "timeout"
        if not exc.details.get("cell_started", True):
            run.error = "never started: the worker did not start it in time"
            state.fail(
                ExitCode.TIMEOUT,
                f"{name} never started: the worker did not start it within --startup-timeout="
                f"{opts.startup_timeout:g}s (--timeout counts only the code's run time). Raise --startup-timeout "
                "on a slow machine, or check `console-bridge doctor`.",
            )
            return False
        run.error = f"interrupted after --timeout={opts.timeout:g}s"
        state.fail(
            ExitCode.TIMEOUT,
            f"{name} was still running when its cells reached --timeout={opts.timeout:g}s (startup not counted); "
            "it was interrupted and the session closed. Raise --timeout or make the code faster.",
        )
        return False
    except BridgeError as exc:
        run.status = "error"
        run.error = error_text(exc)
        state.fail(exit_code_for(exc), f"{name}: {error_text(exc, debug=opts.debug)}")
        if opts.debug:
            state.debug_trace = traceback.format_exc()
        return False
    finally:
        run.elapsed = time.monotonic() - started
        state.cell_time += run.elapsed
        term.end_file()
    if result.waiting_for_input:
        with contextlib.suppress(BridgeError):
            await console.interrupt()
        run.status = "error"
        run.error = f"asked for input ({result.prompt!r})"
        state.fail(
            ExitCode.CODE_ERROR,
            f"{name} asked for input (prompt {result.prompt!r}) but `console-bridge run` gives the code no "
            "stdin; it was interrupted. Put the value in the code or read it from a file.",
        )
        return False
    why = code_error(result)
    if why is not None:
        run.status, run.error = "error", why
        where = "the output above" if term.stream else "its output"
        left = sum(1 for other in state.files if other.status == "not run")
        rest = f"; {left} later file{'s' if left != 1 else ''} not run" if left > 0 else ""
        state.fail(ExitCode.CODE_ERROR, f"{name}: {why} (see {where}){rest}")
        return False
    run.status = "ok"
    return True


# ---------------------------------------------------------------- artifacts
def apply_retention(root: Path, workspace: Path, keep: int, state: RunState) -> None:
    """The default retention: this workspace keeps its ``keep`` newest recordings (never a live one)."""
    try:
        gone = Recordings(root).prune(keep_last=keep, workspace=workspace)
    except (OSError, BridgeError) as exc:
        state.retention = f"recordings retention skipped: {exc}"
        return
    if gone:
        state.retention = f"retention: removed {len(gone)} older recording(s) of this workspace (keeps {keep})"


def write_artifacts(dest: Path, expected_real: str, state: RunState, term: Terminal, opts: Options) -> None:
    """Write output.txt, the images, a copy of the recording and report.json into ``dest`` (cli/_artifacts.py)."""
    recording = Path(state.recording["path"]) if state.recording is not None else None
    artifacts.write_artifacts(
        dest,
        expected_real,
        output="".join(term.captured),
        images=state.images,
        files=state.collected,
        recording=recording,
        report=state.report(opts, with_output=False),
    )


def _artifacts_target(path: Path) -> str:
    if path.exists() and not path.is_dir():
        raise click.BadParameter(f"{str(path)!r} exists and is not a folder", param_hint="--artifacts")
    return os.path.realpath(path)


# ---------------------------------------------------------------- the command
def check_usage(opts: Options) -> None:
    """Usage mistakes exit 2 before anything starts: an unknown profile, a writable root that is not an
    existing folder (a refused root, such as home, stays a launch refusal, exit 3)."""
    from console_bridge._console._profiles import load_profile

    try:
        load_profile(opts.profile)
    except BridgeError as exc:
        fail(f"--profile: {error_text(exc)} (see `console-bridge profiles`)", ExitCode.USAGE)
    for root in opts.writable_roots:
        if not Path(root).expanduser().is_dir():
            fail(f"--writable-root {root!r} is not an existing folder; create it first", ExitCode.USAGE)
    if opts.collect and opts.artifacts is None:
        fail("--collect needs --artifacts DIR (the collected files are written to DIR/files)", ExitCode.USAGE)
    for pattern in opts.collect:
        try:
            check_glob(pattern)
        except BridgeError as exc:
            fail(f"--collect: {error_text(exc)}", ExitCode.USAGE)


def execute(opts: Options, files: tuple[str, ...], language: str | None) -> int:
    check_usage(opts)
    sources = load_sources(files, language)
    expected_real = _artifacts_target(opts.artifacts) if opts.artifacts is not None else ""
    state = RunState(files=[FileRun(source) for source in sources])
    term = Terminal(stream=not opts.json_output, quiet=opts.quiet, raw=opts.raw)
    refused = artifacts.check_workspace(opts.workspace, opts.profile)
    stage = None
    if refused is not None:  # nothing is started and nothing is written (no artifacts, no recording)
        state.fail(ExitCode.LAUNCH, error_text(refused))
    else:
        stage = artifacts.RecordingStage.plan(opts.workspace, opts.profile, opts.writable_roots, opts.recordings_dir)
        if stage is not None:  # the code could write the requested folder: record privately, copy after
            opts.recordings_dir = str(stage.staging)
    try:
        if refused is None:
            anyio.run(_session, opts, state, term)
    except KeyboardInterrupt:
        term.clear()
        for run in state.files:
            if run.status == "not run" and run.elapsed is not None:
                run.status = "interrupted"
        state.fail(ExitCode.INTERRUPTED, "interrupted (Ctrl-C); the session was closed")
    term.end_output()
    state.ended_at = dt.datetime.now(dt.UTC)
    console = state.console
    recording = console.recording if console is not None else None
    if stage is not None:
        try:
            recording = stage.publish(recording)
            stage.cleanup()
        except (OSError, BridgeError) as exc:
            state.fail(
                ExitCode.CODE_ERROR,
                f"could not copy the recording into {str(stage.final_root)!r} ({exc}); it stays in "
                f"{str(stage.staging)!r}",
            )
            recording = None
    if recording is not None:
        state.recording = {
            "run_id": recording.run_id,
            "path": str(recording.path),
            "finalized": recording.finalized,
        }
        if opts.keep_recordings is not None:
            apply_retention(recording.path.parent.parent, opts.workspace, opts.keep_recordings, state)
    if opts.artifacts is not None and refused is None:
        try:
            write_artifacts(opts.artifacts, expected_real, state, term, opts)
        except (OSError, BridgeError) as exc:
            state.fail(ExitCode.CODE_ERROR, f"could not write the artifacts to {str(opts.artifacts)!r}: {exc}")
            # keep the report consistent with the exit status (never through a planted symlink)
            artifacts.rewrite_report(opts.artifacts, expected_real, state.report(opts, with_output=False))
    if opts.json_output:
        document = state.report(opts, with_output=True)
        document["artifacts"] = str(opts.artifacts.absolute()) if opts.artifacts is not None else None
        with contextlib.suppress(BrokenPipeError):
            # ensure_ascii escapes every control but DEL; \u007f is the same JSON, and inert on a terminal
            sys.stdout.write(json.dumps(document, indent=2).replace("\x7f", "\\u007f") + "\n")
            sys.stdout.flush()
    if opts.debug and state.debug_trace:
        term.error(state.debug_trace, multiline=True)
    if state.error is not None:
        term.error(state.error, multiline=opts.debug)
    duration = (state.ended_at - state.started_at).total_seconds()
    done = sum(1 for run in state.files if run.status == "ok")
    parts = [f"{done}/{len(state.files)} file{'s' if len(state.files) != 1 else ''} ok in {duration:.1f}s"]
    if state.recording is not None:
        parts.append(f"recording {state.recording['run_id']}")
    if opts.artifacts is not None:
        parts.append(f"artifacts in {opts.artifacts}")
    if state.images and opts.artifacts is None:
        parts.append(f"{len(state.images)} image(s) not saved (use --artifacts DIR)")
    if state.retention is not None:
        parts.append(state.retention)
    term.info("; ".join(parts))
    return int(state.exit_code)


RUN_HELP = """Run FILEs (or - for stdin) in one sandboxed MCP Console session, in order.

\b
The files share one session: a variable set by the first is there for the
second. The language comes from the extension (.py, .R/.r, .sql) or
--language. The session is verified before any code runs: a qualified
mcp-console, the sandbox of --profile exactly as advertised, no project config.
Output streams as it arrives; the run stops at the first file that fails.

\b
The code's output is shown, never obeyed: control characters other than
newline and tab, and bidi controls, are escaped visibly (\\x07, \\u202e); a
line imitating this command's own status lines gets "[cell] " in front;
under GitHub Actions (GITHUB_ACTIONS=true) the output is fenced with
::stop-commands::TOKEN so workflow commands in it are inert; under Azure
Pipelines (TF_BUILD=True) ##vso[ and ##[ are escaped, under TeamCity
##teamcity[, under Buildkite a line starting a group (--- , +++ , ~~~ ) is
tagged. --raw turns this off. Status lines and errors go to stderr, the
code's output to stdout; they are always one line each after the
command's own prefix, escaped, so no text of the code in them is obeyed.

\b
--artifacts and --recordings-dir may lie where the code can write (the
workspace under --profile workspace, a --writable-root): they are written
only after the session has stopped, never through a symlink the code
planted. The recording is then kept in a private folder during the run and
copied there afterwards. Under --profile workspace the workspace must be a
project folder: /, home, their ancestors, system and shared temp folders
are refused (exit 3, nothing written).

\b
Exit status:
  0  every file ran without error
  1  the code raised or returned an error (traceback, R or SQL error)
  2  usage error (unknown option, missing file, ...)
  3  launch refused or verification failed (nothing of the code ran)
  4  timeout (--timeout passed; the cell was interrupted)

\b
Examples:
  console-bridge run analysis.py
  console-bridge run load.py model.py report.sql
  console-bridge run --artifacts artifacts --timeout 600 analysis.py
  console-bridge run --profile workspace --writable-root ./out job.py
  echo 'print(6 * 7)' | console-bridge run -
  console-bridge run --json query.sql > result.json
"""


def _env_pairs(values: tuple[str, ...]) -> dict[str, str]:
    env: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key or not key.replace("_", "a").isalnum() or key[0].isdigit():
            raise click.BadParameter(f"{item!r} is not KEY=VALUE with a name like MY_VAR", param_hint="--env")
        env[key] = value
    return env


class _Retention(click.ParamType[int | None]):
    name = "retention"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int | None:
        if value is None or isinstance(value, int):
            return value
        text = str(value).strip().lower()
        if text in ("all", "none", "off"):
            return None
        if text.isdigit() and int(text) >= 1:
            return int(text)
        self.fail(f"{value!r} is not a count of recordings (1 or more) or 'all'", param, ctx)


RETENTION = _Retention()


@click.command("run", help=RUN_HELP, no_args_is_help=True)
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, allow_dash=True))
@click.option(
    "--language",
    type=click.Choice(["python", "r", "sql"], case_sensitive=False),
    help="Language of every FILE (default: from the extension; python for -).",
)
@click.option(
    "--profile",
    default="read-only",
    show_default=True,
    metavar="NAME|FILE",
    help="Sandbox profile: a name from `console-bridge profiles` or a profile file.",
)
@click.option(
    "--workspace",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=".",
    show_default=True,
    help="The session's working folder (default: the current folder).",
)
@click.option(
    "--writable-root",
    "writable_roots",
    multiple=True,
    metavar="DIR",
    help="A folder the code may write to (repeatable; must exist; never /, home or system folders).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    metavar="SECONDS",
    help=(
        "Limit for the code's run time (all files together; the session's startup is not counted and has "
        "its own bound); past it the running cell is interrupted (exit 4)."
    ),
)
@click.option(
    "--startup-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=_STARTUP_TIMEOUT,
    show_default=True,
    metavar="SECONDS",
    help="Bound on starting the session and its worker (not counted by --timeout); past it: exit 4.",
)
@click.option(
    "--poll-window",
    type=click.FloatRange(min=0.05, max=3600),
    default=1.0,
    show_default=True,
    metavar="SECONDS",
    help="How often output is fetched while a cell runs (each fetch is one recorded call).",
)
@click.option(
    "--artifacts",
    type=click.Path(path_type=Path),
    metavar="DIR",
    help=(
        "Write output.txt, image-NNN.png, report.json and a copy of the recording here "
        "(written by the CLI on the host after the session has stopped, never through a symlink)."
    ),
)
@click.option(
    "--json",
    "json_output",
    is_flag=True,
    help=(
        "Print one JSON document at the end (outputs per file, exit status, sandbox, versions, recording) "
        "instead of streaming the output."
    ),
)
@click.option(
    "--quiet", "-q", is_flag=True, help="No status line and no informational messages on stderr; errors still print."
)
@click.option("--debug", is_flag=True, help="On errors, print the Python traceback and the server's stderr tail.")
@click.option(
    "--python",
    metavar="VENV",
    help=(
        "The venv the Python worker runs in (default: this interpreter's venv). It needs what the code imports, "
        "and duckdb for SQL; `console-bridge doctor --python VENV` checks it."
    ),
)
@click.option(
    "--project-config",
    is_flag=True,
    help=(
        "Load the workspace's .agents/console/config.yaml (refused by default: it can widen the sandbox; the "
        "advertised sandbox is still verified)."
    ),
)
@click.option(
    "--recordings-dir",
    type=click.Path(file_okay=False),
    metavar="DIR",
    help=(
        "Where the session's recording goes (default: the user data folder, as `console-bridge recordings` uses). "
        "A folder the code can write is filled only after the session has stopped."
    ),
)
@click.option(
    "--keep-recordings",
    type=RETENTION,
    default=lambda: os.environ.get("CONSOLE_BRIDGE_KEEP_RECORDINGS", "50"),
    show_default="50, or $CONSOLE_BRIDGE_KEEP_RECORDINGS",
    metavar="N|all",
    help=(
        "After the run, keep this workspace's N newest recordings in the recordings folder and delete the older "
        "ones (live ones are never touched); `all` turns retention off."
    ),
)
@click.option(
    "--raw",
    is_flag=True,
    help="Write the code's output exactly as it came (no escaping of control characters, no CI fencing).",
)
@click.option(
    "--command",
    metavar="PATH",
    help="The mcp-console binary (default: $CONSOLE_BRIDGE_MCP_CONSOLE, else beside this Python, else PATH).",
)
@click.option(
    "--env",
    "env",
    multiple=True,
    metavar="KEY=VALUE",
    callback=lambda ctx, param, value: _env_pairs(value),
    help="An environment variable for the code (repeatable); the host's environment is never passed on.",
)
@click.option(
    "--collect",
    "collect",
    multiple=True,
    metavar="GLOB",
    help=(
        "Before the session closes, copy the files of the code's TMPDIR matching GLOB ('*.csv', 'out/**/*.png'; "
        "repeatable) into --artifacts DIR/files (never through a symlink)."
    ),
)
@limit_options
@click.pass_context
def run_command(ctx: click.Context, /, files: tuple[str, ...], language: str | None, **options: Any) -> None:
    try:
        limits = limits_from_options(options["profile"], options)
    except BridgeError as exc:
        raise click.BadParameter(exc.message, param_hint="--profile/limits") from None
    opts = Options(
        workspace=options["workspace"],
        profile=options["profile"],
        writable_roots=tuple(options["writable_roots"]),
        timeout=options["timeout"],
        poll_window=options["poll_window"],
        artifacts=options["artifacts"],
        json_output=options["json_output"],
        quiet=options["quiet"],
        debug=options["debug"],
        python=options["python"],
        recordings_dir=options["recordings_dir"],
        command=options["command"],
        raw=options["raw"],
        keep_recordings=options["keep_recordings"],
        project_config=options["project_config"],
        startup_timeout=options["startup_timeout"],
        limits=limits,
        read_roots=tuple(options["read_roots"]),
        env=options["env"],
        collect=tuple(options["collect"]),
    )
    ctx.exit(execute(opts, files, language.lower() if language else None))
