"""The command line's pure helpers: error detection, languages, durations, sizes, tables."""

from __future__ import annotations

import datetime as dt

import pytest

from console_bridge._errors import (
    BridgeError,
    CallTimeout,
    CellTimeout,
    ConnectionClosed,
    LaunchRefused,
    SandboxMismatch,
    ServerError,
    VersionRefused,
)
from console_bridge._results import CellResult
from console_bridge.cli._common import (
    ExitCode,
    error_text,
    exit_code_for,
    human_size,
    parse_duration,
    parse_size,
    table,
)
from console_bridge.cli._detect import chunk_output, code_error, language_for

# Outputs as mcp-console 0.0.6 returns them.
TRACEBACK = (
    'Traceback (most recent call last):\n  File "<mcp-console:python:e2>", line 1, in <module>\n'
    "ZeroDivisionError: division by zero\n"
)
SYNTAX = '  File "<mcp-console:python:e5>", line 1\n    def f(:\n          ^\nSyntaxError: invalid syntax\n'
SQL_ERROR = (
    'Error: Catalog Error: Table with name nope does not exist!\nDid you mean "pg_enum"?\n\n'
    "LINE 1: select * from nope\n                      ^^^^\n"
)
WORKER_EXIT = (
    "[worker sideband read failed: worker sideband closed]\n[worker exited with status {status}]\n"
    "[worker stopped: in-memory state lost]\n[starting new worker]\n"
)


def cell(text: str, **kwargs: object) -> CellResult:
    return CellResult(text=text, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("language", "output", "expected"),
    [
        ("python", "hello\n", None),
        ("python", TRACEBACK, "the code raised an exception"),
        ("python", "before\n" + TRACEBACK, "the code raised an exception"),
        ("python", SYNTAX, "the code has a syntax error"),
        ("python", "Error: this is only printed text\n", None),
        ("python", 'File "<mcp-console:python:e1>" is just text\n', None),
        ("sql", "answer\n------\n42\n", None),
        ("sql", SQL_ERROR, "the query failed"),
        ("r", "[1] 42\n", None),
        ("r", "Error in log(-1) : argument is not numeric\n", "the code raised an error"),
        ("r", "Error: object 'x' not found\n", "the code raised an error"),
        ("r", "Error rate: 0.1\n", None),
    ],
)
def test_code_error_from_output(language: str, output: str, expected: str | None) -> None:
    assert code_error(language, output) == expected


def test_code_error_from_the_result() -> None:
    crashed = cell(WORKER_EXIT.format(status=3), is_error=True, worker_exited=True)
    assert code_error("python", "", crashed) == "the worker exited with status 3"
    exited_cleanly = cell(WORKER_EXIT.format(status=0), is_error=True, worker_exited=True)
    assert code_error("python", "", exited_cleanly) is None
    assert code_error("python", "", cell("refused", is_error=True)) == "mcp-console returned an error result"
    assert code_error("python", "fine\n", cell("fine\n")) is None


def test_chunk_output_drops_notices() -> None:
    running = "a\n\n[elapsed: 1.0s since admission]\n[running; poll with an empty send]"
    assert chunk_output(cell(running, running=True)) == "a\n"
    assert (
        chunk_output(cell("\n[elapsed: 0.5s since admission; no new output]\n[running; poll with an empty send]")) == ""
    )
    assert chunk_output(cell("[done]")) == ""
    assert chunk_output(cell("b\n")) == "b\n"


@pytest.mark.parametrize(
    ("name", "language"),
    [("a.py", "python"), ("x/b.R", "r"), ("c.r", "r"), ("q.SQL", "sql"), ("notes.txt", None), ("Makefile", None)],
)
def test_language_for(name: str, language: str | None) -> None:
    assert language_for(name) == language


def test_exit_codes_for_library_errors() -> None:
    assert exit_code_for(LaunchRefused("x")) == ExitCode.LAUNCH == 3
    assert exit_code_for(VersionRefused("x")) == 3
    assert exit_code_for(SandboxMismatch("x")) == 3
    assert exit_code_for(CellTimeout("x")) == ExitCode.TIMEOUT == 4
    assert exit_code_for(CallTimeout("x")) == 4
    assert exit_code_for(ConnectionClosed("x")) == 1
    assert exit_code_for(ServerError("x")) == 1


def test_error_text_is_one_paragraph_unless_debug() -> None:
    exc = BridgeError("the server stopped.\nDo this.", stderr_tail="panic: line 1\nline 2")
    assert error_text(exc) == "the server stopped. Do this."
    assert "panic: line 1" in error_text(exc, debug=True)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("7d", 7 * 86400),
        ("12h", 12 * 3600),
        ("30m", 1800),
        ("45s", 45),
        ("2w", 14 * 86400),
        ("1.5d", 129600),
        ("3", 3 * 86400),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == dt.timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("text", "size"),
    [("1G", 1024**3), ("500M", 500 * 1024**2), ("10k", 10240), ("2GiB", 2 * 1024**3), ("4096", 4096), ("1.5K", 1536)],
)
def test_parse_size(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "7x", "-1d", "d", "1 2"])
def test_bad_duration_and_size(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)
    with pytest.raises(ValueError):
        parse_size(text + "q")


def test_human_size_and_table() -> None:
    assert human_size(0) == "0 B"
    assert human_size(1536) == "1.5 KB"
    assert human_size(5 * 1024**3) == "5.0 GB"
    assert table(["a", "bb"], [["xxx", "y"], ["z", "long last column"]]).splitlines() == [
        "a    bb",
        "xxx  y",
        "z    long last column",
    ]
