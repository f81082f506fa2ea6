"""``console-bridge run``'s session: start one verified console, run each file as one cell in order
(stopping at the first failure, --timeout counting the cells' run time), collect files, close."""

from __future__ import annotations

import contextlib
import json
import signal
import time
import traceback
from typing import Any

import anyio

from console_bridge._console._session import AsyncConsole
from console_bridge._errors import BridgeError, CellTimeout
from console_bridge._results import CellResult
from console_bridge._vetting._sandbox import SandboxPolicy
from console_bridge.cli._common import ExitCode, error_text, exit_code_for, human_size
from console_bridge.cli._detect import OMITTED_MARK, chunk_output, code_error
from console_bridge.cli._run_names import CellNames
from console_bridge.cli._run_sources import FileRun
from console_bridge.cli._run_state import Options, RunState
from console_bridge.cli._run_terminal import Terminal

__all__ = ["STOP_SIGNALS", "Stop", "run_session"]

_TICK = 0.2  # seconds between redraws of the TTY status line
#: What stops a run and keeps its evidence: a CI job's timeout (SIGTERM), Ctrl-C, a closed terminal.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
#: Seconds the stopped cell gets to end after its interrupt (its ``finally`` blocks), and the files to be
#: collected: within the 10 s a CI runner or ``docker stop`` leaves between SIGTERM and SIGKILL.
_GRACE = 4.0
_COLLECT_GRACE = 3.0


class Stop:
    """The signals a run received. The first stops the cells (the running one is interrupted and gets
    ``_GRACE`` seconds to end); each later one cuts short the stage under way (the cell's grace, the
    collection). The session is closed and the report written whatever is received."""

    def __init__(self) -> None:
        self.signal: signal.Signals | None = None
        self.cells: anyio.CancelScope | None = None  # the session's start and its files (made in the loop)
        self.stage: anyio.CancelScope | None = None  # the grace or the collection, while one runs

    def received(self, signum: int) -> None:
        if self.signal is None:
            self.signal = signal.Signals(signum)
            if self.cells is not None:
                self.cells.cancel()
        elif self.stage is not None:
            self.stage.cancel()

    def grace(self, seconds: float) -> anyio.CancelScope:
        """A stage of the wind-down: shielded from the first stop, ended by the next signal or ``seconds``."""
        scope = anyio.CancelScope(shield=True, deadline=anyio.current_time() + seconds)
        self.stage = scope
        return scope


async def _receive(stop: Stop) -> None:
    with anyio.open_signal_receiver(*STOP_SIGNALS) as signals:
        async for signum in signals:
            stop.received(signum)


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


async def run_session(opts: Options, state: RunState, term: Terminal, stop: Stop) -> None:
    """The whole session, with the status line redrawn while it runs (on a TTY) and the stop signals
    turned into a wind-down that keeps the evidence (``Stop``)."""
    async with anyio.create_task_group() as group:
        group.start_soon(_receive, stop)
        if term.decorate:
            group.start_soon(_ticker, term)
        try:
            await _drive(opts, state, term, stop)
        finally:
            group.cancel_scope.cancel()


def _remaining(opts: Options, state: RunState) -> float | None:
    """What is left of --timeout: it counts the cells' run time, not the session's startup."""
    if opts.timeout is None:
        return None
    return opts.timeout - state.cell_time


async def _drive(opts: Options, state: RunState, term: Terminal, stop: Stop) -> None:
    """Start, run every file in order (stopping at the first failure or stop signal), collect, close.
    Records every failure in ``state``."""
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
            max_output=opts.max_output,
        )
        state.console = console
        try:
            with anyio.CancelScope() as stop.cells:
                if stop.signal is not None:  # (received before the loop listened)
                    stop.cells.cancel()
                await _start_and_run(console, opts, state, term, stop)
            if opts.collect and console.pid is not None:
                with stop.grace(_COLLECT_GRACE):
                    await _collect(console, opts, state, term)
        finally:
            term.set_label("stopping mcp-console")
            with anyio.CancelScope(shield=True):  # closed, its recording finalized, whatever was received
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


async def _start_and_run(console: AsyncConsole, opts: Options, state: RunState, term: Terminal, stop: Stop) -> None:
    """Start the session and run the files in order, up to the first that fails."""
    await console.start()
    status = console.status()
    state.version, state.command, state.limits = status.version, status.command, status.limits
    if status.sandbox is not None:
        state.sandbox = {**status.sandbox, "description": _describe(status.sandbox)}
    term.info(
        f"mcp-console {state.version}, profile {opts.profile}: "
        f"{state.sandbox['description'] if state.sandbox else 'sandbox unknown'}"
    )
    for name, report in status.limits.items():  # (only --best-effort starts with such a limit)
        if report.get("value") is not None and report.get("enforced_by") is None:
            why = report.get("note") or "nothing on this host can hold it"
            term.info(f"limit {name} is NOT enforced: {why}; --best-effort started anyway")
    total = len(state.files)
    names = CellNames()
    for index, run in enumerate(state.files, start=1):
        label = f"running {run.source.name}" + (f" ({index}/{total})" if total > 1 else "")
        term.set_label(label)
        if not await _run_file(console, run, opts, state, term, stop, names):
            break


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


def _keep_whole(run: FileRun, result: CellResult, term: Terminal, mark: int, names: CellNames) -> None:
    """When what was shown live is not the whole output (the live output stopped at --max-output, or
    a poll's window cut it: ``[output omitted: ...]``), the whole output the library read from the
    recording (head and tail past --max-output) is what output.txt and --json keep."""
    streamed = "".join(run.streamed)
    whole = chunk_output(result)
    cut = OMITTED_MARK in streamed  # the library could not read the raw log: each poll's window shown
    if whole == streamed or not (cut or result.truncated):
        return
    whole = names.text(whole)
    markers = [chunk for chunk in run.chunks if chunk.lstrip("\n").startswith("[image ")]
    run.chunks = [whole, *(("\n" if not whole.endswith("\n") else "") + m.lstrip("\n") for m in markers)]
    term.recapture(mark, run.output)
    kept = f"{len(whole.encode())} bytes" + (
        f", {result.omitted_bytes} past --max-output omitted" if result.truncated else ""
    )
    term.info(
        f"{run.source.name}: the live output "
        + ("showed the first and last 4 KiB of each poll" if cut else "stopped at --max-output")
        + f"; output.txt and --json hold the whole ({kept})"
    )


async def _run_file(
    console: AsyncConsole, run: FileRun, opts: Options, state: RunState, term: Terminal, stop: Stop, names: CellNames
) -> bool:
    """Run one source as one cell; True when it succeeded and the next may run."""
    name, language = run.source.name, run.source.language
    remaining = _remaining(opts, state)
    if remaining is not None and remaining <= 0:
        run.status = "timeout"
        run.error = f"not started: the run passed --timeout={opts.timeout:g}s"
        state.fail(ExitCode.TIMEOUT, f"the run passed --timeout={opts.timeout:g}s before {name} started")
        return False
    started = time.monotonic()
    mark = term.mark()

    def show(text: str) -> None:
        if text:
            run.chunks.append(text)
            term.write(text)

    def on_output(chunk: CellResult) -> None:
        text = chunk_output(chunk)
        run.streamed.append(text)
        show(names.stream(text))
        if chunk.images:
            show(names.flush())
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
    names.begin(name, language)
    try:
        code: dict[str, Any] = {language: run.source.code}
        result = await console.run(**code, timeout=remaining, on_output=on_output)
    except anyio.get_cancelled_exc_class():
        if stop.signal is not None:  # stopped: the cell is interrupted and its last words kept
            run.status = "stopped"
            run.error = f"stopped by {stop.signal.name} while running"
            term.set_label(f"stopping {name} ({stop.signal.name})")
            ended = None
            with stop.grace(_GRACE) as grace:
                ended = await console.settle(bound=_GRACE, on_output=on_output)
            if grace.cancel_called and grace.deadline > anyio.current_time():
                run.error += "; a second signal cut its grace short"
            elif ended is None:
                run.error += f"; it did not end within {_GRACE:g}s of its interrupt"
        raise
    except CellTimeout as exc:
        # What the interrupt itself printed (where the code was): not streamed by on_output.
        partial = exc.result.combined if exc.result is not None else ""
        streamed = "".join(run.streamed)
        show(names.flush())
        if partial.startswith(streamed) and partial[len(streamed) :].strip() not in ("", "[done]"):
            show(names.text(partial[len(streamed) :]))
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
        show(names.flush())
        run.elapsed = time.monotonic() - started
        state.cell_time += run.elapsed
        term.end_file()
    result = names.result(result)
    run.result = result
    _keep_whole(run, result, term, mark, names)
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
    if why is not None and opts.allow_errors and run.source.notebook_cell is not None:
        run.status, run.error = "error", why  # (in the executed notebook; the run goes on: --allow-errors)
        term.info(f"{name}: {why}; --allow-errors: the next cell runs")
        return True
    if why is not None:
        run.status, run.error = "error", why
        where = "the output above" if term.stream else "its output"
        left = sum(1 for other in state.files if other.status == "not run")
        rest = f"; {left} later file{'s' if left != 1 else ''} not run" if left > 0 else ""
        state.fail(ExitCode.CODE_ERROR, f"{name}: {why} (see {where}){rest}")
        return False
    run.status = "ok"
    return True
