"""Jupyter magics for MCP Console sessions (the ``jupyter`` extra): ``%load_ext console_bridge``.

One verified, sandboxed session per kernel, opened by the first ``%%console`` cell::

    %load_ext console_bridge

    %%console --workspace analysis/ --profile read-only
    import pandas as pd
    df = pd.read_csv("data.csv")
    df.describe()

    %%console sql
    select 42 as answer

``%%console [python|sql|r] [--profile P] [--workspace DIR] [--timeout S] [--poll-window S]
[--recordings-dir DIR] [--python VENV] [--languages python,sql,r]`` runs the cell in the kernel's
session (``--python``: the venv the worker's Python runs in). The session offers R from its first
cell when it is an R cell or names ``--languages`` (R makes each start 2-5 s slower); a cell in a language the
open session lacks is refused, state kept, unless it names ``--languages`` (which reopens).
Output streams into the cell as it arrives, stdout and stderr on their own streams;
``display()`` calls, plots and rich objects (DataFrames as HTML tables, SQL results,
``HTML(...)``, Markdown) appear as ``display_data`` where the cell showed them, and the
cell's final value as its ``execute_result``. ``input()`` in a cell asks through the notebook's
stdin (a frontend without stdin gets a clear error; the session lives on). Options not given
keep what the open session has; a cell
that asks for another workspace, profile, poll window, recordings folder or ``--languages``
closes the session and opens a new one, and says so (in-memory state is lost).
``--timeout`` bounds one cell: past it the cell is interrupted and the session lives on.

A failure of the bridge (a refused launch, a timeout, a closed session) shows one line,
the :class:`~console_bridge.BridgeError`'s message, without a traceback. Code that raises
inside the console (an exception, a SQL or R error) shows its traceback once, as the cell's
output, and the cell fails with a one-line :class:`~console_bridge.CellError`, so "Run All"
and ``nbconvert --execute`` stop there. Interrupting the kernel
(Ctrl-C, the stop button) interrupts the cell and keeps the session and its state.

Line magics: ``%console_status`` (server, pid, workspace, profile, advertised sandbox,
recording), ``%console_restart`` (a fresh session, state lost), ``%console_close``, and for
files ``%console_put LOCAL [NAME]`` (a host file into the cell's TMPDIR) and
``%console_get NAME [LOCAL]`` (a file a cell wrote there back to the host; this works under
the read-only profile too). The
session closes at ``%unload_ext``, at kernel shutdown or restart, and when the kernel
process exits.

Sessions come from a per-kernel :class:`~console_bridge.SessionManager` that keeps one
verified, booted session warm (``warm=1``): ``%console_restart`` hands over that fresh
session at once instead of waiting for a new worker.

The blocking :class:`~console_bridge.Console` also works in a notebook without the
magics; its results render as text plus inline PNGs.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from IPython.core.error import StdinNotImplementedError, UsageError
from IPython.core.interactiveshell import InteractiveShell

from console_bridge import (
    BridgeError,
    CellError,
    CellFailure,
    CellResult,
    CellTimeout,
    Console,
    ConsoleStatus,
    InvalidArgument,
    Output,
    Owner,
    ServerError,
    SessionManager,
    SessionUsage,
)
from console_bridge._confinement._limits import Limits
from console_bridge._hygiene import CellOutput, host_line
from console_bridge._jupyter._options import (
    OptionsError,
    SessionSpec,
    describe_change,
    parse_cell_line,
    plan_session,
)
from console_bridge._jupyter._transfer import TRANSFER_MAGICS, TransferMagics, notebook_text, one_line
from console_bridge._vetting._profiles import load_profile

__all__ = ["ConsoleMagics", "load_ipython_extension", "unload_ipython_extension"]

_PREFIX = "console-bridge: "
_BEING_POLLED = "already being polled"
_INTERRUPTED = "KeyboardInterrupt: the cell was interrupted; the session and its state are kept"
_loaded: dict[InteractiveShell, ConsoleMagics] = {}
#: Who the kernel's sessions belong to (the notebook user: host calls).
_OWNER = Owner("jupyter")


def _limits_for(spec: SessionSpec) -> Limits | None:
    """The session's Limits: the profile's, with what the %%console line changed (None: the profile's)."""
    if not spec.limits:
        return None
    return dataclasses.replace(load_profile(spec.profile).limits, **dict(spec.limits))


class _Value:
    """The console cell's final value, returned by the magic: IPython shows it as the cell's
    ``execute_result`` (``Out[n]``) with its whole MIME bundle."""

    def __init__(self, output: Output) -> None:
        self.output = output

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return self.output.jupyter_bundle()

    def __repr__(self) -> str:
        return self.output.text


#: how the sandbox's IPython starts a traceback (its Context mode, and a syntax error's)
_TRACEBACK_STARTS = ("-" * 75 + "\n", "  Cell In[")


def sandbox_error(failure: CellFailure) -> Exception:
    """The cell's failure as the kernel shows it: an exception of the sandbox's class name (``ename``),
    its message (``evalue``) and the sandbox's traceback (IPython's ``_render_traceback_``)."""
    name = failure.name if failure.name.isidentifier() else "CellError"
    error: Exception = type(name, (Exception,), {"__module__": "sandbox"})(failure.message)
    lines = failure.traceback.rstrip("\n").splitlines() or [f"{failure.name}: {failure.message}"]
    setattr(error, "_render_traceback_", lambda: lines)  # noqa: B010 - an instance attribute, on purpose
    return error


def _format_value(value: object) -> str:
    if isinstance(value, list | tuple):
        return "[" + ", ".join(str(item) for item in value) + "]"
    return str(value)


def _status_text(status: ConsoleStatus) -> str:
    """A few readable lines about a console session (what ``%console_status`` prints)."""
    sandbox = status.sandbox
    sandbox_text = ", ".join(f"{k}={_format_value(v)}" for k, v in sandbox.items()) if sandbox else "not verified"
    return "\n".join(
        [
            f"console-bridge session: {status.state}",
            f"  server      mcp-console {host_line(status.version or '?')}, pid {status.pid}",
            f"  workspace   {host_line(str(status.workspace))}",
            f"  profile     {host_line(status.profile)}",
            f"  sandbox     {host_line(sandbox_text)}",
            f"  languages   {host_line(', '.join(status.languages))}; poll window {status.poll_window:g} s",
            f"  recording   {host_line(str(status.recording or 'none yet'))}",
            *([f"  usage       {_usage_text(status.usage)}"] if status.usage is not None else []),
        ]
    )


def _usage_text(usage: SessionUsage) -> str:
    def size(value: int | None) -> str:
        return "?" if value is None else f"{value / 2**20:.0f} MiB"

    cpu = "?" if usage.cpu_seconds is None else f"{usage.cpu_seconds:.1f} s"
    procs = "?" if usage.processes is None else str(usage.processes)
    return f"cpu {cpu}, memory {size(usage.memory)} (peak {size(usage.memory_peak)}), {procs} processes"


class ConsoleMagics(TransferMagics):
    """The kernel's one console session and the magics that drive it.

    ``%load_ext console_bridge`` creates one per IPython shell and registers
    ``%%console``, ``%console_status``, ``%console_restart`` and ``%console_close``.
    ``settle_timeout`` bounds, in seconds, how long an interrupted cell is given to
    stop before the magic gives up waiting and says so; ``retry_interval`` is the pause
    between polls the server refuses meanwhile. Example (what the extension does)::

        magics = ConsoleMagics(get_ipython())
        magics.register()
    """

    def __init__(
        self,
        shell: InteractiveShell,
        *,
        settle_timeout: float = 10.0,
        retry_interval: float = 0.05,
        acquire_timeout: float = 120.0,
        max_file_bytes: int = 100_000_000,
    ) -> None:
        self.shell = shell
        #: the largest file %console_put / %console_get copy
        self.max_file_bytes = max_file_bytes
        #: what the first session opens with (unless its cell says --languages, or is an R cell): R only when
        #: asked, since finding R's environment makes every start 2-5 s slower (the opening line says how)
        self.default_languages: tuple[str, ...] = ("python", "sql")
        self.settle_timeout = settle_timeout
        self.retry_interval = retry_interval
        self.acquire_timeout = acquire_timeout
        self.manager: SessionManager | None = None
        self.console: Console | None = None
        self.spec: SessionSpec | None = None
        #: as the sandboxed kernel shows cells (``console-bridge kernel``): no lines of its own about the
        #: session, and a failed cell is an error named as in the sandbox with its traceback, as ipykernel's
        self.as_kernel = False

    # ------------------------------------------------------------ registration
    def register(self) -> None:
        """Register the magics on the shell and close the session at interpreter exit."""
        manager = self.shell.magics_manager
        manager.register_function(self.console_cell, "cell", "console")
        manager.register_function(self.console_status, "line", "console_status")
        manager.register_function(self.console_restart, "line", "console_restart")
        manager.register_function(self.console_close, "line", "console_close")
        manager.register_function(self.console_put, "line", "console_put")
        manager.register_function(self.console_get, "line", "console_get")
        manager.register_function(self.console_push, "line", "console_push")
        manager.register_function(self.console_pull, "line", "console_pull")
        atexit.register(self.close)

    def unregister(self) -> None:
        """Close the session and remove the magics (``%unload_ext``)."""
        self.close()
        atexit.unregister(self.close)
        magics = self.shell.magics_manager.magics
        magics["cell"].pop("console", None)
        for name in (*TRANSFER_MAGICS, "console_status", "console_restart", "console_close"):
            magics["line"].pop(name, None)

    def close(self) -> None:
        """Close the session and the warm one (recordings finalized, trees stopped). Idempotent, never raises."""
        manager, self.manager, self.console, self.spec = self.manager, None, None, None
        if manager is not None:
            with contextlib.suppress(Exception):
                manager.shutdown()

    # ------------------------------------------------------------------ magics
    def console_cell(self, line: str, cell: str) -> object:
        """Run the cell in the kernel's MCP Console session.

        Usage: ``%%console [python|sql|r] [--profile NAME_OR_FILE] [--workspace DIR]
        [--timeout SECONDS] [--poll-window SECONDS] [--recordings-dir DIR] [--python VENV]
        [--languages python,sql,r]``

        The first cell opens the session (profile ``read-only`` and the kernel's folder
        unless given). Options not given keep the open session's; a different workspace,
        profile, poll window, recordings folder or language closes it and opens a new one.
        ``--timeout`` interrupts a cell that runs longer; the session lives on. A cell whose
        code fails raises :class:`CellError` (one line; the traceback is the cell's output).
        """
        try:
            options = parse_cell_line(line)
        except OptionsError as exc:
            raise UsageError(str(exc)) from None
        try:
            spec = plan_session(self.spec, options, cwd=Path.cwd(), default_languages=self.default_languages)
        except OptionsError as exc:
            if self.as_kernel and self.spec is not None and options.language not in self.spec.languages:
                shown = {"r": "R", "sql": "SQL"}.get(options.language, options.language)
                text = (
                    f"this kernel's session has no {shown} "
                    f"(languages: {', '.join(self.spec.languages)}); install a kernel that has it, e.g. "
                    f"`console-bridge kernel install --user --name cb-r --languages {','.join(self.spec.languages)},"
                    f"{options.language}`, and choose that kernel"
                )
                raise one_line(InvalidArgument(text), f"InvalidArgument: {text}") from None
            raise UsageError(str(exc)) from None
        try:
            console = self._session(spec)
            if cell.strip():
                return self._run(console, options.language, cell, options.timeout)
            return None
        except CellTimeout as exc:
            limit = f"--timeout {options.timeout:g} s" if options.timeout is not None else "its timeout"
            text = f"CellTimeout: the cell ran past {limit}; it was interrupted and the session lives on"
            raise one_line(exc, text) from None
        except CellError as exc:
            if hasattr(exc, "_render_traceback_"):
                raise  # already worded for the notebook
            failure = exc.error
            if self.as_kernel and failure is not None:
                raise sandbox_error(failure) from None
            what = (
                f"{failure.name}: {failure.message.strip().splitlines()[0]}"
                if failure and failure.message.strip()
                else (failure.name if failure else "the cell failed")
            )
            text = f"CellError: the {options.language} cell failed with {what} (its output above shows where)"
            raise one_line(exc, host_line(text)) from None
        except BridgeError as exc:
            raise one_line(exc, host_line(notebook_text(exc))) from None

    def console_status(self, line: str) -> None:
        """Print the session's state: server version and pid, workspace, profile, sandbox, recording."""
        self._no_arguments("%console_status", line)
        if self.console is None:
            sys.stdout.write("console-bridge: no session is open; the first %%console cell opens one\n")
            return
        sys.stdout.write(_status_text(self.console.status()) + "\n")

    def console_restart(self, line: str) -> None:
        """Replace the session by a fresh one (the warm one, at once): in-memory state lost."""
        self._no_arguments("%console_restart", line)
        if self.console is None or self.manager is None:
            sys.stdout.write("console-bridge: no session is open; nothing to restart\n")
            return
        old, self.console = self.console, None
        try:
            old.close()
            self.console = self.manager.open(owner=_OWNER)
        except BridgeError as exc:
            raise one_line(exc, host_line(notebook_text(exc))) from None
        sys.stdout.write(
            f"console-bridge: a fresh session (pid {self.console.pid}) replaced the old one; "
            "its in-memory state is gone\n"
        )

    def console_close(self, line: str) -> None:
        """Close the session; the next ``%%console`` cell opens a new one."""
        self._no_arguments("%console_close", line)
        if self.console is None:
            sys.stdout.write("console-bridge: no session is open\n")
            return
        self.close()
        sys.stdout.write("console-bridge: the session is closed; the next %%console cell opens a new one\n")

    # ---------------------------------------------------------------- helpers
    def _open_console(self, what: str) -> Console:
        if self.console is None or self.console.status().state == "closed":
            raise UsageError(f"{what}: no session is open; run a %%console cell first")
        return self.console

    @staticmethod
    def _no_arguments(name: str, line: str) -> None:
        if line.strip():
            raise UsageError(f"{name} takes no arguments")

    def _session(self, spec: SessionSpec) -> Console:
        """The open session if it matches ``spec``, else a new one (the old one closed, saying so)."""
        current = self.console
        if current is not None and self.spec == spec and current.status().state != "closed":
            return current
        manager = self.manager if self.spec == spec else None
        if manager is None:
            # Construction checks the arguments and starts nothing: a bad option keeps the open session.
            manager = SessionManager(
                spec.workspace,
                warm=0 if self.as_kernel else 1,  # (a kernel's restart is a new process: no spare to keep)
                max_sessions=2,
                idle_timeout=None,
                max_lifetime=None,
                acquire_timeout=self.acquire_timeout,
                profile=spec.profile,
                poll_window=spec.poll_window,
                recordings_dir=spec.recordings_dir,
                languages=spec.languages,
                python=spec.python,
                limits=_limits_for(spec),
                read_roots=spec.read_roots,
            )
        if current is not None and self.spec is not None:
            if current.status().state == "closed":
                why = "the session was closed (it stopped or failed)"
            else:
                why = describe_change(self.spec, spec) or "the session changes"
            notice = f"{why}: closing the session (its state is lost) and opening a new one"
            if not self.as_kernel:
                sys.stderr.write(f"{_PREFIX}{host_line(notice)}\n")
            if manager is self.manager:
                with contextlib.suppress(Exception):
                    current.close()
                self.console = None
            else:
                self.close()
        try:
            if manager is not self.manager:
                manager.start()
            console = manager.open(owner=_OWNER)
        except BaseException:
            manager.shutdown()
            self.manager, self.console, self.spec = None, None, None
            raise
        self.manager, self.console, self.spec = manager, console, spec
        status = console.status()
        opened = (
            f"opened a {status.profile!r} session on {status.workspace} "
            f"(mcp-console {status.version}, pid {status.pid})"
        )
        if "r" not in spec.languages and shutil.which("R"):
            opened += "; R is installed but not in this session: `--languages python,sql,r` on a %%console line adds it"
        if not self.as_kernel:
            sys.stderr.write(f"{_PREFIX}{host_line(opened)}\n")
        return console

    def _run(self, console: Console, language: str, code: str, timeout: float | None) -> _Value | None:
        # The cell's streams, captured now: chunks arrive on the console's loop thread. Text is shown,
        # never obeyed (the same hygiene as `console-bridge run`), on stdout and stderr alike.
        out: TextIO = sys.stdout
        err: TextIO = sys.stderr
        # (one CI fence, on stdout: a second one on stderr could cancel it, the two pipes are read in no order)
        # (as a kernel, Jupyter's frontends render the text, `\r` and all, as for ipykernel; mcp-console has
        # stripped the terminal escapes already)
        raw = self.as_kernel
        hygiene = {"stdout": CellOutput(raw=raw, environ=os.environ), "stderr": CellOutput(raw=raw, environ={})}

        def write_to(stream: str, text: str) -> None:
            target = out if stream == "stdout" else err
            inert = hygiene[stream].feed(text)
            if inert:
                target.write(hygiene[stream].opening() + inert)
                target.flush()

        def write(text: str) -> None:
            write_to("stdout", text)

        shown: list[str] = []
        final: list[Output] = []
        publish = self.shell.display_pub.publish

        held: list[str] = []  # (as a kernel: a traceback on stderr, shown as the error message instead)

        def on_output(chunk: CellResult) -> None:
            if not (chunk.segments and all(stream == "display" for stream, _ in chunk.segments)):
                for stream, text in (("stdout", chunk.text), ("stderr", chunk.stderr)):
                    if stream == "stderr" and self.as_kernel and (held or text.startswith(_TRACEBACK_STARTS)):
                        held.append(text)
                    elif text:
                        write_to(stream, text)
                        shown.append(text)
            else:
                shown.append(chunk.text)
            for output in chunk.outputs:
                if output.kind == "result" and self.as_kernel:
                    out.flush()
                    err.flush()
                    self.shell.displayhook(_Value(output))  # where the sandbox showed it, before later figures
                elif output.kind == "result":
                    final.append(output)  # the cell's value: this cell's execute_result
                else:
                    out.flush()
                    err.flush()
                    publish(data=output.jupyter_bundle())

        cell: dict[str, Any] = {language: code}  # python=, r= or sql=
        try:
            result = console.run(on_output=on_output, timeout=timeout, **cell)
            failure = result.error
            while result.waiting_for_input:
                # The cell called input(): ask through Jupyter's stdin, then follow the cell again.
                result = self._answer(console, result, on_output)
                failure = failure or result.error
            if failure is None and held:
                write_to("stderr", "".join(held))  # (it was not a traceback after all)
            if failure is not None:
                dataclasses.replace(result, error=failure).raise_for_error()
            return _Value(final[-1]) if final else None
        except CellTimeout as exc:
            # What the interrupt itself printed (where the code was) arrives after the last chunk.
            seen = len("".join(shown))
            if exc.result is not None and exc.result.combined.startswith("".join(shown)):
                for stream, part in exc.result.segments:
                    rest, seen = part[seen:], max(0, seen - len(part))
                    if rest:
                        write_to(stream, rest)
            raise
        except KeyboardInterrupt as exc:
            self._settle(console, write)
            raise one_line(exc, _INTERRUPTED) from None
        finally:
            for stream, target in (("stdout", out), ("stderr", err)):
                rest = hygiene[stream].flush()
                if rest:
                    target.write(hygiene[stream].opening() + rest)
                target.write(hygiene[stream].closing())
                target.flush()

    def _answer(self, console: Console, waiting: CellResult, on_output: Callable[[CellResult], None]) -> CellResult:
        """Read the answer to the cell's prompt from the notebook's stdin, send it, and follow the cell
        until it is done or asks again. A frontend without stdin (nbclient, nbconvert) cannot answer:
        the cell is interrupted, the session kept, and the magic says so."""
        try:
            answer = input(waiting.prompt or "")
        except (EOFError, StdinNotImplementedError):
            self._interrupt_waiting(console)
            raise one_line(
                CellError("the cell asked for input, which this frontend cannot give", result=waiting),
                "CellError: the cell called input(), but this frontend does not offer stdin (nbclient, nbconvert); "
                "the cell was interrupted and the session and its state are kept. Pass data through a file "
                "(%console_put) or a variable instead.",
            ) from None
        except KeyboardInterrupt as exc:
            self._interrupt_waiting(console)
            raise one_line(exc, _INTERRUPTED) from None
        result = console.send(stdin=answer + "\n")
        results = [result]
        on_output(result)
        while result.running:
            result = console.poll()
            results.append(result)
            on_output(result)
        errors = [r.error for r in results if r.error is not None]
        return dataclasses.replace(result, error=errors[0]) if errors else result

    def _interrupt_waiting(self, console: Console) -> None:
        """Stop a cell that waits for input no one will give; what it prints on the way goes to stderr."""
        with contextlib.suppress(BridgeError):
            shown = console.interrupt()
            if shown.combined:
                sys.stderr.write(shown.combined)
            if shown.running:
                self._settle(console, sys.stderr.write)

    def _settle(self, console: Console, write: Callable[[str], Any]) -> None:
        """Wait, within ``settle_timeout``, until an interrupted cell has stopped; show what it prints.

        ``Console.run`` has interrupted the cell, but the worker may still be unwinding
        (an ``except KeyboardInterrupt`` block, a ``finally``); a new cell sent meanwhile
        would be refused as busy. mcp-console keeps the cancelled poll open until its
        window ends and refuses another poll until then: those refusals are retried every
        ``retry_interval`` seconds. Another Ctrl-C while waiting interrupts the cell again.
        """
        deadline = time.monotonic() + self.settle_timeout
        try:
            while (remaining := deadline - time.monotonic()) > 0:
                try:
                    result = console.poll(timeout_ms=int(remaining * 1000))
                except ServerError as exc:
                    if _BEING_POLLED not in exc.message:
                        raise
                    time.sleep(min(self.retry_interval, remaining))
                    continue
                output = result.combined
                if output:
                    write(output)
                if not result.running:
                    return
        except BridgeError:
            pass
        except KeyboardInterrupt:
            with contextlib.suppress(BridgeError):
                console.interrupt()
            raise
        sys.stderr.write(f"{_PREFIX}the interrupted cell may still be running; %console_restart resets the worker\n")


def _shell(ipython: object) -> InteractiveShell:
    if not isinstance(ipython, InteractiveShell):
        raise InvalidArgument(f"expected an IPython InteractiveShell, not {type(ipython).__name__}")
    return ipython


def load_ipython_extension(ipython: object) -> None:
    """``%load_ext console_bridge``: register ``%%console`` and the line magics on the shell."""
    shell = _shell(ipython)
    if shell in _loaded:
        return
    magics = ConsoleMagics(shell)
    magics.register()
    _loaded[shell] = magics


def unload_ipython_extension(ipython: object) -> None:
    """``%unload_ext console_bridge``: close the session and remove the magics."""
    magics = _loaded.pop(_shell(ipython), None)
    if magics is not None:
        magics.unregister()
