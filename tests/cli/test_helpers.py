"""The command line's pure helpers: error detection, languages, durations, sizes, tables."""

from __future__ import annotations

import datetime as dt

import pytest

from console_bridge._cells._outcome import limit_failure, worker_exited_failure
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
from console_bridge._results import CellFailure, CellResult
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


def cell(text: str, **kwargs: object) -> CellResult:
    return CellResult(text=text, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "text",
    [
        'Traceback (most recent call last):\n  File "<mcp-console:python:e2>", line 1\nZeroDivisionError: x\n',
        "Error: Catalog Error: Table with name nope does not exist!\n",
        "Error in log(-1) : argument is not numeric\n",
    ],
)
def test_code_error_never_reads_the_text(text: str) -> None:
    assert code_error(cell(text)) is None


def test_code_error_from_the_failure() -> None:
    raised = cell("", error=CellFailure("python", "ZeroDivisionError", "division by zero"))
    assert code_error(raised) == "the code raised: ZeroDivisionError: division by zero"
    query = cell("", error=CellFailure("sql", "Catalog Error", "Table with name nope does not exist!\nDid you"))
    assert code_error(query) == "the query failed: Catalog Error: Table with name nope does not exist!"
    r_error = cell("", error=CellFailure("r", "simpleError", "boom"))
    assert code_error(r_error) == "the code raised an error: simpleError: boom"
    crashed = cell("", is_error=True, worker_exited=True, error=worker_exited_failure("python", 3))
    assert code_error(crashed) is not None and "status 3" in code_error(crashed)  # type: ignore[operator]
    limit = cell("", error=limit_failure("memory", "python"))
    assert code_error(limit) is not None and "memory limit" in code_error(limit)  # type: ignore[operator]
    assert code_error(cell("", is_error=True, worker_exited=True)) is None  # sys.exit(0)
    assert code_error(cell("refused", is_error=True)) == "mcp-console returned an error result"
    assert code_error(cell("fine\n")) is None


def test_chunk_output_is_the_chunk_text() -> None:
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
    assert human_size(1536) == "1.5 KiB"
    assert human_size(5 * 1024**3) == "5.0 GiB"
    assert table(["a", "bb"], [["xxx", "y"], ["z", "long last column"]]).splitlines() == [
        "a    bb",
        "xxx  y",
        "z    long last column",
    ]
