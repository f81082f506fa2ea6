"""``console-bridge run`` end to end: the real entry point, the real mcp-console, real sandboxes."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from console_bridge.cli import cli

from .conftest import Runner, start, write


def _no_tty_decorations(stderr: str) -> None:
    assert "\r" not in stderr
    assert "\x1b" not in stderr


@pytest.mark.console
def test_ok_shared_state_images_and_artifacts(cb: Runner, tmp_path: Path) -> None:
    write(
        tmp_path,
        "first.py",
        "x = 41\nprint('first sets x', flush=True)\nimport matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()\n",
    )
    write(tmp_path, "second.py", "print('second sees x =', x + 1)\n")
    recs = tmp_path / "recs"
    proc = cb("run", "--recordings-dir", str(recs), "--artifacts", "out", "first.py", "second.py")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("first sets x\n")
    assert "second sees x = 42\n" in proc.stdout
    assert "[image image-001.png: image/png" in proc.stdout
    _no_tty_decorations(proc.stderr)
    assert "sandboxed, no network access, writable: private TMPDIR" in proc.stderr

    out = tmp_path / "out"
    assert (out.stat().st_mode & 0o777) == 0o700  # made private, as the recording store is
    assert (out / "output.txt").read_text() == proc.stdout
    assert (out / "image-001.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    report = json.loads((out / "report.json").read_text())
    assert report["exit_status"] == 0 and report["error"] is None
    assert report["profile"] == "read-only"
    assert report["mcp_console"]["version"] in ("0.0.5", "0.0.6")
    assert report["sandbox"]["network"] == "restricted" and report["sandbox"]["writable"] == ["tmpdir"]
    assert report["started_at"].endswith("Z") and report["ended_at"] >= report["started_at"]
    assert report["duration_s"] > 0
    assert [(f["file"], f["status"], f["language"]) for f in report["files"]] == [
        ("first.py", "ok", "python"),
        ("second.py", "ok", "python"),
    ]
    assert report["files"][0]["images"] == ["image-001.png"]
    assert report["artifacts"]["images"] == ["image-001.png"]
    run_id = report["recording"]["run_id"]
    assert report["recording"]["finalized"] is True
    assert Path(report["recording"]["path"]) == recs / "sessions" / run_id
    copy = out / "recording"
    assert copy.is_dir()
    if report["mcp_console"]["version"] == "0.0.6":
        assert (copy / "transcript.md").read_text().rstrip().endswith("## Recording finished")
    assert run_id in proc.stderr
    # The copy is made of ordinary files: the artifacts folder can be removed or re-used.
    write(tmp_path, "third.py", "print('no plot this time')\n")
    again = cb("run", "--recordings-dir", str(recs), "--artifacts", "out", "third.py", "-q")
    assert again.returncode == 0, again.stderr
    assert again.stderr == ""
    assert not (out / "image-001.png").exists()  # stale images of the earlier run are gone
    assert json.loads((out / "report.json").read_text())["recording"]["run_id"] != run_id


@pytest.mark.console
def test_code_error_exits_1_with_one_paragraph(cb: Runner, tmp_path: Path) -> None:
    write(tmp_path, "bad.py", "print('before')\nraise ValueError('boom')\n")
    write(tmp_path, "never.py", "print('never printed')\n")
    proc = cb("run", "--recordings-dir", str(tmp_path / "recs"), "--artifacts", "out", "bad.py", "never.py")
    assert proc.returncode == 1
    assert "before\n" in proc.stdout and "ValueError: boom" in proc.stdout
    assert "never printed" not in proc.stdout
    errors = [line for line in proc.stderr.splitlines() if line.startswith("console-bridge:")]
    assert len(errors) == 1
    assert "bad.py" in errors[0] and "raised" in errors[0] and "1 later file not run" in errors[0]
    assert "Traceback" not in proc.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["exit_status"] == 1
    assert [f["status"] for f in report["files"]] == ["error", "not run"]


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    procs = {
        "unknown option": start(["run", "--no-such-option", "x.py"], tmp_path, tmp_path, stderr=subprocess.PIPE),
        "missing file": start(["run", "missing.py"], tmp_path, tmp_path, stderr=subprocess.PIPE),
    }
    results = {name: (p.communicate(timeout=60)[1], p.returncode) for name, p in procs.items()}
    for name, (stderr, code) in results.items():
        assert code == 2, (name, stderr)
        assert "Traceback" not in stderr
    assert "--no-such-option" in results["unknown option"][0]
    assert "missing.py" in results["missing file"][0]
    assert not (tmp_path / "xdg-data").exists()  # nothing started, nothing recorded


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["notes.txt"], "--language"),
        (["--json"], "Missing argument"),
        (["-", "-"], "only once"),
        (["--timeout", "0", "ok.py"], "--timeout"),
        (["--artifacts", "notes.txt", "ok.py"], "is not a folder"),
        (["--collect", "*.csv", "ok.py"], "--collect needs --artifacts"),
        (["--artifacts", "out", "--collect", "../x", "ok.py"], "without '..'"),
        (["--env", "NOEQUALS", "ok.py"], "KEY=VALUE"),
    ],
)
def test_more_usage_errors_exit_2_in_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], expected: str
) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "notes.txt", "print(1)\n")
    write(tmp_path, "ok.py", "print(1)\n")
    result = CliRunner().invoke(cli, ["run", "--recordings-dir", str(tmp_path / "recs"), *args])
    assert result.exit_code == 2, result.output
    assert expected in result.output
    assert not (tmp_path / "recs").exists()


def test_refused_launch_exits_3(cb: Runner, tmp_path: Path) -> None:
    write(tmp_path, "ok.py", "print('must not run')\n")
    proc = cb("run", "--recordings-dir", str(tmp_path / "recs"), "--writable-root", "/", "--json", "ok.py")
    assert proc.returncode == 3
    assert "must not run" not in proc.stdout
    document = json.loads(proc.stdout)
    assert document["exit_status"] == 3 and document["recording"] is None
    assert document["files"][0]["status"] == "not run"
    errors = [line for line in proc.stderr.splitlines() if line.startswith("console-bridge:")]
    assert len(errors) == 1 and "writable root '/'" in errors[0]
    assert "Traceback" not in proc.stderr


@pytest.mark.console
def test_timeout_exits_4_and_interrupts(cb: Runner, tmp_path: Path) -> None:
    write(tmp_path, "slow.py", "import time\nprint('sleeping', flush=True)\ntime.sleep(30)\nprint('woke up')\n")
    started = time.monotonic()
    proc = cb("run", "--recordings-dir", str(tmp_path / "recs"), "--timeout", "2", "--artifacts", "out", "slow.py")
    assert proc.returncode == 4, proc.stderr
    assert time.monotonic() - started < 25
    assert "woke up" not in proc.stdout.splitlines()  # (the traceback's context shows the line, not its output)
    assert "--timeout=2s" in proc.stderr and "Traceback" not in proc.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["exit_status"] == 4 and report["files"][0]["status"] == "timeout"
    assert report["recording"]["finalized"] is True  # closed cleanly after the interrupt


@pytest.mark.console
def test_json_document_stdin_and_a_failing_query(cb: Runner, tmp_path: Path) -> None:
    write(tmp_path, "answer.sql", "select 42 as answer")
    write(tmp_path, "broken.sql", "select * from no_such_table")
    write(tmp_path, "after.py", "print('not reached')\n")
    proc = cb(
        "run",
        "--recordings-dir",
        str(tmp_path / "recs"),
        "--json",
        "answer.sql",
        "-",
        "broken.sql",
        "after.py",
        stdin="print('from stdin')\n",
    )
    assert proc.returncode == 1, proc.stderr
    document = json.loads(proc.stdout)  # nothing else on stdout
    assert document["exit_status"] == 1
    assert "broken.sql: the query failed" in document["error"]
    assert document["sandbox"]["sandboxed"] is True
    assert document["mcp_console"]["version"] in ("0.0.5", "0.0.6")
    assert document["console_bridge"]
    assert document["recording"]["run_id"] and document["recording"]["finalized"] is True
    files = document["files"]
    assert [(f["file"], f["language"], f["status"]) for f in files] == [
        ("answer.sql", "sql", "ok"),
        ("<stdin>", "python", "ok"),
        ("broken.sql", "sql", "error"),
        ("after.py", "python", "not run"),
    ]
    assert "42" in files[0]["output"]
    assert files[1]["output"] == "from stdin\n"
    assert "no_such_table" in files[2]["output"]
    assert "broken.sql: the query failed: Catalog Error" in proc.stderr and "(see its output)" in proc.stderr


@pytest.mark.console
def test_output_streams_before_the_cell_ends(tmp_path: Path) -> None:
    write(tmp_path, "stream.py", "import time\nprint('first', flush=True)\ntime.sleep(3)\nprint('second')\n")
    proc = start(
        ["run", "--recordings-dir", str(tmp_path / "recs"), "--poll-window", "0.5", "stream.py"],
        tmp_path,
        tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        bufsize=1,
    )
    with proc:
        assert proc.stdout is not None and proc.stderr is not None
        seen: list[tuple[float, str]] = []
        for line in proc.stdout:
            seen.append((time.monotonic(), line))
        stderr = proc.stderr.read()
        assert proc.wait(timeout=60) == 0, stderr
    assert [line for _t, line in seen] == ["first\n", "second\n"]
    assert seen[1][0] - seen[0][0] >= 2.0  # 'first' was out while the cell still slept
    _no_tty_decorations(stderr)


@pytest.mark.console
def test_status_line_on_a_tty(tmp_path: Path) -> None:
    write(tmp_path, "wait.py", "import time\ntime.sleep(1.5)\nprint('done waiting')\n")
    master, slave = pty.openpty()
    try:
        proc = start(
            ["run", "--recordings-dir", str(tmp_path / "recs"), "wait.py"],
            tmp_path,
            tmp_path,
            stdout=subprocess.PIPE,
            stderr=slave,
        )
        os.close(slave)
        chunks: list[bytes] = []

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
        stdout, _ = proc.communicate(timeout=60)
        reader.join(timeout=10)
    finally:
        os.close(master)
    stderr = b"".join(chunks).decode("utf-8", "replace")
    assert proc.returncode == 0
    assert stdout == "done waiting\n"
    assert "\r[console-bridge] running wait.py" in stderr
    assert "\r" not in stdout


@pytest.mark.console
def test_limit_options_take_none_and_strict_starts_once_no_rlimit_is_asked_for(cb: Runner, tmp_path: Path) -> None:
    write(tmp_path, "a.py", "print(6 * 7)\n")
    # Every shipped profile caps the recording, which only RLIMIT_FSIZE holds: --strict alone is
    # refused before anything starts, and the refusal names the option that lifts the first limit
    # it refuses (the recording's where a cgroup holds memory and processes; memory's where none does).
    refused = cb("run", "--strict", "a.py")
    assert refused.returncode == 3, refused.stderr
    assert "recording" in refused.stderr and "Nothing was started" in refused.stderr
    named = re.search(r"limit (\w+)=\S+ cannot be enforced by a cgroup or a file system cap", refused.stderr)
    assert named, refused.stderr
    option = {"recording": "--recording-limit", "writes": "--writes-limit"}.get(named[1], f"--{named[1]}")
    assert f"(CLI: {option} none)" in refused.stderr
    # With every limit an rlimit could hold given as none, only the tmpfs TMPDIR and the read-only
    # view hold limits: strict accepts those on every host kind.
    args = ["--strict", "--recording-limit", "none", "--memory", "none", "--processes", "none", "--cpu", "none"]
    proc = cb("run", *args, "--writes-limit", "none", "--artifacts", "out", "a.py")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "42\n"
    limits = json.loads((tmp_path / "out" / "report.json").read_text())["limits"]
    assert {name: limits[name]["enforced_by"] for name in limits} == {
        "memory": None,
        "processes": None,
        "cpu": None,
        "tmpdir": "tmpfs",
        "recording": None,
        "writes": None,
        "files": "read-only-view",  # (a read-only profile: cells create nothing on the host)
        "hidden_names": "watched",  # (named as the weaker mechanism it is; strict shows it, as a guarantee held)
    }
    assert limits["recording"]["value"] is None and limits["tmpdir"]["value"] == 2 << 30
    bad = cb("run", "--memory", "lots", "a.py")
    assert bad.returncode == 2 and "--memory" in bad.stderr and "or none for no limit" in bad.stderr
    small = cb("run", "--tmpdir-limit", "512K", "a.py")  # refused by the option itself, naming it
    assert small.returncode == 2 and "'--tmpdir-limit': '512K' is 524288 bytes; give at least 1MiB" in small.stderr
