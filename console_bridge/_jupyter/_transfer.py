"""The magics that move files and values between the kernel and its session (a mixin of
``ConsoleMagics``): ``%console_put``/``%console_get`` copy files to and from the cell's TMPDIR,
``%console_push``/``%console_pull`` bind values (data frames through Parquet, arrays as ``.npy``,
plain data as JSON; nothing is unpickled on the host: ``_console/_values``)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from console_bridge._console._blocking import Console
from console_bridge._errors import BridgeError, Busy, ConnectionClosed
from console_bridge._hostfs import read_file, write_file
from console_bridge._hygiene import host_line

__all__ = ["TRANSFER_MAGICS", "TransferMagics", "notebook_text", "one_line"]

_PREFIX = "console-bridge: "
TRANSFER_MAGICS = ("console_put", "console_get", "console_push", "console_pull")


def one_line(exc: BaseException, text: str) -> BaseException:
    """Make IPython show ``text`` instead of a traceback (its ``_render_traceback_`` protocol)."""
    setattr(exc, "_render_traceback_", lambda: [text])  # noqa: B010 - an instance attribute, on purpose
    return exc


def notebook_text(exc: BridgeError) -> str:
    """A bridge error in the notebook's terms (magics, the kernel's stop button), not the Python API's."""
    if isinstance(exc, Busy):
        return (
            "Busy: a console cell is still running; interrupt the kernel (the stop button) to stop it, or "
            "%console_restart for a fresh session (state lost)"
        )
    if isinstance(exc, ConnectionClosed):
        return f"ConnectionClosed: the session ended ({exc.message}); the next %%console cell opens a new one"
    return f"{type(exc).__name__}: {exc.message}"


class TransferMagics:
    """Files and values between the kernel and its session (needs ``shell``, ``max_file_bytes`` and
    ``_open_console`` of the magics class)."""

    shell: InteractiveShell
    max_file_bytes: int

    def _open_console(self, what: str) -> Console:
        raise NotImplementedError

    def console_put(self, line: str) -> None:
        """Copy a host file into the session's private TMPDIR: ``%console_put LOCAL [NAME]``.

        ``NAME`` (default: LOCAL's file name) is relative to the cell's TMPDIR; the path a cell
        opens is printed (``os.environ["TMPDIR"] + "/" + NAME``). LOCAL is read, and NAME written,
        without following a symlink; an existing NAME is not replaced.
        """
        local, name = self._file_words("%console_put LOCAL [NAME]", line)
        console = self._open_console("%console_put")
        path = Path(local).expanduser()
        try:
            data = read_file(path.parent, path.name, self.max_file_bytes)
        except (OSError, BridgeError) as exc:
            text = exc.message if isinstance(exc, BridgeError) else (exc.strerror or str(exc))
            raise one_line(exc, host_line(f"%console_put: cannot read {local!r}: {text}")) from None
        try:
            where = console.put_file(name or path.name, data)
        except BridgeError as exc:
            raise one_line(exc, host_line(notebook_text(exc))) from None
        sys.stdout.write(f"{_PREFIX}{host_line(f'{local} -> {where} ({len(data)} bytes); cells open {where}')}\n")

    def console_get(self, line: str) -> None:
        """Copy a file a cell wrote in its TMPDIR to the host: ``%console_get NAME [LOCAL]``.

        ``NAME`` is relative to the cell's TMPDIR; ``LOCAL`` (default: NAME's file name in the
        kernel's folder; a folder takes NAME's file name) is replaced if it exists. Neither side is
        followed through a symlink; files over ``max_file_bytes`` are refused.
        """
        name, local = self._file_words("%console_get NAME [LOCAL]", line)
        console = self._open_console("%console_get")
        try:
            data = console.get_file(name, max_bytes=self.max_file_bytes)
        except BridgeError as exc:
            raise one_line(exc, host_line(notebook_text(exc))) from None
        target = Path(local).expanduser() if local else Path.cwd() / Path(name).name
        if target.is_dir():
            target = target / Path(name).name
        try:
            write_file(target.parent, target.name, data, replace=True)
        except (OSError, BridgeError) as exc:
            text = exc.message if isinstance(exc, BridgeError) else (exc.strerror or str(exc))
            raise one_line(exc, host_line(f"%console_get: cannot write {str(target)!r}: {text}")) from None
        sys.stdout.write(f"{_PREFIX}{host_line(f'{name} -> {target} ({len(data)} bytes)')}\n")

    def console_push(self, line: str) -> None:
        """Send a kernel variable into the session: ``%console_push NAME`` (a data frame, an array or
        plain data; the session's Python gets a copy under the same name)."""
        name = self._one_name("%console_push NAME", line)
        if name not in self.shell.user_ns:
            raise UsageError(f"%console_push: the kernel has no variable {name!r}")
        console = self._open_console("%console_push")
        try:
            console.push(name, self.shell.user_ns[name])
        except BridgeError as exc:
            raise one_line(exc, host_line(notebook_text(exc))) from None
        sys.stdout.write(f"{_PREFIX}{host_line(f'{name} -> the session')}\n")

    def console_pull(self, line: str) -> None:
        """Bring a session variable into the kernel: ``%console_pull NAME`` (a data frame, an array or
        plain data, read by Parquet, .npy or JSON readers alone; never unpickled)."""
        name = self._one_name("%console_pull NAME", line)
        console = self._open_console("%console_pull")
        try:
            value = console.pull(name, max_bytes=self.max_file_bytes)
        except BridgeError as exc:
            raise one_line(exc, host_line(notebook_text(exc))) from None
        self.shell.user_ns[name] = value
        sys.stdout.write(f"{_PREFIX}{host_line(f'the session -> {name} ({type(value).__name__})')}\n")

    @staticmethod
    def _one_name(usage: str, line: str) -> str:
        words = line.split()
        if len(words) != 1 or not words[0].isidentifier():
            raise UsageError(f"usage: {usage} (one variable name)")
        return words[0]

    @staticmethod
    def _file_words(usage: str, line: str) -> tuple[str, str | None]:
        try:
            words = shlex.split(line)
        except ValueError as exc:
            raise UsageError(f"{exc}; usage: {usage}") from None
        if not 1 <= len(words) <= 2:
            raise UsageError(f"usage: {usage}")
        return words[0], (words[1] if len(words) == 2 else None)
