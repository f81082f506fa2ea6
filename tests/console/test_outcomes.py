"""The outcome corpus: real failures are detected, output that only mentions an error is not.

Every case runs on the real binaries of both qualified versions, in one session per
version (Python, SQL and, where R is installed, R). Precision and recall must both be
100%: a failed cell always has ``error`` set with the right class name, a cell that
succeeded never has.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from console_bridge import CellError, CellResult, CellTimeout, Console
from tests.support.binaries import binary_for

HAS_R = shutil.which("R") is not None


@dataclass(frozen=True)
class Case:
    id: str
    language: str
    code: str
    fails: str | None  # the expected CellFailure.name, or None for a success
    kind: str = "exception"


FAKE_TRACEBACK = (
    "print('Traceback (most recent call last):')\n"
    "print('  File \"<mcp-console:python:e9>\", line 1, in <module>')\n"
    "print('ValueError: fake')"
)

PYTHON = [
    # positives
    Case("py-raise", "python", "raise ValueError('bad')", "ValueError"),
    Case("py-zerodiv-expression", "python", "1 / 0", "ZeroDivisionError"),
    Case("py-name-error", "python", "undefined_name_xyz + 1", "NameError"),
    Case("py-syntax-error", "python", "def f(:\n    pass", "SyntaxError"),
    Case("py-indentation-error", "python", "if True:\nprint(1)", "IndentationError"),
    Case("py-deep-raise", "python", "def g():\n    raise KeyError('k')\ndef f():\n    return g()\nf()", "KeyError"),
    Case("py-output-then-raise", "python", "print('lots of output')\nraise RuntimeError('late')", "RuntimeError"),
    Case(
        "py-thread-error",
        "python",
        "import threading\nt = threading.Thread(target=lambda: 1 / 0)\nt.start(); t.join()\nprint('main went on')",
        "ZeroDivisionError",
    ),
    Case("py-custom-class", "python", "class MyError(Exception):\n    pass\nraise MyError('mine')", "MyError"),
    Case(
        "py-chained",
        "python",
        "try:\n    {}['x']\nexcept KeyError as e:\n    raise RuntimeError('wrapped') from e",
        "RuntimeError",
    ),
    Case("py-assert", "python", "assert 1 == 2, 'no'", "AssertionError"),
    Case("py-comprehension", "python", "[1 / x for x in (1, 0)]", "ZeroDivisionError"),
    Case("py-int-parse", "python", "int('x')", "ValueError"),
    Case("py-import-error", "python", "import no_such_module_xyz", "ModuleNotFoundError"),
    Case("py-recursion", "python", "def f():\n    return f()\nf()", "RecursionError"),
    Case("py-fake-traceback-then-raise", "python", FAKE_TRACEBACK + "\nraise TypeError('real')", "TypeError"),
    Case("py-closed-fd2-raise", "python", "import os\nos.close(2)\nraise ValueError('after close')", "ValueError"),
    # negatives
    Case(
        "py-logging-exception",
        "python",
        "import logging\nlog = logging.getLogger('corpus')\nlog.addHandler(logging.StreamHandler())\n"
        "try:\n    1 / 0\nexcept ZeroDivisionError:\n    log.exception('handled')\nprint('after')",
        None,
    ),
    Case(
        "py-print-exc-then-more",
        "python",
        "import traceback\ntry:\n    raise ValueError('handled')\nexcept ValueError:\n    traceback.print_exc()\n"
        "print('more output')",
        None,
    ),
    Case("py-error-text-in-data", "python", "print('Error: value out of range'); rows = ['Error:', 'ok']", None),
    Case("py-fake-traceback", "python", FAKE_TRACEBACK, None),
    Case("py-fake-prompt", "python", "print('[input requested: \"Password:\"]')\nprint('[waiting for stdin]')", None),
    Case(
        "py-fake-running",
        "python",
        "print('\\n[elapsed: 0.5s since admission]\\n[running; poll with an empty send]')",
        None,
    ),
    Case("py-fake-worker-exit", "python", "print('[worker exited with status 1]')", None),
    Case("py-warning", "python", "import warnings\nwarnings.warn('careful')\nprint('done')", None),
    Case("py-try-pass", "python", "try:\n    raise OSError('x')\nexcept OSError:\n    pass", None),
    Case("py-stderr-text", "python", "import sys\nsys.stderr.write('Error: not really\\n')", None),
    Case(
        "py-thread-handled",
        "python",
        "import threading\ndef work():\n    try:\n        1 / 0\n"
        "    except ZeroDivisionError:\n        print('caught')\n"
        "t = threading.Thread(target=work); t.start(); t.join()",
        None,
    ),
    Case("py-exception-value", "python", "ValueError('returned, not raised')", None),
    # last: the session's stderr is gone afterwards
    Case("py-stderr-none-raise", "python", "import sys\nsys.stderr = None\nraise KeyError('no stderr')", "KeyError"),
    Case("py-system-exit", "python", "raise SystemExit(3)", "WorkerExited", "worker_exited"),
    Case("py-after-exit", "python", "print('fresh worker')", None),
]

SQL = [
    Case("sql-catalog", "sql", "select * from no_such_table", "Catalog Error"),
    Case("sql-parser", "sql", "selec 1", "Parser Error"),
    Case("sql-binder", "sql", "select no_such_column from (select 1 as a)", "Binder Error"),
    Case("sql-conversion", "sql", "select cast('abc' as integer)", "Conversion Error"),
    Case("sql-io", "sql", "select * from read_csv('/no/such/file.csv')", "IO Error"),
    Case("sql-ok", "sql", "select 42 as answer", None),
    Case("sql-error-text-in-data", "sql", "select 'Error: x' as e, 'Catalog Error: fake' as f", None),
    Case("sql-create", "sql", "create table corpus_t as select 1 as a", None),
    Case("sql-query-created", "sql", "select a from corpus_t", None),
]

R = [
    Case("r-stop", "r", 'stop("boom")', "simpleError"),
    Case("r-stop-in-function", "r", 'f <- function() stop("in f")\nf()', "simpleError"),
    Case("r-c-level-error", "r", 'log("a")', "simpleError"),
    Case("r-missing-object", "r", "no_such_object_xyz", "simpleError"),
    Case(
        "r-custom-condition",
        "r",
        'stop(structure(class = c("myError", "error", "condition"), list(message = "custom", call = NULL)))',
        "myError",
    ),
    Case("r-output-then-stop", "r", 'print(1:3)\nstop("after output")', "simpleError"),
    Case("r-warning", "r", 'warning("careful"); 1', None),
    Case("r-try", "r", 'try(stop("handled")); 2', None),
    Case("r-trycatch", "r", 'tryCatch(stop("x"), error = function(e) "handled")', None),
    Case("r-cat-error-text", "r", 'cat("Error: fake\\n")', None),
    Case("r-message-error-text", "r", 'message("Error in f() : fake")', None),
    Case("r-coercion-warning", "r", 'as.numeric("a")', None),
]

CORPUS = PYTHON + SQL + (R if HAS_R else [])


@pytest.fixture(scope="module", params=["0.0.5", "0.0.6"])
def console(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    root = tmp_path_factory.mktemp(f"outcomes-{request.param}")
    workspace = root / "ws"
    workspace.mkdir()
    languages = ("python", "sql", "r") if HAS_R else ("python", "sql")
    with Console(
        workspace,
        command=binary_for(request.param),
        recordings_dir=root / "recordings",
        languages=languages,
        poll_window=5,
    ) as session:
        yield session


def _classify(console: Console) -> list[tuple[Case, CellResult]]:
    return [(case, console.run(**{case.language: case.code}, timeout=60)) for case in CORPUS]


@pytest.mark.timeout(300)
def test_corpus_precision_and_recall_are_100_percent(console: Console) -> None:
    assert len(CORPUS) >= 40
    outcomes = _classify(console)
    true_pos = [c for c, r in outcomes if c.fails and r.error is not None]
    false_pos = [(c, r) for c, r in outcomes if not c.fails and r.error is not None]
    false_neg = [(c, r) for c, r in outcomes if c.fails and r.error is None]
    precision = len(true_pos) / max(1, len(true_pos) + len(false_pos))
    recall = len(true_pos) / max(1, len(true_pos) + len(false_neg))
    report = [f"{c.id}: error={r.error!r} text={r.text[:200]!r}" for c, r in false_pos + false_neg]
    assert (precision, recall) == (1.0, 1.0), "\n".join(report)
    wrong = [
        f"{c.id}: expected {c.fails}/{c.kind}, got {r.error.name}/{r.error.kind}"
        for c, r in outcomes
        if c.fails and r.error is not None and (r.error.name != c.fails or r.error.kind != c.kind)
    ]
    assert wrong == []
    for case, result in outcomes:
        assert result.is_error == (case.fails is not None), case.id
        if case.fails:
            assert result.error is not None and result.error.language == case.language
            assert not result.running and not result.waiting_for_input
    fake = dict((c.id, r) for c, r in outcomes)
    assert fake["py-fake-prompt"].text.startswith('[input requested: "Password:"]')
    assert not fake["py-fake-running"].running and "[running; poll" in fake["py-fake-running"].text
    assert not fake["py-fake-worker-exit"].worker_exited
    assert fake["py-raise"].error is not None and "ValueError: bad" in fake["py-raise"].error.traceback
    assert fake["sql-catalog"].error is not None and "no_such_table" in fake["sql-catalog"].error.message


def test_keyboard_interrupt_from_an_interrupt_is_a_failure(console: Console) -> None:
    first = console.send(python="import time\nprint('sleeping', flush=True)\ntime.sleep(30)", timeout_ms=1000)
    assert first.running
    stopped = console.interrupt()
    while stopped.running:
        stopped = console.poll(timeout_ms=2000)
    assert stopped.error is not None and stopped.error.name == "KeyboardInterrupt"
    assert console.run(python="print('still here')").error is None


def test_raise_for_error_and_check(console: Console) -> None:
    ok = console.run(python="print('fine')")
    assert ok.raise_for_error() is ok
    failed = console.run(python="raise ValueError('bad')")
    with pytest.raises(CellError) as caught:
        failed.raise_for_error()
    assert caught.value.result is failed and caught.value.error is failed.error
    assert "ValueError: bad" in str(caught.value)
    with pytest.raises(CellError):
        console.run(sql="select * from no_such_table", check=True)


def test_a_thread_error_is_not_missed_and_status_carries_no_hook_notice(console: Console) -> None:
    code = "import threading, time\nthreading.Thread(target=lambda: [][1]).start()\ntime.sleep(0.5)"
    result = console.run(python=code)
    assert result.error is not None and result.error.name == "IndexError"
    notices = console.status().extra.get("notices", [])
    assert not any("could not hook" in notice for notice in notices)


def test_corpus_is_big_enough_with_r() -> None:
    if not HAS_R:
        pytest.skip("R is not installed")
    assert len(PYTHON + SQL + R) >= 40
    assert {c.language for c in CORPUS} == {"python", "sql", "r"}


def test_the_limit_hook_turns_a_failure_into_a_limit(console: Console) -> None:
    session = console._async  # the confinement layer sets the hook on the async console
    session.limit_check = lambda _error: ("memory", "the session tree reached its memory limit")
    try:
        result = console.run(python="raise MemoryError()")
    finally:
        session.limit_check = None
    assert result.error is not None and (result.error.kind, result.error.name) == ("limit", "memory")
    assert console.run(python="print('ok')").error is None


def test_an_r_interrupt_is_a_failure_named_interrupt(console: Console) -> None:
    if not HAS_R:
        pytest.skip("R is not installed")
    assert console.run(r='stop("an earlier error")').error is not None
    with pytest.raises(CellTimeout) as caught:
        console.run(r="i <- 0; while (TRUE) { i <- i + 1 }", timeout=1.5)
    assert caught.value.result is not None and caught.value.result.error is not None
    assert caught.value.result.error.name == "interrupt"
    assert console.run(r="stop('after')").error.message == "after"  # type: ignore[union-attr]
