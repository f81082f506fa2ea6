"""The sandboxed Jupyter kernel: ipykernel's ``IPythonKernel``, whose every cell runs in one verified
console-bridge session and never in the kernel's own process.

The kernel process is ipykernel's (the messaging protocol, execution counts, stdin, the control
channel, signals), with the ``%%console`` magics loaded (``console_bridge.jupyter``). ``do_execute``
hands each cell to them whole: a cell that starts with ``%%sql`` or ``%%R`` runs in that language,
any other is Python, and in every case the cell's text is the body of a ``%%console`` cell with the
kernel's own options, so nothing a cell says (``!cmd``, ``%magic``, ``import os``) runs on the host:
the sandbox's IPython runs it. Completion and inspection ask the sandbox's IPython too; the
kernel's own namespace holds nothing of the cell's.

Interrupts are ipykernel's (SIGINT to the kernel process): the magic turns the KeyboardInterrupt into
an interrupt of the cell, the session and its state kept. A restart is a new kernel process with a new
session; shutdown closes the session (its recording finalized).
"""

from __future__ import annotations

import contextlib
import json
import shlex
import sys
import threading
from typing import Any

from ipykernel.ipkernel import IPythonKernel

from console_bridge import BridgeError, __version__
from console_bridge._worker._ipython import BRIDGE_CELL
from console_bridge.jupyter import ConsoleMagics

__all__ = ["SandboxKernel", "split_language"]

_LANGUAGE_MAGICS = {"%%sql": "sql", "%%r": "r"}

#: The sandbox's IPython completes and inspects; one JSON line answers (run without history).
_COMPLETE = (
    BRIDGE_CELL
    + """\
import json as _cb_json
_cb_ip = get_ipython()
_cb_text, _cb_matches = _cb_ip.complete("", {line!r}, {cursor})
print("\\ufdd5" + _cb_json.dumps([_cb_text, _cb_matches]))
del _cb_json, _cb_ip, _cb_text, _cb_matches
"""
)
_INSPECT = (
    BRIDGE_CELL
    + """\
import json as _cb_json
try:
    _cb_bundle = get_ipython().object_inspect_mime({name!r}, detail_level={level})
    _cb_bundle.pop("text/html", None)
except Exception:
    _cb_bundle = None
print("\\ufdd5" + _cb_json.dumps(_cb_bundle, default=str))
del _cb_json, _cb_bundle
"""
)


def split_language(code: str) -> tuple[str, str]:
    """The cell's language and its body: ``%%sql`` and ``%%R`` on the first line choose SQL and R."""
    stripped = code.lstrip()
    first, _, rest = stripped.partition("\n")
    words = first.split()
    if words and words[0].lower() in _LANGUAGE_MAGICS:
        return _LANGUAGE_MAGICS[words[0].lower()], rest
    return "python", code


class SandboxKernel(IPythonKernel):
    """One sandboxed console-bridge session per kernel; see the module's docstring."""

    implementation = "console-bridge"
    implementation_version = __version__
    banner = "console-bridge: Python, SQL (%%sql) and R (%%R) cells in a verified MCP Console sandbox"

    #: the ``%%console`` options every cell runs with (the kernelspec's: profile, languages, limits, ...)
    session_options: tuple[str, ...] = ()

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)  # type: ignore[no-untyped-call]
        assert self.shell is not None
        self.magics = ConsoleMagics(self.shell)
        self.magics.as_kernel = True
        self.magics.register()
        self._opening: threading.Thread | None = threading.Thread(target=self._open, daemon=True)
        self._opening.start()

    @property
    def kernel_info(self) -> dict[str, Any]:
        info: dict[str, Any] = super().kernel_info
        info["debugger"] = False  # (the debugger would debug the kernel's process, not the sandbox)
        return info

    def _line(self, language: str) -> str:
        return " ".join(["%%console", language, *(shlex.quote(option) for option in self.session_options)])

    def _open(self) -> None:
        """Open the session as the kernel starts, so the first cell finds it booted. A refusal is the first
        cell's to show: it opens the session again, and fails saying why."""
        with contextlib.suppress(BaseException):
            self.magics.console_cell(self._line("python")[len("%%console ") :], "")

    def _opened(self) -> None:
        thread, self._opening = self._opening, None
        if thread is not None:
            thread.join()

    async def do_execute(
        self,
        code: str,
        silent: bool,
        store_history: bool = True,
        user_expressions: dict[str, Any] | None = None,
        allow_stdin: bool = False,
        *,
        cell_meta: dict[str, Any] | None = None,
        cell_id: str | None = None,
    ) -> dict[str, Any]:
        self._opened()
        language, body = split_language(code)
        wrapped = self._line(language) + "\n" + body if body.strip() else ""  # (empty: nothing to run)
        reply: dict[str, Any] = await super().do_execute(  # type: ignore[no-untyped-call]
            wrapped, silent, store_history, {}, allow_stdin, cell_meta=cell_meta, cell_id=cell_id
        )
        if user_expressions and reply.get("status") == "ok":
            reply["user_expressions"] = {
                name: {
                    "status": "error",
                    "ename": "NotAvailable",
                    "evalue": "user_expressions run on the host; the sandboxed kernel does not evaluate them",
                    "traceback": [],
                }
                for name in user_expressions
            }
        return reply

    def _ask_sandbox(self, code: str) -> Any:
        """Run a short Python cell in the sandbox and read its one JSON line (None: no answer)."""
        console = self.magics.console
        if console is None:
            return None
        try:
            result = console.run(python=code, timeout=10)
        except BridgeError:
            return None
        for line in result.text.splitlines():
            if line.startswith("\ufdd5"):
                try:
                    return json.loads(line[1:])
                except ValueError:
                    return None  # (cells control what the sandbox prints: junk is no answer)
        return None

    async def do_complete(self, code: str, cursor_pos: int | None) -> dict[str, Any]:
        self._opened()
        language, _body = split_language(code)
        if cursor_pos is None:
            cursor_pos = len(code)
        reply: dict[str, Any] = {
            "matches": [],
            "cursor_end": cursor_pos,
            "cursor_start": cursor_pos,
            "metadata": {},
            "status": "ok",
        }
        if language != "python":
            return reply
        start = code.rfind("\n", 0, cursor_pos) + 1
        end = code.find("\n", cursor_pos)
        line = code[start : end if end >= 0 else len(code)]
        answer = self._ask_sandbox(_COMPLETE.format(line=line, cursor=cursor_pos - start))
        if isinstance(answer, list) and len(answer) == 2:
            text, matches = answer
            reply["matches"] = [str(match) for match in matches]
            reply["cursor_start"] = cursor_pos - len(str(text))
        return reply

    async def do_inspect(
        self, code: str, cursor_pos: int, detail_level: int = 0, omit_sections: Any = ()
    ) -> dict[str, Any]:
        from IPython.utils.tokenutil import token_at_cursor

        self._opened()
        name = token_at_cursor(code, cursor_pos)
        answer = self._ask_sandbox(_INSPECT.format(name=name, level=int(detail_level)))
        # Plain text only: a cell may have replaced the sandbox's inspector, and the frontend renders HTML.
        data = (
            {"text/plain": answer["text/plain"]}
            if isinstance(answer, dict) and isinstance(answer.get("text/plain"), str)
            else {}
        )
        return {"status": "ok", "found": bool(data), "data": data, "metadata": {}}

    async def do_shutdown(self, restart: bool) -> dict[str, Any]:
        self._opened()
        self.magics.close()
        reply: dict[str, Any] = super().do_shutdown(restart)  # type: ignore[no-untyped-call]
        return reply


def main(argv: list[str] | None = None) -> None:
    """``python -m console_bridge._kernel -f CONNECTION_FILE [-- %%console options]``: start the kernel."""
    from ipykernel.kernelapp import IPKernelApp

    args = list(sys.argv[1:] if argv is None else argv)
    options: list[str] = []
    if "--" in args:
        cut = args.index("--")
        args, options = args[:cut], args[cut + 1 :]
    SandboxKernel.session_options = tuple(options)
    IPKernelApp.launch_instance(argv=args, kernel_class=SandboxKernel)
