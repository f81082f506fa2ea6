"""The magics and the blocking Console in a real Jupyter kernel, against the real mcp-console.

One kernel serves the module (its first %%console cell starts the worker); the shutdown
test starts its own. Every test's first %%console cell names the workspace and the
recordings folder (both temporary), so the tests do not depend on their order.
"""

from __future__ import annotations

import base64
import re
import shutil
import time
from pathlib import Path

import psutil
import pytest

from console_bridge import Recordings
from tests.jupyter.kernel import Execution, Kernel, start_kernel

pytestmark = [pytest.mark.console, pytest.mark.slow]

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def server_pid(kernel: Kernel) -> int:
    """The session's mcp-console pid, as %console_status prints it."""
    out = kernel.run("%console_status").expect_ok().stdout
    match = re.search(r"mcp-console \S+, pid (\d+)", out)
    assert match, out
    return int(match.group(1))


def descendants(pid: int) -> list[psutil.Process]:
    return psutil.Process(pid).children(recursive=True)


def living(procs: list[psutil.Process]) -> list[psutil.Process]:
    _, alive = psutil.wait_procs(procs, timeout=15)
    return [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def one_line(error: dict[str, object] | None) -> str:
    assert error is not None
    traceback = error["traceback"]
    assert isinstance(traceback, list) and len(traceback) == 1, traceback
    return str(traceback[0])


def test_cells_share_one_session_with_state(kernel: Kernel) -> None:
    first = kernel.run(f"%%console {kernel.console_options}\nx = 21\nprint('hello', x)").expect_ok()
    assert first.stdout == "hello 21\n"
    pid = server_pid(kernel)
    assert kernel.run("%%console\nprint(x * 2)").expect_ok().stdout == "42\n"
    value = kernel.run("%%console python\nx * 2").expect_ok()
    assert value.stdout == "" and [c["data"]["text/plain"] for c in value.of_type("execute_result")] == ["42"]
    sql = kernel.run("%%console sql\nselect 42 as answer").expect_ok()
    [table] = [c["data"] for c in sql.of_type("execute_result")]  # the table, as the cell's value
    assert "<th>answer</th>" in table["text/html"] and "<td>42</td>" in table["text/html"]
    assert "answer" in table["text/plain"] and sql.stdout == ""
    assert server_pid(kernel) == pid, "every cell ran in the same session"
    # the server belongs to the kernel: it is one of its descendants
    assert pid in {p.pid for p in descendants(kernel.pid())}


def test_output_streams_into_the_cell_while_it_runs(kernel: Kernel) -> None:
    go = kernel.workspace / "go-stream"
    go.unlink(missing_ok=True)
    code = (
        f"%%console {kernel.console_options}\n"
        "import os, time\n"
        "print('first', flush=True)\n"
        "deadline = time.monotonic() + 30\n"
        f"while not os.path.exists({str(go)!r}) and time.monotonic() < deadline:\n"
        "    time.sleep(0.05)\n"
        f"print('second', os.path.exists({str(go)!r}))\n"
    )
    run = kernel.submit(code)
    first_at = kernel.wait_for_stdout(run, "first")
    # The cell cannot end before the file exists: the first output arrived while it ran.
    assert "second" not in run.stdout
    assert not kernel.kc.shell_channel.msg_ready()
    go.write_text("go")
    kernel.finish(run).expect_ok()
    assert run.reply_at is not None and first_at < run.reply_at
    assert run.stdout == "first\nsecond True\n"
    # every chunk went to this cell (the stream messages carry its request as parent)
    assert all(msg["parent_header"]["msg_id"] == run.msg_id for _, msg in run.messages)


def test_a_long_output_streams_into_the_cell_whole(kernel: Kernel) -> None:
    # issue 31 item 1: the magic shows what on_output carries (before: each poll's first and last
    # 4 KiB, 8,090 of 105,000 bytes)
    code = f"%%console {kernel.console_options}\nfor i in range(5000):\n    print(f'row {{i:05d}} ' + 'y' * 10)\n"
    run = kernel.finish(kernel.submit(code))
    run.expect_ok()
    assert run.stdout.splitlines() == [f"row {i:05d} " + "y" * 10 for i in range(5000)]


def test_code_that_raises_fails_the_cell_with_its_traceback_shown_once(kernel: Kernel) -> None:
    run = kernel.run(f"%%console {kernel.console_options}\ndef f():\n    return 1 / 0\nf()")
    assert run.status == "error"
    # the traceback is the cell's stderr stream, shown once
    assert run.stderr.count("Traceback (most recent call last)") == 1 and "Traceback" not in run.stdout
    assert "ZeroDivisionError: division by zero" in run.stderr
    assert run.error is not None and run.error["ename"] == "CellError"
    assert run.error["traceback"] == [
        "CellError: the python cell failed with ZeroDivisionError: division by zero (its output above shows where)"
    ]
    handled = kernel.run(
        "%%console\nimport logging\ntry:\n    1 / 0\nexcept ZeroDivisionError:\n    logging.exception('handled')"
    )
    handled.expect_ok()


def test_a_bridge_error_is_one_line_and_the_session_lives_on(kernel: Kernel) -> None:
    kernel.run(f"%%console {kernel.console_options}\nkept = 'still here'").expect_ok()
    pid = server_pid(kernel)
    run = kernel.run("%%console --timeout 1\nimport time\nprint('before', flush=True)\ntime.sleep(30)")
    assert run.status == "error"
    assert run.error is not None and run.error["ename"] == "CellTimeout"
    assert one_line(run.error).startswith("CellTimeout: the cell ran past --timeout 1 s; it was interrupted")
    assert run.stdout.startswith("before\n")
    assert "KeyboardInterrupt" in run.stderr  # the worker's own report of the interrupt
    # a refused option starts nothing and keeps the open session
    missing = kernel.root / "no-such-folder"
    refused = kernel.run(f"%%console --workspace {missing}\nprint(kept)")
    assert refused.error is not None and refused.error["ename"] == "LaunchRefused"
    assert one_line(refused.error).startswith(f"LaunchRefused: workspace '{missing}' is not an existing directory")
    assert kernel.run("%%console\nprint(kept)").expect_ok().stdout == "still here\n"
    assert server_pid(kernel) == pid


def test_a_bad_line_is_a_usage_error(kernel: Kernel) -> None:
    run = kernel.run("%%console cobol\nprint(1)")
    assert run.status == "error"
    assert run.stderr.startswith("UsageError: argument language: invalid choice: 'cobol'")
    assert "usage: %%console [python|sql|r]" in run.stderr
    extra = kernel.run("%console_status now")
    assert extra.status == "error" and "UsageError: %console_status takes no arguments" in extra.stderr


def test_a_plot_is_shown_as_an_inline_png(kernel: Kernel) -> None:
    run = kernel.run(
        f"%%console {kernel.console_options}\n"
        "import matplotlib.pyplot as plt\n"
        "plt.plot([1, 3, 2])\n"
        "plt.show()\n"
        "print('plotted')\n"
    ).expect_ok()
    assert run.stdout == "plotted\n"
    displays = run.of_type("display_data")
    assert len(displays) == 1
    png = base64.b64decode(displays[0]["data"]["image/png"])
    assert png.startswith(PNG_MAGIC) and len(png) > 1000
    assert displays[0]["data"]["text/plain"].startswith("<Figure size")  # IPython's, as Jupyter shows it


def test_status_shows_the_verified_sandbox(kernel: Kernel) -> None:
    kernel.run(f"%%console {kernel.console_options}\npass").expect_ok()
    out = kernel.run("%console_status").expect_ok().stdout
    assert out.startswith("console-bridge session: idle\n")
    assert f"workspace   {kernel.workspace}\n" in out
    assert "profile     read-only\n" in out
    assert "sandbox     sandboxed=True, network=restricted, writable=[tmpdir]" in out
    assert "languages   python, sql; poll window 1 s\n" in out  # R only when asked
    assert f"recording   {kernel.recordings}" in out
    assert re.search(r"usage       cpu \d+\.\d s, memory \d+ MiB \(peak \d+ MiB\), \d+ processes", out), out
    assert psutil.pid_exists(server_pid(kernel))


def test_restart_hands_over_the_warm_session_at_once(kernel: Kernel) -> None:
    kernel.run(f"%%console {kernel.console_options}\ny = 5").expect_ok()
    pid = server_pid(kernel)
    old_tree = [psutil.Process(pid), *descendants(pid)]
    # The kernel's manager keeps one booted session warm: the restart hands that very session over
    # (its server pid becomes the session's), rather than starting one while the user waits.
    probe = (
        "import console_bridge.jupyter as _j\n"
        "print(*[s.pid for s in next(iter(_j._loaded.values())).manager.sessions() if s.state == 'warm'])"
    )
    deadline = time.monotonic() + 30
    while not re.fullmatch(r"\d+\n", warm := kernel.run(probe).expect_ok().stdout) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert re.fullmatch(r"\d+\n", warm), f"no warm session within 30 s: {warm!r}"
    out = kernel.run("%console_restart").expect_ok().stdout
    assert "replaced the old one; its in-memory state is gone" in out
    assert kernel.run("%%console\nprint('y' in globals())").expect_ok().stdout == "False\n"
    new = server_pid(kernel)
    assert new != pid
    assert new == int(warm), "the restart did not hand over the warm session"
    assert living(old_tree) == []


def test_interrupting_the_kernel_interrupts_the_cell_and_keeps_the_session(kernel: Kernel) -> None:
    kernel.run(f"%%console {kernel.console_options}\nz = 7").expect_ok()
    pid = server_pid(kernel)
    run = kernel.submit("%%console\nimport time\nprint('started', flush=True)\ntime.sleep(60)\nprint('not reached')")
    kernel.wait_for_stdout(run, "started")
    interrupted_at = time.monotonic()
    kernel.km.interrupt_kernel()  # SIGINT to the kernel, as the notebook's stop button does
    kernel.finish(run)
    assert run.reply_at is not None and run.reply_at - interrupted_at < 15
    assert run.status == "error"
    assert run.error is not None and run.error["ename"] == "KeyboardInterrupt"
    assert one_line(run.error) == "KeyboardInterrupt: the cell was interrupted; the session and its state are kept"
    assert "not reached" not in run.stdout
    assert "may still be running" not in run.stderr
    # the same session, its state intact, and idle: a new cell runs at once
    assert kernel.run("%%console\nprint(z)").expect_ok().stdout == "7\n"
    assert server_pid(kernel) == pid


def test_an_interrupted_cell_that_cleans_up_is_waited_for(kernel: Kernel) -> None:
    kernel.run(f"%%console {kernel.console_options}\nq = 'kept'").expect_ok()
    code = (
        "%%console\n"
        "import time\n"
        "try:\n"
        "    print('started', flush=True)\n"
        "    time.sleep(60)\n"
        "except KeyboardInterrupt:\n"
        "    print('cleaning up', flush=True)\n"
        "    time.sleep(1.5)\n"
        "    print('cleaned up')\n"
    )
    run = kernel.submit(code)
    kernel.wait_for_stdout(run, "started")
    kernel.km.interrupt_kernel()
    kernel.finish(run)
    assert run.error is not None and run.error["ename"] == "KeyboardInterrupt"
    # the magic waited for the worker to finish its except block before handing the kernel back
    assert run.stdout.endswith("cleaned up\n"), run.stdout
    assert kernel.run("%%console\nprint(q)").expect_ok().stdout == "kept\n"


def test_the_blocking_console_works_in_the_kernels_running_loop(kernel: Kernel) -> None:
    code = (
        "import asyncio\n"
        "from console_bridge import Console\n"
        "asyncio.get_running_loop()  # raises unless the kernel runs this cell inside its event loop\n"
        f"plain = Console({str(kernel.workspace)!r}, recordings_dir={str(kernel.recordings)!r}, languages=['python'])\n"
        "plain.start()\n"
        "plain_pid = plain.status().pid\n"
        "result = plain.run(python=\"import matplotlib.pyplot as plt; plt.plot([1, 2]); plt.show(); print('plain')\")\n"
        "plain.close()\n"
        "result\n"
    )
    run = kernel.run(code).expect_ok()
    results = run.of_type("execute_result")
    assert len(results) == 1
    data = results[0]["data"]
    assert data["text/plain"] == "plain\n"
    assert base64.b64decode(data["image/png"]).startswith(PNG_MAGIC)
    pid = int(kernel.run("print(plain_pid)").expect_ok().stdout)
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


@pytest.mark.skipif(shutil.which("R") is None, reason="R is not installed")
def test_an_r_cell_runs_in_the_first_session_and_keeps_python_state(kernel: Kernel) -> None:
    opened = kernel.run(f"%%console {kernel.console_options} --languages python,sql,r\nkept = 'python state'")
    assert "R is installed but not" not in opened.expect_ok().stderr
    pid = server_pid(kernel)
    run = kernel.run("%%console r\nx <- c(1, 2, 3)\nprint(sum(x))").expect_ok()
    assert run.stdout == "[1] 6\n" and "closing the session" not in run.stderr
    assert kernel.run("%%console python\nprint(kept)").expect_ok().stdout == "python state\n"
    assert server_pid(kernel) == pid
    assert "languages   python, sql, r;" in kernel.run("%console_status").expect_ok().stdout


def test_a_language_the_session_lacks_is_refused_with_its_state_kept(kernel: Kernel) -> None:
    first = kernel.run(f"%%console {kernel.console_options} --languages python,sql\nkept = 1").expect_ok()
    if shutil.which("R") and "opened a" in first.stderr:  # R only when asked: the opening line says how
        assert "R is installed but not in this session: `--languages python,sql,r`" in first.stderr, first.stderr
    refused = kernel.run("%%console r\nprint(1)")
    assert refused.status == "error" and "--languages python,sql,r" in refused.stderr, refused.stderr
    assert kernel.run("%%console\nprint(kept)").expect_ok().stdout == "1\n"


def test_a_profile_change_reopens_saying_so_and_close_stops_the_session(kernel: Kernel) -> None:
    kernel.run(f"%%console {kernel.console_options}\nw = 1").expect_ok()
    old = server_pid(kernel)
    old_tree = [psutil.Process(old), *descendants(old)]
    changed = kernel.run("%%console --profile workspace\nprint('w' in globals())").expect_ok()
    assert "profile 'read-only' -> 'workspace'" in changed.stderr
    assert "closing the session (its state is lost) and opening a new one" in changed.stderr
    assert "opened a 'workspace' session" in changed.stderr
    assert changed.stdout == "False\n"
    assert living(old_tree) == []
    new = server_pid(kernel)
    assert new != old
    assert "profile     workspace\n" in kernel.run("%console_status").expect_ok().stdout
    tree = [psutil.Process(new), *descendants(new)]
    assert "the session is closed" in kernel.run("%console_close").expect_ok().stdout
    assert living(tree) == []
    assert "no session is open" in kernel.run("%console_close").expect_ok().stdout
    assert "no session is open" in kernel.run("%console_status").expect_ok().stdout


def test_unload_removes_the_magics_and_load_brings_them_back(kernel: Kernel) -> None:
    kernel.run("%unload_ext console_bridge").expect_ok()
    gone = kernel.run("%%console\npass")
    assert gone.status == "error" and "Cell magic `%%console` not found" in gone.stderr
    kernel.run("%load_ext console_bridge").expect_ok()
    assert kernel.run("%console_status").expect_ok().stdout.startswith("console-bridge: ")


def test_kernel_shutdown_leaves_no_process_and_no_temp_folder(tmp_path: Path) -> None:
    kernel = start_kernel(tmp_path)
    try:
        kernel.run("%load_ext console_bridge").expect_ok()
        first = kernel.run(f"%%console {kernel.console_options}\nprint('up')").expect_ok()
        assert "opened a 'read-only' session" in first.stderr
        pid = server_pid(kernel)
        tree = descendants(kernel.pid())
        assert pid in {p.pid for p in tree}
        sessions = kernel.tmp.parent / "state" / "sessions"
        assert len(list(sessions.iterdir())) >= 1  # the sessions' private folders (the warm one too)
        probe = (
            "import console_bridge.jupyter as _j\n"
            "print(*[s.pid for s in next(iter(_j._loaded.values())).manager.sessions() if s.state == 'warm'])"
        )
        deadline = time.monotonic() + 30
        while not re.fullmatch(r"\d+\n", kernel.run(probe).expect_ok().stdout) and time.monotonic() < deadline:
            time.sleep(0.1)
        tree = descendants(kernel.pid())  # (the warm spare's server too)
        assert len(Recordings(kernel.recordings).list()) == 2  # the session's and the spare's, both live
    finally:
        kernel.shutdown()
    assert not kernel.km.is_alive()
    assert living(tree) == [], "a process started by the kernel's session outlived the kernel"
    leftovers = sorted(p.name for p in sessions.iterdir())
    assert leftovers == [], "the session's private folder is still there: the session was not closed at exit"
    # Issue 31: the unused warm spare left an orphan recording (listed with `?`, never pruned).
    recordings = Recordings(kernel.recordings).list()
    assert [rec.owner is not None and rec.finalized for rec in recordings] == [True], recordings


def test_input_in_a_cell_is_asked_through_the_notebooks_stdin(kernel: Kernel) -> None:
    kernel.run(f"%%console {kernel.console_options}\nkept = 'state'").expect_ok()
    run = kernel.submit("%%console\nname = input('Name: ')\nprint('hello', name)")
    request = kernel.kc.get_stdin_msg(timeout=60)
    assert request["msg_type"] == "input_request" and request["content"]["prompt"] == "Name: "
    kernel.kc.input("bob")
    assert kernel.finish(run).expect_ok().stdout == "hello bob\n"
    # the session is usable at once: no Busy, state kept
    assert kernel.run("%%console\nprint(kept, name)").expect_ok().stdout == "state bob\n"


def test_input_without_stdin_fails_clearly_and_the_session_lives_on(kernel: Kernel) -> None:
    kernel.run(f"%%console {kernel.console_options}\nkept = 'state'").expect_ok()
    run = kernel.finish(Execution(kernel.kc.execute("%%console\ninput('Name: ')", allow_stdin=False)))
    assert run.status == "error" and run.error is not None and run.error["ename"] == "CellError"
    assert "does not offer stdin" in one_line(run.error)
    assert kernel.run("%%console\nprint(kept)").expect_ok().stdout == "state\n"


def test_put_and_get_files_through_the_tmpdir_under_read_only(kernel: Kernel) -> None:
    local = kernel.root / "in.csv"
    local.write_text("a,b\n1,2\n")
    kernel.run(f"%%console {kernel.console_options}\nimport os").expect_ok()  # read-only profile (the default)
    put = kernel.run(f"%console_put {local} data/in.csv").expect_ok().stdout
    assert "-> " in put and put.rstrip().endswith("data/in.csv")
    code = (
        "%%console\nimport pandas as pd\n"
        "frame = pd.read_csv(os.environ['TMPDIR'] + '/data/in.csv')\n"
        "frame['c'] = frame.a + frame.b\n"
        "frame.to_csv(os.environ['TMPDIR'] + '/out.csv', index=False)\n"
        "os.symlink('/etc/hostname', os.environ['TMPDIR'] + '/link.csv')\n"
    )
    kernel.run(code).expect_ok()
    target = kernel.root / "got"
    target.mkdir()
    got = kernel.run(f"%console_get out.csv {target}").expect_ok()
    assert (target / "out.csv").read_text() == "a,b,c\n1,2,3\n", got.stdout
    # again: the local copy is replaced (a rerun cell works)
    kernel.run(f"%console_get out.csv {target / 'out.csv'}").expect_ok()
    refused = kernel.run("%console_get link.csv")
    assert refused.status == "error" and "symlink" in one_line(refused.error)
    assert kernel.run("%console_get").status == "error"  # usage
    assert not (kernel.workspace / "link.csv").exists()


def test_push_and_pull_values_between_the_kernel_and_its_session(kernel: Kernel) -> None:
    """Issue 31, item 4: ``%console_push NAME`` / ``%console_pull NAME`` (data frames through Parquet,
    plain data through JSON; nothing unpickled in the kernel)."""
    kernel.run(f"%%console {kernel.console_options}\nimport os").expect_ok()
    kernel.run("import pandas as pd\nsales = pd.DataFrame({'region': ['n', 's'], 'revenue': [1.5, 2.5]})").expect_ok()
    pushed = kernel.run("%console_push sales").expect_ok().stdout
    assert "sales -> the session" in pushed
    kernel.run("%%console\nsales['double'] = sales.revenue * 2\nsummary = {'total': float(sales.revenue.sum())}")
    kernel.run("%console_pull sales").expect_ok()
    kernel.run("%console_pull summary").expect_ok()
    check = kernel.run("print(list(sales.columns), sales.double.tolist(), summary)").expect_ok().stdout
    assert check.strip() == "['region', 'revenue', 'double'] [3.0, 5.0] {'total': 4.0}", check
    missing = kernel.run("%console_push no_such_variable")
    assert missing.status == "error" and "no variable" in missing.stderr + str(missing.error), missing.stderr
    kernel.run("%%console\nimport threading\nlock = threading.Lock()").expect_ok()
    not_plain = kernel.run("%console_pull lock")
    assert not_plain.status == "error" and "pull" in one_line(not_plain.error)
    assert kernel.run("%console_pull").status == "error"  # usage


def test_kernel_shutdown_during_a_cell_keeps_its_evidence(tmp_path: Path) -> None:
    """Issue 31, item 2 for the kernel: shutting the kernel down while a cell runs interrupts the cell,
    its ``finally`` runs, the cell is recorded as interrupted and the recording is finalized."""
    kernel = start_kernel(tmp_path)
    try:
        kernel.run("%load_ext console_bridge").expect_ok()
        kernel.run(f"%%console {kernel.console_options} --profile workspace --languages python\nx = 1").expect_ok()
        tree = descendants(kernel.pid())
        run = kernel.submit(
            "%%console\nimport time\ntry:\n    print('start', flush=True)\n    time.sleep(120)\n"
            "finally:\n    open('finally.txt', 'w').write('ran')\n"
        )
        kernel.wait_for_stdout(run, "start")
    finally:
        kernel.shutdown()
    assert not kernel.km.is_alive()
    assert (kernel.workspace / "finally.txt").read_text() == "ran"
    assert living(tree) == []
    runs = [d for d in (kernel.recordings / "sessions").iterdir() if d.is_dir()]
    assert runs and all("## Recording finished" in (d / "transcript.md").read_text() for d in runs), runs
    cells = [
        line
        for log in (kernel.recordings / "sessions").glob("*.console-bridge-cells.jsonl")
        for line in log.read_text().splitlines()
    ]
    assert any("time.sleep(120)" in line and "KeyboardInterrupt" in line for line in cells), cells
