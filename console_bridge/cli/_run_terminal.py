"""``console-bridge run``'s terminal: the code's output on stdout (made inert and CI-fenced by
``cli/_output.py`` unless --raw), a live status line and the host's own messages on stderr."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import time
from typing import Any

from console_bridge.cli._common import PREFIX
from console_bridge.cli._output import CellOutput, host_block, host_line

__all__ = ["Terminal"]


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

    def mark(self) -> int:
        """Where the next output begins in ``captured`` (for :meth:`recapture`)."""
        return len(self.captured)

    def recapture(self, mark: int, text: str) -> None:
        """What output.txt keeps from ``mark`` on becomes ``text`` (made inert the same way; not shown again)."""
        inert = CellOutput(raw=self.cell_output.raw, environ=os.environ)
        whole = inert.feed(text) + inert.flush()
        self.captured[mark:] = [whole if whole.endswith("\n") or not whole else whole + "\n"]

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
