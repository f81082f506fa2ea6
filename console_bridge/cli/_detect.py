"""Pure helpers for ``run``: a file's language, the output of a chunk, and whether a cell failed.

Whether a cell failed is never read from its text: a cell can print a fake traceback,
and a handled exception logged with ``logging.exception`` is not a failure. ``run``
uses ``CellResult.error``, which the worker's own hooks report (see
``console_bridge/_cells/_outcome.py``), and ``is_error`` (a server error result).
"""

from __future__ import annotations

from pathlib import PurePath

from console_bridge._results import CellResult

__all__ = ["EXTENSIONS", "OMITTED_MARK", "chunk_output", "code_error", "language_for"]

EXTENSIONS = {".py": "python", ".r": "r", ".sql": "sql"}


def language_for(name: str) -> str | None:
    """The language of a file from its extension (``.py``, ``.R``/``.r``, ``.sql``), else None."""
    return EXTENSIONS.get(PurePath(name).suffix.lower())


#: How mcp-console says a poll's window left out the middle of the output.
OMITTED_MARK = "[output omitted: "


def chunk_output(chunk: CellResult) -> str:
    """A chunk's output, stdout or stderr (the library has already moved the server's notices into fields)."""
    return chunk.text + chunk.stderr


def code_error(result: CellResult) -> str | None:
    """Why the cell counts as failed (a short phrase), or None when it succeeded."""
    error = result.error
    if error is not None:
        if error.kind == "worker_exited":
            return error.message
        if error.kind == "limit":
            return f"stopped at the {error.name} limit ({error.message})"
        what = {"sql": "the query failed", "r": "the code raised an error"}.get(error.language, "the code raised")
        message = error.message.strip().splitlines()[0] if error.message.strip() else ""
        return f"{what}: {error.name}" + (f": {message}" if message else "")
    if result.is_error and not result.worker_exited:  # a worker that exited with status 0 is fine
        return "mcp-console returned an error result"
    return None
