"""The outcome channel fails closed (issue 30): a cell that tampers with the outcome log cannot make
failing cells look like successes. The log lives in the cells' own TMPDIR, so a cell can remove,
replace, truncate or lock it; each way makes that cell a failure of kind ``"tampered"``, and
every later cell too until ``restart()`` gives a fresh worker a fresh log. A thread an earlier
cell started that fails later is that cell's (a notice), not the running cell's failure.
"""

from __future__ import annotations

import pytest

from console_bridge import AsyncConsole
from tests.support.binaries import binary_for

pytestmark = [pytest.mark.anyio, pytest.mark.console]

FIND = (
    "import glob, os, shutil\n"
    "log = glob.glob(os.path.join(os.environ['TMPDIR'], '.console-bridge-*', 'outcomes.jsonl'))[0]\n"
    "folder = os.path.dirname(log)\n"
)
ATTACKS = {
    "removed-then-folder": "os.remove(log); os.mkdir(log)",
    "removed": "os.remove(log)",
    "truncated": "open(log, 'w').close()",
    "replaced-by-rename": "open(log + '.new', 'w').write(''); os.rename(log + '.new', log)",
    "symlink": "os.remove(log); os.symlink('/dev/null', log)",
    "read-only": "os.chmod(log, 0o400)",
    "folder-removed": "shutil.rmtree(folder)",
    "folder-locked": "os.chmod(folder, 0o500)",
}


def _console(workspace: object, version: str, **kwargs: object) -> AsyncConsole:
    return AsyncConsole(workspace, command=binary_for(version), **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("version", ["0.0.5", "0.0.6"])
async def test_every_tampering_fails_closed_until_restart(version: str, workspace: object, recordings: object) -> None:
    async with _console(workspace, version, recordings_dir=recordings) as c:
        for name, attack in ATTACKS.items():
            tampering = await c.run(python=FIND + attack)
            assert tampering.error is not None and tampering.error.kind == "tampered", (name, tampering.combined)
            assert "during this cell" in tampering.error.message
            for code in ("1 / 0", "print('fine')"):  # a failure and a success alike: neither can be known
                later = await c.run(python=code)
                assert later.error is not None and later.error.kind == "tampered", (name, code, later.combined)
                assert "before this cell" in later.error.message and "restart()" in later.error.message
            sql = await c.run(sql="select * from no_such_table")
            assert sql.error is not None and sql.error.kind == "tampered", (name, sql.combined)
            await c.restart()
            fine = await c.run(python="print(6 * 7)")
            assert fine.error is None and fine.text.strip() == "42", (name, fine.combined)
            failing = await c.run(python="1 / 0")
            assert failing.error is not None and failing.error.name == "ZeroDivisionError", (name, failing.combined)


async def test_a_late_thread_of_an_earlier_cell_does_not_fail_a_later_one(
    workspace: object, recordings: object
) -> None:
    async with _console(workspace, "0.0.6", recordings_dir=recordings) as c:
        started = await c.run(
            python="import threading\ngo = threading.Event()\n"
            "def late():\n    go.wait(30)\n    raise ValueError('late, from the first cell')\n"
            "threading.Thread(target=late, name='late-worker').start()"
        )
        assert started.error is None, started.combined
        benign = await c.run(python="import time\ngo.set()\ntime.sleep(0.5)\nprint('benign')")
        assert benign.error is None and benign.text.strip() == "benign", benign.combined
        notices = c.status().extra.get("notices", [])
        assert any("late-worker" in notice and "earlier cell" in notice for notice in notices), notices
        # a thread of the running cell that fails is still that cell's failure
        own = await c.run(
            python="import threading, time\nthreading.Thread(target=lambda: [][1]).start()\ntime.sleep(0.5)"
        )
        assert own.error is not None and own.error.name == "IndexError", own.combined
