"""``console-bridge run``: tracebacks name the file each frame's code came from, not the worker's
cell name. mcp-console compiles every Python cell as ``<mcp-console:python:eN>`` (N counts the worker's
Python cells) and cannot be told another name, so the host renames the frames when it maps a cell's
output: ``File "<mcp-console:python:e4>", line 3, in <module>`` becomes ``File "three.py", line 3, in
<module>``. The line numbers are already the file's (a notebook's cells keep theirs, see
``_run_notebook``).

IPython in the worker (issue 47) labels a cell by its execution count instead: ``Cell In[4], line 3``
becomes ``File "three.py", line 3``. Each Python file is one cell of a fresh session's history, so
``In[k]`` is the k-th Python file.

Which N is which file is learnt from the output itself: only the running cell's module code can be on
the stack, so a ``<module>`` frame (or a syntax error's location, which has no function) names the
running cell; every Python cell of the run is one file, sent in order, so the earlier files are the
numbers before it. Until a cell shows one, names stay as the worker printed them. Renaming only changes
text shown and kept; nothing read here is ever run on the host.
"""

from __future__ import annotations

import dataclasses
import re

from console_bridge._results import CellResult

__all__ = ["CellNames"]

_FRAME = re.compile(r'^\s*File "<mcp-console:python:e(?P<n>\d+)>", line \d+(?:, in (?P<fn>.*))?$')
_TOKEN = re.compile(r"<mcp-console:python:e(\d+)>")
#: a syntax error's message names the running cell: ``incomplete input (<mcp-console:python:e3>, line 2)``
_SYNTAX = re.compile(r"\(<mcp-console:python:e(?P<n>\d+)>, line \d+\)")
_CELL = re.compile(r"Cell In\[(\d+)\], line (\d+)")
_CELL_START = "Cell In["
_NAME_START = "<mcp-console:python:e"
_FRAME_START = '  File "<mcp-console:python:e'


def _partial_name(text: str) -> bool:
    """Whether ``text`` is the start of a cell's name that the next chunk completes."""
    if _NAME_START.startswith(text):
        return True
    return text.startswith(_NAME_START) and text[len(_NAME_START) :].isdigit()


class CellNames:
    """The run's Python files in the order they were sent, and the worker's number of the first one."""

    def __init__(self) -> None:
        self._files: list[str] = []
        self._first: int | None = None  # N of the first Python file's cell, once a traceback showed it
        self._carry = ""  # what a chunk cut (a frame line, a name) kept until its end arrives

    def begin(self, name: str, language: str) -> None:
        """A file is about to run (as the next cell of its language)."""
        self._carry = ""
        if language == "python":
            self._files.append(name)

    def _learn(self, line: str) -> None:
        match = _FRAME.match(line.rstrip("\r\n"))
        if match is not None and match["fn"] in (None, "<module>"):  # the running cell (its module code, or its syntax)
            first = int(match["n"]) - (len(self._files) - 1)
            if first >= 1:
                self._first = first

    def _name(self, match: re.Match[str]) -> str:
        index = None if self._first is None else int(match[1]) - self._first
        return self._files[index] if index is not None and 0 <= index < len(self._files) else match[0]

    def _cell(self, match: re.Match[str]) -> str:
        index = int(match[1]) - 1
        if not 0 <= index < len(self._files):
            return match[0]
        return f'File "{self._files[index]}", line {match[2]}'

    def text(self, text: str) -> str:
        """``text`` (a whole output, a traceback, a message) with the cells' names replaced by their files'."""
        if self._files and _CELL_START in text:
            text = _CELL.sub(self._cell, text)
        if "<mcp-console:python:e" not in text or not self._files:
            return text
        for line in text.splitlines():
            if "File" in line:
                self._learn(line)
        syntax = _SYNTAX.search(text)
        if syntax is not None and int(syntax["n"]) - (len(self._files) - 1) >= 1:
            self._first = int(syntax["n"]) - (len(self._files) - 1)
        return _TOKEN.sub(self._name, text)

    def stream(self, chunk: str) -> str:
        """A streamed chunk renamed; what the chunk cuts (a frame line, a name) is held back until its end
        arrives (or ``flush``)."""
        text, self._carry = self._carry + chunk, ""
        line_start = text.rfind("\n") + 1
        rest = text[line_start:]
        if rest and any(rest.startswith(start) or start.startswith(rest) for start in (_FRAME_START, _CELL_START)):
            cut = line_start
        else:
            cut = text.rfind("<")
            if cut < 0 or not _partial_name(text[cut:]):
                cut = len(text)
        self._carry = text[cut:]
        return self.text(text[:cut])

    def flush(self) -> str:
        """What a chunk left held back (the cell ended, or an image marker follows)."""
        rest, self._carry = self._carry, ""
        return self.text(rest)

    def result(self, result: CellResult) -> CellResult:
        """The cell's result with its text, stderr, segments and failure's traceback renamed."""
        error = result.error
        if error is not None:
            error = dataclasses.replace(error, message=self.text(error.message), traceback=self.text(error.traceback))
        return dataclasses.replace(
            result,
            text=self.text(result.text),
            stderr=self.text(result.stderr),
            segments=tuple((stream, self.text(part)) for stream, part in result.segments),
            error=error,
        )
