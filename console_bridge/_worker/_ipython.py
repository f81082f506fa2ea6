"""Python cells through IPython's own ``InteractiveShell``, inside the sandboxed worker.

This module runs in the worker, not on the host: ``_cells._outcome_python`` sends its source as part
of the worker's startup code (so it needs nothing of console_bridge there, only the standard library
and the cell venv's IPython). It replaces mcp-console's ``_mcp_console.eval_cell`` (looked up by the
worker for every cell, checked on 0.0.5 and 0.0.6) with one that runs the cell as Jupyter's kernel
does: ``shell.run_cell(source, store_history=True)``. So magics (``%matplotlib inline``, ``%timeit``,
``%%time``, ``!cmd``: all inside the sandbox), a trailing ``;``, IPython's display formatter and its
registry (whatever a library registers, figures by value) and Jupyter's tracebacks (``Cell In[n],
line m``) behave as they do in Jupyter.

What the shell shows goes to the bridge's channels, as ipykernel's ZMQ classes send it to a
frontend: the display hook and the display publisher hand each MIME bundle to ``emit`` (``result``
or ``display``), a traceback is written to stderr and recorded by ``failure`` (the outcome log).

Without IPython in the cell venv nothing is replaced: cells run through mcp-console's own evaluator
as before, and ``notice`` says why (``status().extra["notices"]``).
"""

import base64
import contextlib
import os
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["BRIDGE_CELL", "_console_bridge_ipython", "sandbox_hint"]

#: The first line of the bridge's own Python cells (its confinement probe, a kernel's completions): they run
#: without history, so the first cell of the user's is ``In[1]`` and ``_`` is theirs.
BRIDGE_CELL = "# console-bridge: the bridge's own cell\n"

Emit = Callable[[str, dict[str, Any]], None]
Failure = Callable[..., str]


def sandbox_hint(error: BaseException) -> str:
    """What the sandbox had to do with ``error``, and the fix, when it had anything to do with it ("")."""
    import errno

    number = getattr(error, "errno", None)
    if isinstance(error, ModuleNotFoundError):
        return (
            f"console-bridge: the cell ran in {sys.prefix}, which has no {error.name!r}; the sandbox has no "
            "network to install it: install it in that venv on the host, or start the session with another "
            "venv (python=..., --python VENV)"
        )
    if isinstance(error, OSError) and number == errno.EROFS:
        return (
            "console-bridge: the sandbox shows this place read-only; cells write to $TMPDIR "
            f"({os.environ.get('TMPDIR', '?')}), and the workspace with profile='workspace' (--profile workspace); "
            "files come back with get_file() or `run --collect`"
        )
    if _from_socket(error):
        return "console-bridge: the sandbox has no network (every socket is refused); read data from files instead"
    return ""


def _from_socket(error: BaseException | None) -> bool:
    """Whether ``error``, or one it was raised from or while handling, came out of the socket module."""
    seen = 0
    while error is not None and seen < 20:
        seen += 1
        if type(error).__module__ == "socket":
            return True
        tb = error.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code.co_filename.endswith("socket.py"):
                return True
            tb = tb.tb_next
        error = error.__cause__ or error.__context__
    return False


def _has_group(error: BaseException | None, depth: int = 0) -> bool:
    """Whether ``error``, or one it was raised from or while handling, is an exception group."""
    import builtins

    group = getattr(builtins, "BaseExceptionGroup", None)  # (Python 3.11 and later)
    if error is None or group is None or depth > 20:
        return False
    return isinstance(error, group) or _has_group(error.__cause__ or error.__context__, depth + 1)


def _console_bridge_ipython(
    emit: Emit,
    failure: Failure,
    notice: Callable[[str, str], None],
    running: list[Any],
    folder: str,
) -> bool:
    """Install the shell; false (and a notice) when IPython cannot be imported in this venv. ``folder``: the
    bridge's private folder in the TMPDIR (IPython's own folder goes there, not among the cell's files)."""
    worker = sys.modules.get("_mcp_console")
    if worker is None or not callable(getattr(worker, "eval_cell", None)):
        notice("python", "console-bridge found no evaluator to hand to IPython in this mcp-console's worker")
        return False
    # (the user's ~/.ipython is neither writable nor theirs to share with a sandbox)
    os.environ.setdefault("IPYTHONDIR", os.path.join(folder, "ipython"))
    inline = "module://matplotlib_inline.backend_inline"
    if os.environ.get("MPLBACKEND", "agg").lower() == "agg":  # (mcp-console's choice: headless)
        os.environ["MPLBACKEND"] = inline  # figures shown by IPython's display formatter, as ipykernel does
    for name in ("COLUMNS", "LINES"):  # (mcp-console sets 200 columns; a kernel has none: pandas, numpy
        os.environ.pop(name, None)  # and pprint then use their defaults, as in Jupyter)
    try:
        from IPython.core.displayhook import DisplayHook
        from IPython.core.displaypub import DisplayPublisher
        from IPython.core.interactiveshell import InteractiveShell
        from traitlets.config import Config
    except Exception as exc:
        if os.environ.get("MPLBACKEND") == inline:
            os.environ["MPLBACKEND"] = "agg"
        notice(
            "ipython",
            f"Python cells run without IPython: it cannot be imported in the worker's Python ({sys.executable}: "
            f"{type(exc).__name__}: {exc}), so magics, a trailing ';' and IPython's display formatter are not "
            "available. Install IPython there (pip install ipython, or the [jupyter] extra).",
        )
        return False
    try:
        import importlib.util

        # (found, not imported: importing it imports matplotlib, before the shell it must find)
        has_inline = importlib.util.find_spec("matplotlib_inline") is not None
    except Exception:
        has_inline = False
    if not has_inline and os.environ.get("MPLBACKEND") == inline:
        os.environ["MPLBACKEND"] = "agg"

    def encoded(data: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for mime, value in data.items():
            binary = mime.startswith("image/") and mime != "image/svg+xml"
            if isinstance(value, (bytes, bytearray)):  # (a tuple: the cell venv's Python may be older)
                value = base64.b64encode(bytes(value)).decode("ascii") if binary else bytes(value).decode()
            elif binary and isinstance(value, str):
                value = "".join(value.split())  # (IPython's base64 has a line break every 76 characters)
            out[str(mime)] = value
        return out

    class BridgeDisplayHook(DisplayHook):
        """The last expression's value, as ipykernel's ZMQShellDisplayHook builds it: to ``emit``."""

        def start_displayhook(self) -> None:
            self._bundle: dict[str, Any] = {}

        def write_output_prompt(self) -> None:
            pass  # (Jupyter shows the execution count beside the result, not an "Out[n]:" line)

        def write_format_data(self, format_dict: dict[str, Any], md_dict: Any = None) -> None:
            self._bundle = encoded(format_dict)

        def finish_displayhook(self) -> None:
            sys.stdout.flush()
            if self._bundle:
                emit("result", self._bundle)
            self._bundle = {}

    class BridgePublisher(DisplayPublisher):
        """``display()`` and every rich output a library publishes: to ``emit``."""

        def publish(self, data: dict[str, Any], metadata: Any = None, source: Any = None, **kwargs: Any) -> None:
            sys.stdout.flush()
            emit("display", encoded(data))

        def clear_output(self, wait: bool = False) -> None:
            pass  # (the bridge keeps every output; there is no live view to clear)

    class BridgeShell(InteractiveShell):
        """Tracebacks go to stderr and to the outcome log, like ipykernel's error messages."""

        def showtraceback(self, *args: Any, **kwargs: Any) -> None:
            error = sys.exc_info()[1]
            if isinstance(error, SystemExit):  # (eval_cell ends the worker instead)
                return
            if _has_group(error) and not args and not kwargs.get("exc_tuple"):
                # IPython prints an exception group with traceback.print_exc(), past _showtraceback:
                # the failure would go unrecorded (a failed cell reported as a success)
                import traceback

                self._showtraceback(type(error), error, ["".join(traceback.format_exception(error)).rstrip("\n")])
                return
            super().showtraceback(*args, **kwargs)

        def _showtraceback(self, etype: Any, evalue: Any, stb: list[str]) -> None:
            text = self.InteractiveTB.stb2text(stb)
            hint = sandbox_hint(evalue)
            if hint:
                text += "\n\n" + hint
            lost = failure("python", evalue, text=text, later=True)  # (first: a cell may have broken its streams)
            try:
                sys.stdout.flush()
                sys.stderr.write(text + "\n")
                sys.stderr.flush()
            except Exception:
                if sys.__stderr__ is not None:
                    sys.__stderr__.write(text + "\n")
            if lost:  # (the log could not be written: the record, after the traceback, in a poll's tail)
                sys.stdout.write(lost)
                sys.stdout.flush()

        def show_usage_error(self, exc: BaseException) -> None:
            failure("python", exc, text=f"UsageError: {exc}")  # (a failed cell, as in Jupyter)
            super().show_usage_error(exc)  # type: ignore[no-untyped-call]

        def enable_gui(self, gui: Any = None) -> None:
            if gui not in (None, "inline"):
                raise RuntimeError(
                    f"the sandbox has no display: the {gui!r} GUI event loop cannot run there. Use "
                    "%matplotlib inline (the default: figures are shown as images)"
                )

    import warnings

    warnings.filterwarnings("ignore", message="To exit: use 'exit', 'quit', or Ctrl-D.", category=UserWarning)
    config = Config()
    config.HistoryManager.enabled = False  # (no SQLite history file in the sandbox)
    config.InteractiveShell.colors = "nocolor"
    config.InteractiveShell.xmode = "Context"
    config.InteractiveShell.autocall = 0
    config.IPCompleter.use_jedi = False  # (jedi finds nothing in the sandbox; IPython's own completer does)
    main = sys.modules["__main__"]
    shell = BridgeShell.instance(
        config=config,
        displayhook_class=BridgeDisplayHook,
        display_pub_class=BridgePublisher,
        user_module=main,
        user_ns=main.__dict__,
    )

    def script(interpreter: str) -> Callable[[str, str], None]:
        # IPython's %%bash runs the script through an asyncio event loop, whose self-pipe is a socket
        # pair: the sandbox refuses socket(), and the cell hung. The script runs through subprocess here.
        def magic(line: str, cell: str) -> None:
            import shlex
            import subprocess

            argv = [interpreter, *shlex.split(line)] if interpreter else shlex.split(line)
            done = subprocess.run(argv, input=cell, capture_output=True, text=True, check=False)
            sys.stdout.write(done.stdout)
            sys.stderr.write(done.stderr)
            if done.returncode:
                raise subprocess.CalledProcessError(done.returncode, cell)

        return magic

    for name, interpreter in (("bash", "bash"), ("sh", "sh"), ("script", "")):
        shell.magics_manager.register_function(script(interpreter), "cell", name)
    # mcp-console 0.0.6 widens numpy's and pandas' text to 200 columns and puts its own pyplot.show() in
    # place as each is imported (for a model reading text); a notebook shows them as ipykernel does.
    for finder in sys.meta_path:
        pending = getattr(finder, "_pending", None)
        if type(finder).__name__ == "_McpConsoleModuleDefaults" and isinstance(pending, set):
            pending.difference_update({"numpy", "pandas"})
            if os.environ.get("MPLBACKEND") == inline:
                pending.discard("matplotlib.pyplot")
    # Line numbers stay the source's (a file `run` sends, a notebook cell): IPython drops leading blank lines.
    cleanups = shell.input_transformer_manager.cleanup_transforms
    cleanups[:] = [step for step in cleanups if getattr(step, "__name__", "") != "leading_empty_lines"]
    compiler = shell.compile
    original_name = compiler.get_code_name

    def code_name(raw_code: str, transformed_code: str, number: int) -> str:
        # The cell is compiled under mcp-console's own name for it ("<mcp-console:python:eN>"): the
        # outcome hooks and `run`'s file names know it, and IPython still shows it as "Cell In[n]".
        name = running[0]
        return name if isinstance(name, str) else str(original_name(raw_code, transformed_code, number))

    compiler.get_code_name = code_name  # type: ignore[method-assign]
    finalize = getattr(worker, "finalize_plots", None)

    streams = (sys.stdout, sys.stderr)

    def eval_cell(source: str, filename: str) -> None:
        running[0] = filename
        if sys.stdout is None or sys.stderr is None:  # a cell set them to None: IPython could run nothing after
            sys.stdout, sys.stderr = sys.stdout or streams[0], sys.stderr or streams[1]
        mine = source.startswith("# console-bridge: the bridge's own cell\n")  # (BRIDGE_CELL, spelled out here)
        result = shell.run_cell(source, store_history=not mine)  # type: ignore[no-untyped-call]
        if isinstance(result.error_in_exec, SystemExit):
            raise result.error_in_exec  # (the worker ends, as with mcp-console's own evaluator)
        if callable(finalize):
            finalize()  # figures a cell left open with a backend other than the inline one
        for stream in (sys.stdout, sys.stderr):  # what the cell's threads wrote, before the cell ends
            with contextlib.suppress(Exception):
                stream.flush()

    setattr(worker, "eval_cell", eval_cell)  # noqa: B010  (mcp-console's module, looked up per cell)
    return True
