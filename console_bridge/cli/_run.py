"""``console-bridge run``: run files in one verified, sandboxed mcp-console session.

The command and its options are here, and so is what happens after the session stopped (the
recording published, retention, artifacts, the report). The rest is by what it guarantees:
``_run_sources`` (what to run), ``_run_terminal`` (output and status lines), ``_run_state``
(options and the report), ``_run_session`` (the session and its cells).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import click

from console_bridge._cells._recordings import Recordings
from console_bridge._console._files import check_glob
from console_bridge._errors import BridgeError
from console_bridge.cli import _artifacts as artifacts
from console_bridge.cli._common import ExitCode, FiniteFloat, error_text, fail
from console_bridge.cli._limit_options import NO_LIMIT, LimitSize, OrNone, limit_options, limits_from_options
from console_bridge.cli._run_notebook import executed_notebooks, load_all
from console_bridge.cli._run_session import STOP_SIGNALS, Stop, run_session
from console_bridge.cli._run_sources import FileRun
from console_bridge.cli._run_state import Options, RunState
from console_bridge.cli._run_terminal import Terminal

__all__ = ["run_command"]

_STARTUP_TIMEOUT = 60.0  # seconds, the library's default (--startup-timeout)


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
        notebooks=executed_notebooks(state.notebooks, state.files),
        recording=recording,
        report=state.report(opts, with_output=False),
    )


def _artifacts_target(path: Path) -> str:
    if path.exists() and not path.is_dir():
        raise click.BadParameter(f"{str(path)!r} exists and is not a folder", param_hint="--artifacts")
    return os.path.realpath(path)


# ---------------------------------------------------------------- the command
def check_usage(opts: Options) -> None:
    """Usage mistakes exit 2 before anything starts: an unknown profile, a writable or read root or a
    --python venv that is not an existing folder (a refused root, such as home, stays a launch refusal,
    exit 3)."""
    from console_bridge._vetting._profiles import load_profile

    try:
        load_profile(opts.profile)
    except BridgeError as exc:
        fail(f"--profile: {error_text(exc)} (see `console-bridge profiles`)", ExitCode.USAGE)
    for flag, roots in (("--writable-root", opts.writable_roots), ("--read-root", opts.read_roots)):
        for root in roots:
            if not Path(root).expanduser().is_dir():
                fail(f"{flag} {root!r} is not an existing folder; create it first", ExitCode.USAGE)
    if opts.python is not None and not Path(opts.python).expanduser().exists():
        fail(
            f"--python {opts.python!r} does not exist; create the venv with `python3 -m venv {opts.python}` and "
            "install what the cells import into it, or pass another",
            ExitCode.USAGE,
        )
    if opts.collect and opts.artifacts is None:
        fail("--collect needs --artifacts DIR (the collected files are written to DIR/files)", ExitCode.USAGE)
    for pattern in opts.collect:
        try:
            check_glob(pattern)
        except BridgeError as exc:
            fail(f"--collect: {error_text(exc)}", ExitCode.USAGE)


def _take_stop_signals(stop: Stop) -> None:
    for signum in STOP_SIGNALS:
        signal.signal(signum, lambda number, _frame: stop.received(number))


@contextlib.contextmanager
def _taking_stop_signals(stop: Stop) -> Iterator[None]:
    """The stop signals recorded in ``stop`` for the whole run, outside the session's loop too (before it
    listens, after it ended, while the artifacts are written: the report is never lost to one), the
    previous handlers restored after."""
    previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    _take_stop_signals(stop)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def execute(opts: Options, files: tuple[str, ...], language: str | None) -> int:
    stop = Stop()
    with _taking_stop_signals(stop):
        return _execute(opts, files, language, stop)


def _execute(opts: Options, files: tuple[str, ...], language: str | None, stop: Stop) -> int:
    check_usage(opts)
    sources, notebooks = load_all(files, language, list(opts.parameters))
    expected_real = _artifacts_target(opts.artifacts) if opts.artifacts is not None else ""
    state = RunState(files=[FileRun(source) for source in sources], notebooks=notebooks)
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
            try:
                anyio.run(run_session, opts, state, term, stop)
            finally:
                _take_stop_signals(stop)  # (the loop's own handlers, removed, leave the defaults behind)
        if stop.signal is not None:  # (whenever it came: before, during or after the session)
            state.stopped_by(stop.signal)
    except KeyboardInterrupt:  # (a Ctrl-C is a stop signal now; kept for one raised by other means)
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
    unit = "cell" if state.notebooks else "file"  # (a notebook's code cells run as the run's cells)
    parts = [f"{done}/{len(state.files)} {unit}{'s' if len(state.files) != 1 else ''} ok in {duration:.1f}s"]
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
--language. A notebook (.ipynb) runs its code cells in order (%%console sql
and %%console r cells in those languages) and is written, executed, to
--artifacts; -p NAME VALUE sets its parameters (after the cell tagged
'parameters'), --allow-errors runs on past a failing cell. The session is verified before any code runs: a qualified
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
  129, 130, 143  stopped by SIGHUP, SIGINT (Ctrl-C), SIGTERM (a CI job's
     timeout): the running cell is interrupted and gets a few seconds to
     end (its finally blocks run), --collect files are collected, the
     recording is finalized, output.txt and report.json ("ended_by") are
     written; a second signal cuts the grace short, never the report

\b
Examples:
  console-bridge run analysis.py
  console-bridge run load.py model.py report.sql
  console-bridge run --artifacts artifacts --timeout 600 analysis.py
  console-bridge run --profile workspace --writable-root ./out job.py
  echo 'print(6 * 7)' | console-bridge run -
  console-bridge run --json query.sql > result.json
  console-bridge run --artifacts out -p year 2025 analysis.ipynb
"""


def _env_pairs(values: tuple[str, ...]) -> dict[str, str]:
    env: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key or not key.replace("_", "a").isalnum() or key[0].isdigit():
            raise click.BadParameter(f"{item!r} is not KEY=VALUE with a name like MY_VAR", param_hint="--env")
        if key == "PATH":  # (it was taken and had no effect on the code: issue 31)
            raise click.BadParameter(
                "the code's PATH is set by the session (the worker venv's bin, then the host's command folders its "
                "view shows) and cannot be changed; call a program by its full path, or add its folder with "
                "--read-root DIR and call it from there",
                param_hint="--env",
            )
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
    type=FiniteFloat(min=0, min_open=True),
    metavar="SECONDS",
    help=(
        "Limit for the code's run time (all files together; the session's startup is not counted and has "
        "its own bound); past it the running cell is interrupted (exit 4)."
    ),
)
@click.option(
    "--startup-timeout",
    type=FiniteFloat(min=0, min_open=True),
    default=_STARTUP_TIMEOUT,
    show_default=True,
    metavar="SECONDS",
    help="Bound on starting the session and its worker (not counted by --timeout); past it: exit 4.",
)
@click.option(
    "--poll-window",
    type=FiniteFloat(min=0.05, max=3600),
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
@click.option(
    "-p",
    "--parameter",
    "parameters",
    nargs=2,
    multiple=True,
    metavar="NAME VALUE",
    help=(
        "A notebook's parameter, papermill-style (repeatable): set in a cell added after the one tagged "
        "'parameters' (a Python literal when VALUE parses as one, else a string)."
    ),
)
@click.option(
    "--allow-errors",
    is_flag=True,
    help="A notebook's failing cell does not stop the run (its error is in the executed notebook); exit 0.",
)
@click.option(
    "--max-output",
    "max_output",
    type=OrNone(LimitSize()),
    default="10MiB",
    show_default=True,
    help=(
        "A cell's output kept whole in output.txt, --json and report.json (read from the recording past "
        "mcp-console's per-poll window of about 8 KiB); past it the head and tail (none: all of it)."
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
        max_output=None if options["max_output"] == NO_LIMIT else options["max_output"],
        parameters=tuple(options["parameters"]),
        allow_errors=options["allow_errors"],
    )
    ctx.exit(execute(opts, files, language.lower() if language else None))
