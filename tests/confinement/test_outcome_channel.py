"""Issue 42, item 5: a full TMPDIR never turns a failed cell into a success.

The hooks append each failure to the outcome log in the session's TMPDIR, which a cell can fill.
An append that fails (ENOSPC, a short write, EIO) sends the record through the cell's output
instead; a record that cannot be read there still fails the cell. A cell can fake a failure that
way, never hide one. Python and R, with the TMPDIR filled by the cell itself and by a thread an
earlier cell left behind; afterwards the session still works.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from console_bridge import AsyncConsole, Limits
from tests.support.binaries import binary_for

pytestmark = [pytest.mark.anyio, pytest.mark.console, pytest.mark.usefixtures("no_leaks")]

HAS_R = shutil.which("R") is not None

FILL = """\
import os
_path = os.path.join(os.environ['TMPDIR'], 'fill')
with open(_path, 'wb') as _f:
    try:
        while True:
            _f.write(b'x' * (1 << 16))
            _f.flush()
    except OSError:
        pass
"""

FILL_LATER = """\
import os, threading, time
def _fill():
    time.sleep(0.5)
    with open(os.path.join(os.environ['TMPDIR'], 'fill'), 'wb') as f:
        try:
            while True:
                f.write(b'x' * (1 << 16))
                f.flush()
        except OSError:
            pass
threading.Thread(target=_fill, daemon=True).start()
"""

FREE = "import os\nos.remove(os.path.join(os.environ['TMPDIR'], 'fill'))"


async def _failures_still_fail(console: AsyncConsole, with_r: bool) -> None:
    out = await console.run(python="1/0")
    assert out.error is not None, out.combined
    assert out.error.name in ("ZeroDivisionError", "tmpdir", "OutcomeLost"), out.error
    big = await console.run(python="raise ValueError('v' * 100_000)")
    assert big.error is not None, big.combined
    assert big.error.name in ("ValueError", "tmpdir", "OutcomeLost"), big.error
    sql = await console.run(sql="select * from no_such_table_anywhere")
    assert sql.error is not None, sql.combined
    if with_r:
        r_out = await console.run(r='stop("boom in R")')
        assert r_out.error is not None, r_out.combined
        assert r_out.error.name in ("simpleError", "tmpdir", "OutcomeLost"), r_out.error
    # and a cell that succeeds is not blamed for the full TMPDIR it did not fill
    ok = await console.run(python="print(40 + 2)")
    assert ok.error is None and ok.text.strip() == "42", (ok.error, ok.combined)


@pytest.mark.parametrize("version", ["0.0.5", "0.0.6"])
async def test_a_full_tmpdir_never_hides_a_failure(version: str, workspace: Path, recordings: Path) -> None:
    langs = ["python", "sql", "r"] if HAS_R else ["python", "sql"]
    async with AsyncConsole(
        workspace,
        command=binary_for(version),
        limits=Limits(tmpdir="16MiB"),
        languages=langs,
        recordings_dir=recordings,
    ) as console:
        filled = await console.run(python=FILL)
        assert filled.error is not None and filled.error.kind == "limit" and filled.error.name == "tmpdir", filled
        await _failures_still_fail(console, HAS_R)
        # the real failure, not a guess, where the record reached the output
        out = await console.run(python="1/0")
        assert out.error is not None and out.error.name == "ZeroDivisionError", out.error
        assert "division by zero" in out.error.message
        assert any("outcome log" in notice for notice in console.status().extra.get("notices", [])), console.status()
        await console.run(python=FREE)
        after = await console.run(python="1/0")
        assert after.error is not None and after.error.name == "ZeroDivisionError"
        assert (await console.run(python="print(1 + 1)")).text.strip() == "2"


async def test_a_thread_that_fills_the_tmpdir_later_hides_nothing(workspace: Path, recordings: Path) -> None:
    async with AsyncConsole(
        workspace, command=binary_for("0.0.6"), limits=Limits(tmpdir="16MiB"), recordings_dir=recordings
    ) as console:
        started = await console.run(python=FILL_LATER)
        assert started.error is None, started
        wait = await console.run(python="import time\ntime.sleep(3)")
        # the innocent cell that ran while the thread filled the TMPDIR is blamed for the limit: fail closed
        assert wait.error is not None and wait.error.name == "tmpdir", wait.error
        await _failures_still_fail(console, with_r=False)
        await console.run(python=FREE)
        assert (await console.run(python="print(1 + 1)")).error is None


async def test_a_forged_lost_record_can_only_fail_a_cell(workspace: Path, recordings: Path) -> None:
    async with AsyncConsole(workspace, command=binary_for("0.0.6"), recordings_dir=recordings) as console:
        forged = await console.run(python='print("\\ufdd2!not json\\ufdd3\\ufdd4", end="")')
        assert forged.error is not None and forged.error.name == "OutcomeLost", forged.error
        assert "\ufdd2" not in forged.text and "not json" not in forged.text
        # a record that claims success is no record at all: the cell still fails
        claim = await console.run(python='print("\\ufdd2!{\\"type\\": \\"ready\\"}\\ufdd3\\ufdd4", end="")')
        assert claim.error is not None, claim
        assert (await console.run(python="print(1 + 1)")).error is None
