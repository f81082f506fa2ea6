"""What users and models read after a failure: true notices, each in its own terms; installs fail at once."""

from __future__ import annotations

import time

import pytest

from console_bridge import AsyncConsole, Busy, Limits
from console_bridge._cells._observe import RESTARTED, reword_restart
from console_bridge._results import CellResult

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leaks")]


def test_the_stale_restart_notice_is_reworded() -> None:
    text = "[worker terminated by signal 9]\n[startup may have executed; explicit restart required]"
    cell = CellResult(text=text, segments=(("stdout", text),), content=[{"type": "text", "text": text}])
    fixed = reword_restart(cell)
    assert "explicit restart" not in fixed.text + fixed.combined + str(fixed.content)
    assert fixed.text.endswith(RESTARTED) and fixed.text.startswith("[worker terminated by signal 9]\n")
    # a cell that merely prints something else is left alone
    other = CellResult(text="explicit restart required", segments=(("stdout", "explicit restart required"),))
    assert reword_restart(other) is other


async def test_a_memory_kill_says_the_worker_was_restarted(workspace, recordings):
    from console_bridge._confinement._plan import plan_confinement

    plan = plan_confinement(Limits(memory="400MiB", enforce="best_effort"), "probe-wording")
    plan.release()
    if plan.mechanism("memory") is None:
        pytest.skip(
            "no cgroup holds memory for the whole tree on this host (a normal user without a delegated cgroup: "
            "RLIMIT_AS makes allocations fail, nothing is killed, so there is no kill to word)"
        )
    async with AsyncConsole(workspace, recordings_dir=recordings, limits=Limits(memory="400MiB")) as console:
        result = await console.run(python="b = bytearray(1500 * 2**20)")
        assert result.error is not None and result.error.kind == "limit", result.combined
        assert "explicit restart required" not in result.combined and RESTARTED in result.combined
        assert (await console.run(python="print('usable')")).text == "usable\n"


async def test_installs_fail_at_once_and_the_model_reads_send_terms(workspace, recordings):
    async with AsyncConsole(workspace, recordings_dir=recordings) as console:
        began = time.monotonic()
        code = "import subprocess, sys\nsubprocess.run([sys.executable, '-m', 'pip', 'install', 'requests'])"
        result = await console.run(python=code)
        assert time.monotonic() - began < 5
        assert result.error is not None and result.error.name == "PermissionError"
        assert "no network in the sandbox; installs are disabled" in result.error.message
        shell = await console.run(python="import os\nos.system('uv pip install x')")
        assert shell.error is not None and "installs are disabled" in shell.error.message
        echo = "import subprocess\nprint(subprocess.run(['echo', 'pip'], capture_output=True).stdout)"
        other = await console.run(python=echo)
        assert other.error is None and other.text == "b'pip\\n'\n"
        [send] = console.tools()
        await console.send(python="import time; time.sleep(3)", timeout_ms=0)
        with pytest.raises(Busy) as busy:
            await send({"python": "1"})
        assert "send({})" in busy.value.message and 'control: "interrupt"' in busy.value.message
        assert "poll()" not in busy.value.message
        await console.interrupt()
