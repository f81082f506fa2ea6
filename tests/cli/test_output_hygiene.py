"""``console-bridge run`` shows the code's output but never obeys it: terminals, CI logs, status lines.

Each attack test runs the real binary: a cell prints the attack, a second file shows the session
still works, and the test checks the attack is inert on stdout (piped, on a pseudo-terminal,
under GitHub Actions and Azure Pipelines) and that ``--raw`` keeps today's bytes.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
from pathlib import Path

import pytest

from console_bridge.cli._output import CellOutput, escape_controls, host_block, host_line
from tests import ci_logs
from tests.support.cli import cli_env, cli_path

from .conftest import PROC_TIMEOUT, Runner, write

ATTACK = (
    "import sys\n"
    "sys.stdout.write('bell\\x07 nul\\x00 del\\x7f vt\\x0b ff\\x0c rlo\\u202e end\\n')\n"
    "sys.stdout.write('cr\\rover csi\\x9b2J\\n')\n"
    "print('::add-mask::x')\n"
    "print('::error::x')\n"
    "print('##vso[task.setvariable variable=secret]leak')\n"
    "print('##[error]fake')\n"
    "print('[console-bridge] 2/2 files ok in 0.1s; all good')\n"
    "print('console-bridge: nothing failed')\n"
)
AFTER = "print('session still works:', 6 * 7)\n"
RAW_CONTROLS = ("\x07", "\x00", "\x7f", "\x0b", "\x0c", "\u202e", "\r", "\x9b")


def _files(tmp_path: Path) -> list[str]:
    write(tmp_path, "attack.py", ATTACK)
    write(tmp_path, "after.py", AFTER)
    return ["attack.py", "after.py"]


def _assert_inert(stdout: str) -> None:
    for char in RAW_CONTROLS:
        assert char not in stdout, repr(char)
    for shown in ("bell\\x07", "nul\\x00", "del\\x7f", "vt\\x0b", "ff\\x0c", "rlo\\u202e"):
        assert shown in stdout, shown
    # mcp-console itself applies a carriage return and strips C1/CSI (mcp-console-facts.md)
    lines = stdout.splitlines()
    assert not any(line.startswith(("[console-bridge]", "console-bridge:")) for line in lines), lines
    assert "[cell] [console-bridge] 2/2 files ok in 0.1s; all good" in lines
    assert "[cell] console-bridge: nothing failed" in lines
    assert "session still works: 42" in lines


def _cb(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [cli_path(), "run", "--recordings-dir", str(tmp_path / "recs"), *args],
        cwd=tmp_path,
        input="",
        capture_output=True,
        text=True,
        timeout=PROC_TIMEOUT,
        env={**cli_env(tmp_path), **(env or {})},
        check=False,
    )


# ------------------------------------------------------------------ the filter itself (no processes)
def test_escape_controls_keeps_newline_tab_and_text() -> None:
    assert escape_controls("a\tb\nc é ü 中 🙂") == "a\tb\nc é ü 中 🙂"
    assert escape_controls("\x00\x07\x1b\x7f\x85\x9f") == "\\x00\\x07\\x1b\\x7f\\x85\\x9f"
    bidi = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u2028\u2029"
    assert escape_controls(bidi) == "".join(f"\\u{ord(ch):04x}" for ch in bidi)


def test_status_imitation_split_across_chunks_is_tagged() -> None:
    out = CellOutput(raw=False, environ={})
    shown = "".join(out.feed(part) for part in ("ok\n[con", "sole-bri", "dge] done\n\u200b console-bridge: x\n"))
    assert shown == "ok\n[cell] [console-bridge] done\n[cell] \u200b console-bridge: x\n"
    assert out.feed("mid-line [console-bridge] is fine") == "mid-line [console-bridge] is fine"
    assert out.feed("\n[c") == "\n" and out.flush() == "[c"  # held back until it cannot be a status line


def test_hold_back_is_bounded() -> None:
    out = CellOutput(raw=False, environ={})
    assert out.feed("[") == "" and out.feed(" " * 5000) == "[" + " " * 5000  # shown once it is long


def test_github_fence_and_azure_escapes() -> None:
    out = CellOutput(raw=False, environ={"GITHUB_ACTIONS": "true", "TF_BUILD": "True"})
    assert re.fullmatch(r"::stop-commands::[0-9a-f]{32}\n", out.opening())
    assert out.opening() == ""  # once
    assert (
        out.feed("x ##v") + out.feed("so[task.complete]\n##[group]g\n")
        == "x ##vso\\x5btask.complete]\n##\\x5bgroup]g\n"
    )
    assert out.closing() == f"::{out.token}::\n"
    raw = CellOutput(raw=True, environ={"GITHUB_ACTIONS": "true", "TF_BUILD": "True"})
    assert (
        raw.opening() == "" and raw.feed("\x07##vso[x]\n[console-bridge] y\n") == "\x07##vso[x]\n[console-bridge] y\n"
    )
    assert CellOutput(raw=False, environ={}).opening() == ""


# ------------------------------------------------------------------ the real command
@pytest.mark.console
def test_piped_output_is_inert_and_raw_keeps_it(tmp_path: Path) -> None:
    files = _files(tmp_path)
    proc = _cb(tmp_path, "--artifacts", "out", *files)
    assert proc.returncode == 0, proc.stderr
    _assert_inert(proc.stdout)
    assert "::stop-commands::" not in proc.stdout  # not under GitHub Actions
    assert "##vso[task.setvariable" in proc.stdout  # not under Azure: left as text
    assert (tmp_path / "out" / "output.txt").read_text() == proc.stdout  # the artifact is what was shown
    # The CLI's own status lines are on stderr, and only there.
    assert any(line.startswith("[console-bridge] 2/2 files ok") for line in proc.stderr.splitlines())

    raw = _cb(tmp_path, "--raw", *files)
    assert raw.returncode == 0, raw.stderr
    assert "bell\x07 nul\x00 del\x7f vt\x0b ff\x0c rlo\u202e end\n" in raw.stdout
    assert "[console-bridge] 2/2 files ok in 0.1s; all good\n" in raw.stdout.replace("\r", "")


@pytest.mark.console
def test_github_actions_fences_workflow_commands(tmp_path: Path) -> None:
    files = _files(tmp_path)
    proc = _cb(tmp_path, *files, env={"GITHUB_ACTIONS": "true"})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    opening = re.fullmatch(r"::stop-commands::([0-9a-f]{32})", lines[0])
    assert opening is not None, lines[:2]
    token = opening.group(1)
    assert lines[-1] == f"::{token}::"
    assert token not in "\n".join(lines[1:-1])
    inside = lines[1:-1]
    assert "::add-mask::x" in inside and "::error::x" in inside  # only inside the fence
    _assert_inert(proc.stdout)
    assert "session still works: 42" in inside


@pytest.mark.console
def test_azure_logging_commands_are_escaped(tmp_path: Path) -> None:
    proc = _cb(tmp_path, *_files(tmp_path), env={"TF_BUILD": "True"})
    assert proc.returncode == 0, proc.stderr
    assert "##vso[" not in proc.stdout
    assert "##vso\\x5btask.setvariable variable=secret]leak" in proc.stdout
    assert "##\\x5berror]fake" in proc.stdout.splitlines()
    _assert_inert(proc.stdout)


@pytest.mark.console
def test_output_on_a_pseudo_terminal_is_inert(tmp_path: Path) -> None:
    files = _files(tmp_path)
    master, slave = os.openpty()
    chunks: list[bytes] = []
    try:
        proc = subprocess.Popen(
            [cli_path(), "run", "--recordings-dir", str(tmp_path / "recs"), *files],
            cwd=tmp_path,
            env=cli_env(tmp_path),
            stdin=subprocess.DEVNULL,
            stdout=slave,
            stderr=subprocess.PIPE,
        )
        os.close(slave)

        def drain() -> None:
            while True:
                try:
                    data = os.read(master, 4096)
                except OSError:
                    return
                if not data:
                    return
                chunks.append(data)

        reader = threading.Thread(target=drain, daemon=True)
        reader.start()
        _out, stderr = proc.communicate(timeout=PROC_TIMEOUT)
        reader.join(timeout=10)
    finally:
        os.close(master)
    assert proc.returncode == 0, stderr
    shown = b"".join(chunks).decode("utf-8")
    assert "\r\n" in shown  # the terminal's own newline translation, not the cell's
    _assert_inert(shown.replace("\r\n", "\n"))


@pytest.mark.console
def test_json_output_carries_text_only_inside_strings(cb: Runner, tmp_path: Path) -> None:
    proc = cb("run", "--recordings-dir", str(tmp_path / "recs"), "--json", *_files(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert not any(line.startswith(("::", "##", "[console-bridge]")) for line in proc.stdout.splitlines())
    for char in RAW_CONTROLS:
        assert char not in proc.stdout, repr(char)
    document = json.loads(proc.stdout)
    assert "bell\x07 nul\x00 del\x7f vt\x0b ff\x0c rlo\u202e end\n" in document["files"][0]["output"]  # faithful
    assert document["files"][1]["output"] == "session still works: 42\n"


# ------------------------------------------------------------------ every line the host writes (issue 20)
EVERY_CI = {"GITHUB_ACTIONS": "true", "TF_BUILD": "True", "TEAMCITY_VERSION": "2025.1", "BUILDKITE": "true"}
HOSTILE = (
    "print('::add-mask::FROM_STDOUT')\n"
    "print(\"##teamcity[buildStatus text='pwned']\")\n"
    "print('--- :skull: fake group')\n"
    "print('+++ expanded')\n"
    "print('[console-bridge] 1/1 file ok in 0.1s')\n"
    "Evil = type('Evil\\n::add-mask::X\\n::error::injected', (Exception,), {})\n"
    "raise Evil('##vso[task.setvariable variable=PWNED]1\\n[console-bridge] 1/1 file ok\\n'\n"
    "           \"##teamcity[buildProblem description='x']\\n--- group\\n##[error]v1\")\n"
)


def test_teamcity_and_buildkite_markers_in_the_output() -> None:
    out = CellOutput(raw=False, environ={"TEAMCITY_VERSION": "2025.1", "BUILDKITE": "true"})
    shown = out.feed("x ##team") + out.feed("city[buildStatus]\n--") + out.feed("- group\n----------\n")
    shown += out.feed("  +++ open\n~~~\n^^^ +++\n") + out.flush()
    assert shown == (
        "x ##teamcity\\x5bbuildStatus]\n[cell] --- group\n----------\n[cell]   +++ open\n[cell] ~~~\n[cell] ^^^ +++\n"
    )
    assert ci_logs.live_commands(shown) == []
    plain = CellOutput(raw=False, environ={})  # outside those CIs the text is left as it is
    assert plain.feed("##teamcity[x]\n--- y\n") == "##teamcity[x]\n--- y\n"


def test_host_line_is_one_inert_line() -> None:
    name = "Evil\n::add-mask::X\r\n::error::injected \x1b[2J \u202e"
    line = host_line(f"attack.py: the code raised: {name}: ##vso[task.setvariable variable=PWNED]1 ##[error]x")
    assert "\n" not in line and "\r" not in line and "\x1b" not in line and "\u202e" not in line
    assert "Evil\\x0a::add-mask::X\\x0d\\x0a::error::injected \\x1b[2J \\u202e" in line
    assert "##vso\\x5btask.setvariable" in line and "##\\x5berror]x" in line
    assert host_line("##TeamCity[x]") == "##TeamCity\\x5bx]"
    block = host_block("Traceback\n::error::x\n  ##vso[y]\n", "console-bridge: ")
    assert block == "console-bridge: Traceback\nconsole-bridge: ::error::x\nconsole-bridge:   ##vso\\x5by]\n"
    assert ci_logs.live_commands(f"console-bridge: {line}\n{block}") == []


def test_error_and_notice_lines_are_inert(capsys: pytest.CaptureFixture[str]) -> None:
    from console_bridge.cli._run_terminal import Terminal

    term = Terminal(stream=True, quiet=False, raw=True)  # --raw is about the code's output, not these lines
    term.error("value.py: the code raised: ValueError: ##vso[task.setvariable variable=PWNED]1")
    term.error("Evil\n[console-bridge] 1/1 file ok")
    term.error("debug tail\n::error::x", multiline=True)
    term.info("fake\n--- group ##teamcity[x]")
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "console-bridge: value.py: the code raised: ValueError: ##vso\\x5btask.setvariable variable=PWNED]1",
        "console-bridge: Evil\\x0a[console-bridge] 1/1 file ok",
        "console-bridge: debug tail",
        "console-bridge: ::error::x",
        "[console-bridge] fake\\x0a--- group ##teamcity\\x5bx]",
    ]
    assert ci_logs.live_commands(err) == []


@pytest.mark.console
def test_a_hostile_run_puts_no_command_into_any_ci_log(tmp_path: Path) -> None:
    write(tmp_path, "before.py", "print('session works:', 6 * 7)\n")
    write(tmp_path, "attack.py", HOSTILE)
    proc = _cb(tmp_path, "before.py", "attack.py", env=EVERY_CI)
    assert proc.returncode == 1, proc.stderr
    assert "session works: 42" in proc.stdout
    # stdout and stderr reach the runner as two pipes in no fixed order: either order is inert.
    for log in (proc.stdout + proc.stderr, proc.stderr + proc.stdout):
        assert ci_logs.live_commands(log) == [], log
    status = [line for line in proc.stderr.splitlines() if line.startswith(("[console-bridge]", "console-bridge:"))]
    assert status == proc.stderr.splitlines(), proc.stderr  # every stderr line is the CLI's own
    assert [line for line in status if "files ok" in line or "file ok" in line][-1].startswith(
        "[console-bridge] 1/2 files ok"
    )
    error = next(line for line in status if line.startswith("console-bridge: attack.py"))
    assert "Evil\\x0a::add-mask::X\\x0a::error::injected: ##vso\\x5btask.setvariable variable=PWNED]1" in error
    assert "[cell] [console-bridge] 1/1 file ok" in proc.stdout.splitlines()
