"""The blocking Console in a real interpreter: Ctrl-C during run(), objects forgotten at exit, threads."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

from console_bridge import Console, NotAllowed, Recordings

SCRIPT_TIMEOUT = 90


def run_script(code: str, tmp_path: Path) -> subprocess.Popen[str]:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(code))
    return subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path
    )


def mcp_console_children(pid: int) -> list[int]:
    try:
        return [p.pid for p in psutil.Process(pid).children(recursive=True) if "mcp-console" in p.name()]
    except psutil.Error:
        return []


def test_ctrl_c_interrupts_the_cell_keeps_the_session_and_reraises(mcp_console, tmp_path):
    # The SIGINT comes from a timer inside the script, once run() is under way (a real Ctrl-C).
    proc = run_script(
        f"""
        import os, signal, threading
        from console_bridge import Console
        # Ctrl-C raises KeyboardInterrupt even where the test runs as a background job (which starts
        # its children with SIGINT ignored, and Python then installs no handler)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        with Console({str(tmp_path)!r}, command={str(mcp_console[1])!r}, recordings_dir={str(tmp_path / "rec")!r},
                     poll_window=30) as console:
            console.run(python="kept = 'still here'")
            threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
            try:
                console.run(python="import time; time.sleep(60)")
            except KeyboardInterrupt:
                print("INTERRUPTED", flush=True)
            print(console.run(python="kept").text.strip(), flush=True)
        """,
        tmp_path,
    )
    out, err = proc.communicate(timeout=SCRIPT_TIMEOUT)
    assert proc.returncode == 0, err
    assert out.split() == ["INTERRUPTED", "'still", "here'"]


def test_a_console_forgotten_at_exit_is_closed_cleanly(mcp_console, tmp_path):
    rec = tmp_path / "rec"
    proc = run_script(
        f"""
        from console_bridge import Console
        console = Console({str(tmp_path)!r}, command={str(mcp_console[1])!r}, recordings_dir={str(rec)!r})
        console.start()
        console.run(python="print('left open')")
        print(console.pid, flush=True)
        # no close(): interpreter exit must close it
        """,
        tmp_path,
    )
    out, err = proc.communicate(timeout=SCRIPT_TIMEOUT)
    assert proc.returncode == 0, err
    server = int(out.strip())
    assert not psutil.pid_exists(server) or psutil.Process(server).status() == psutil.STATUS_ZOMBIE
    [recording] = Recordings(rec).list()
    assert recording.finalized and not recording.live


def test_blocking_consoles_from_several_threads(mcp_console, tmp_path):
    results: dict[int, str] = {}
    errors: list[BaseException] = []

    def work(index: int) -> None:
        try:
            ws = tmp_path / f"ws{index}"
            ws.mkdir()
            with Console(ws, command=mcp_console[1], recordings_dir=tmp_path / "rec") as console:
                results[index] = console.run(python=f"print({index} * 10)").text
        except BaseException as exc:
            errors.append(exc)

    before = threading.active_count()
    threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=SCRIPT_TIMEOUT)
    assert errors == [] and results == {0: "0\n", 1: "10\n", 2: "20\n"}
    # Every portal thread stops; asyncio's per-child waitpid threads end as their children are reaped.
    deadline = time.monotonic() + 10
    while threading.active_count() > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [t.name for t in threading.enumerate()][before:] == []


def test_recordings_prune_export_delete_never_touch_a_live_one(mcp_console, tmp_path):
    rec = tmp_path / "rec"
    with Console(tmp_path, command=mcp_console[1], recordings_dir=rec) as first:
        first.run(python="1")
    done = first.recording
    assert done is not None and done.finalized
    recordings = Recordings(rec)
    archive = recordings.export(done.run_id, tmp_path / "exports")
    assert archive.name == f"{done.run_id}.tar.gz" and archive.stat().st_size > 0
    with Console(tmp_path, command=mcp_console[1], recordings_dir=rec) as second:
        second.run(python="2")
        live = second.recording
        assert live is not None and live.live
        assert [r.run_id for r in recordings.list()] == [live.run_id, done.run_id]  # newest first
        with pytest.raises(NotAllowed):
            recordings.delete(live.run_id)
        pruned = recordings.prune(keep_last=0)
        assert [r.run_id for r in pruned] == [done.run_id]
        assert [r.run_id for r in recordings.list()] == [live.run_id]
    recordings.delete(live.run_id)
    assert recordings.list() == []
