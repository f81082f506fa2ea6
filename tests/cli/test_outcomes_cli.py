"""``console-bridge run`` exit statuses come from the cell's reported outcome, never from its text."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import Runner, write

pytestmark = pytest.mark.console

HANDLED = """\
import logging, traceback
logging.basicConfig()
try:
    1 / 0
except ZeroDivisionError:
    logging.exception("handled, and logged")
try:
    raise ValueError("printed, handled")
except ValueError:
    traceback.print_exc()
print("Error: only data")
print('Traceback (most recent call last):\\n  File "x", line 1\\nValueError: fake')
print("still fine")
"""


def _errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("console-bridge:")]


def test_handled_exceptions_and_fake_text_exit_0(cb: Runner, tmp_path: Path) -> None:
    write(tmp_path, "handled.py", HANDLED)
    proc = cb("run", "--recordings-dir", str(tmp_path / "recs"), "handled.py")
    assert proc.returncode == 0, proc.stderr
    assert "handled, and logged" in proc.stderr + proc.stdout and "still fine" in proc.stdout


def test_a_fake_input_notice_is_output_not_a_prompt(cb: Runner, tmp_path: Path) -> None:
    write(
        tmp_path, "fake.py", 'print(\'[input requested: "Password:"]\')\nprint("[waiting for stdin]")\nprint("after")\n'
    )
    proc = cb("run", "--recordings-dir", str(tmp_path / "recs"), "fake.py")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == '[input requested: "Password:"]\n[waiting for stdin]\nafter\n'
    assert "asked for input" not in proc.stderr


@pytest.mark.parametrize(
    "code",
    [
        "import os\nos.close(2)\nraise ValueError('after closing stderr')\n",
        "import sys\nsys.stderr = None\nraise ValueError('after dropping stderr')\n",
    ],
)
def test_a_raise_without_stderr_still_exits_1(cb: Runner, tmp_path: Path, code: str) -> None:
    write(tmp_path, "quiet.py", code)
    proc = cb("run", "--recordings-dir", str(tmp_path / "recs"), "quiet.py")
    assert proc.returncode == 1, proc.stderr
    [error] = _errors(proc.stderr)
    assert "quiet.py" in error and "ValueError" in error and "stderr" in error


def test_sql_error_exits_1_and_error_text_in_data_exits_0(cb: Runner, tmp_path: Path) -> None:
    write(tmp_path, "bad.sql", "select * from no_such_table")
    write(tmp_path, "ok.sql", "select 'Error: x' as e")
    bad = cb("run", "--recordings-dir", str(tmp_path / "recs"), "bad.sql")
    assert bad.returncode == 1 and "Catalog Error" in _errors(bad.stderr)[0]
    ok = cb("run", "--recordings-dir", str(tmp_path / "recs"), "ok.sql")
    assert ok.returncode == 0, ok.stderr


def test_timeout_does_not_count_startup(cb: Runner, tmp_path: Path) -> None:
    write(tmp_path, "quick.py", "print('quick')\n")
    # Startup (server, worker, environment discovery) takes 0.3-0.5 s here, a print a few ms: 0.25 s
    # fails if the start counts, and leaves a loaded machine room for the cell itself.
    proc = cb("run", "--recordings-dir", str(tmp_path / "recs"), "--timeout", "0.25", "quick.py")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "quick\n"


def test_a_file_that_never_started_says_so(cb: Runner, tmp_path: Path) -> None:
    write(tmp_path, "slow_start.py", "print('never')\n")
    # (a whole start is 0.3-0.5 s here now: mcp-console's discovery, sandbox and worker boot alone
    # take more than 0.15 s, so 0.05 s always ends in the probe or before it)
    proc = cb("run", "--recordings-dir", str(tmp_path / "recs"), "--startup-timeout", "0.05", "slow_start.py")
    assert proc.returncode == 4, proc.stderr
    [error] = _errors(proc.stderr)
    assert "still running" not in error
    assert "never started" in error or "startup" in error


def test_usage_mistakes_exit_2(cb: Runner, tmp_path: Path) -> None:
    write(tmp_path, "x.py", "print(1)\n")
    profile = cb("run", "--profile", "no-such-profile", "x.py")
    assert profile.returncode == 2 and "--profile" in profile.stderr
    root = cb("run", "--writable-root", str(tmp_path / "missing"), "x.py")
    assert root.returncode == 2 and "not an existing folder" in root.stderr
    # the same kind of mistake, the same exit (issue 31: these exited 3)
    read_root = cb("run", "--read-root", str(tmp_path / "missing"), "x.py")
    assert read_root.returncode == 2 and "--read-root" in read_root.stderr, read_root.stderr
    assert "not an existing folder" in read_root.stderr
    python = cb("run", "--python", str(tmp_path / "no-venv"), "x.py")
    assert python.returncode == 2 and "python3 -m venv" in python.stderr
    nan = cb("run", "--timeout", "nan", "x.py")
    assert nan.returncode == 2 and "not a finite number" in nan.stderr
    path = cb("run", "--env", "PATH=/opt/x", "x.py")
    assert path.returncode == 2 and "PATH is set by the session" in path.stderr
    assert not (tmp_path / "xdg-data").exists()


def test_project_config_refusal_names_the_flag(cb: Runner, tmp_path: Path) -> None:
    write(tmp_path, "x.py", "print(1)\n")
    config = tmp_path / ".agents" / "console"
    config.mkdir(parents=True)
    (config / "config.yaml").write_text("sandbox:\n  network: restricted\n")
    proc = cb("run", "x.py")
    assert proc.returncode == 3 and "--project-config" in proc.stderr


def test_a_file_that_tampers_with_the_outcome_log_fails_the_run(cb: Runner, tmp_path: Path) -> None:
    """Issue 30: ``os.remove(log); os.mkdir(log)`` made every later failing file a success ("3/3 files ok")."""
    write(
        tmp_path,
        "a.py",
        "import glob, os\n"
        "log = glob.glob(os.path.join(os.environ['TMPDIR'], '.console-bridge-*', 'outcomes.jsonl'))[0]\n"
        "os.remove(log)\nos.mkdir(log)\n",
    )
    write(tmp_path, "b.py", "raise ValueError('a failure that must not pass')\n")
    write(tmp_path, "c.sql", "select * from no_such_table;\n")
    proc = cb("run", "--recordings-dir", str(tmp_path / "recs"), "a.py", "b.py", "c.sql")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    errors = _errors(proc.stderr)
    assert any("a.py" in line and "tampered" in line for line in errors), proc.stderr
    assert "3/3 files ok" not in proc.stderr + proc.stdout


def test_the_report_carries_each_files_structured_failure_and_usage(cb: Runner, tmp_path: Path) -> None:
    """Issue 31, item 6: report.json had a bare-string error and no usage."""
    import json

    write(tmp_path, "ok.py", "x = bytearray(32 << 20)\nprint(len(x))\n")
    write(tmp_path, "bad.py", "def f():\n    raise KeyError('missing')\nf()\n")
    proc = cb("run", "--recordings-dir", "recs", "--artifacts", "out", "ok.py", "bad.py")
    assert proc.returncode == 1, proc.stderr
    files = json.loads((tmp_path / "out" / "report.json").read_text())["files"]
    assert files[0]["failure"] is None and files[0]["usage"]["wall_seconds"] > 0
    assert files[0]["usage"]["cpu_seconds"] is not None
    failure = files[1]["failure"]
    assert failure["name"] == "KeyError" and failure["kind"] == "exception" and "missing" in failure["message"]
    assert "line 2" in failure["traceback"] and "line 3" in failure["traceback"], failure["traceback"]


def test_tracebacks_name_the_files_and_their_lines(cb: Runner, tmp_path: Path) -> None:
    """Issue 31, item 6: tracebacks named the worker's cells (``<mcp-console:python:eN>``), not the files.
    A frame of a function an earlier file defined names that file; a SQL file in between takes no number."""
    import json

    write(tmp_path, "one.py", "def f1():\n    raise ValueError('in one')\n")
    write(tmp_path, "q.sql", "select 1 as x;\n")
    write(tmp_path, "two.py", "x = 2\ndef f2():\n    f1()\n")
    write(tmp_path, "three.py", "\n\nf2()\n")
    proc = cb("run", "--recordings-dir", "recs", "--artifacts", "out", "one.py", "q.sql", "two.py", "three.py")
    assert proc.returncode == 1, proc.stderr
    expected = [  # (IPython's frames: the module's has no function, a function's has its parentheses)
        'File "three.py", line 3',
        'File "two.py", line 3, in f2()',
        'File "one.py", line 2, in f1()',
    ]
    traceback = json.loads((tmp_path / "out" / "report.json").read_text())["files"][-1]["failure"]["traceback"]
    output = (tmp_path / "out" / "output.txt").read_text()
    for text in (proc.stdout, traceback, output):
        frames = [line.strip() for line in text.splitlines() if line.strip().startswith("File ")]
        assert frames == expected, text
        assert "mcp-console:python" not in text

    write(tmp_path, "syntax.py", "x = 1\ny = (\n")
    proc = cb("run", "--recordings-dir", "recs", "one.py", "syntax.py")
    assert proc.returncode == 1, proc.stderr
    assert 'File "syntax.py", line 2' in proc.stdout, proc.stdout
    assert "mcp-console:python" not in proc.stdout + proc.stderr, proc.stderr
