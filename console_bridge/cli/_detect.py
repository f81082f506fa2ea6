"""Pure helpers for ``run``: a file's language, the output of a chunk, and whether a cell failed.

mcp-console returns a Python traceback, an R error or a SQL error as ordinary output
(``isError`` is false), so ``run`` decides from the text, per language:

- Python: a line ``Traceback (most recent call last):``, or a syntax error report (a line
  ``File "<mcp-console:...>"`` followed by ``SyntaxError``/``IndentationError``/``TabError``).
  A handled exception printed with ``traceback.print_exc()`` counts too.
- R: a line ``Error in ... :`` or ``Error: ...`` (how R reports an uncaught error).
- SQL: the same ``Error: ...`` line (how DuckDB's errors come back).

Any language: an error result (``is_error``), or the worker exiting with a non-zero status.
"""

from __future__ import annotations

import re
from pathlib import PurePath

from console_bridge._console._cells import read_notices
from console_bridge._results import CellResult

__all__ = ["EXTENSIONS", "chunk_output", "code_error", "language_for"]

EXTENSIONS = {".py": "python", ".r": "r", ".sql": "sql"}
_DONE = "[done]"
_TRACEBACK = "Traceback (most recent call last):"
_CELL_FRAME = re.compile(r'^\s+File "<mcp-console:[^>]*>", line \d+')
_SYNTAX = re.compile(r"^(SyntaxError|IndentationError|TabError)\b")
_R_ERROR = re.compile(r"^Error(?: in .+?)?\s*:")


def language_for(name: str) -> str | None:
    """The language of a file from its extension (``.py``, ``.R``/``.r``, ``.sql``), else None."""
    return EXTENSIONS.get(PurePath(name).suffix.lower())


def chunk_output(chunk: CellResult) -> str:
    """A chunk's output with mcp-console's status notices (and a bare ``[done]``) removed."""
    output = read_notices(chunk.text).output
    return "" if output.strip() == _DONE else output


def code_error(language: str, output: str, result: CellResult | None = None) -> str | None:
    """Why the cell counts as failed (a short phrase), or None when it succeeded."""
    if result is not None:
        notice = read_notices(result.text)
        if result.worker_exited or notice.worker_exited:
            status = notice.exit_status
            if status is None or status != 0:
                return f"the worker exited with status {status if status is not None else 'unknown'}"
        elif result.is_error:
            return "mcp-console returned an error result"
    lines = output.splitlines()
    if language == "python":
        if any(line.startswith(_TRACEBACK) for line in lines):
            return "the code raised an exception"
        for index, line in enumerate(lines):
            if _CELL_FRAME.match(line) and any(_SYNTAX.match(later) for later in lines[index + 1 :]):
                return "the code has a syntax error"
        return None
    if any(_R_ERROR.match(line) for line in lines):
        return "the code raised an error" if language == "r" else "the query failed"
    return None
