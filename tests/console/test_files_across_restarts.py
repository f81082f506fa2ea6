"""A session's TMPDIR files across a restart, as after a Jupyter kernel restart: they stay.

mcp-console gives a fresh worker a fresh, empty folder and removes the old one; the bridge moves
the files aside and into the new worker's folder around every restart it makes (``restart()``, a
timed-out cell it restarts). A worker that dies (a crash, a memory kill) takes them with it, and
the failure says so. Real binaries, both qualified versions.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from console_bridge import AsyncConsole, NotAllowed
from tests.support.binaries import binary_for

pytestmark = [pytest.mark.anyio, pytest.mark.console]

VERSIONS = ["0.0.5", "0.0.6"]


def _console(version: str, workspace: Path, recordings: Path) -> AsyncConsole:
    return AsyncConsole(workspace, command=binary_for(version), recordings_dir=recordings)


@pytest.mark.parametrize("version", VERSIONS)
async def test_restart_keeps_the_files_put_and_written_and_loses_the_memory(
    version: str, workspace: Path, recordings: Path
) -> None:
    async with _console(version, workspace, recordings) as console:
        await console.put_file("in/data.csv", b"a,b\n1,2\n")
        await console.run(
            python=(
                "import os; t = os.environ['TMPDIR']; x = 1\n"
                "open(os.path.join(t, 'result.txt'), 'w').write('42')\n"
                "os.makedirs(os.path.join(t, 'out', 'deep')); open(os.path.join(t, 'out', 'deep', 'f'), 'w').write('f')"
            )
        )
        await console.restart()
        assert await console.get_file("in/data.csv") == b"a,b\n1,2\n"
        assert await console.get_file("result.txt") == b"42" and await console.get_file("out/deep/f") == b"f"
        assert await console.list_files() == ["in/data.csv", "out/deep/f", "result.txt"]
        seen = await console.run(
            python="import os\nprint(open(os.path.join(os.environ['TMPDIR'], 'in', 'data.csv')).read(), end='')\nx"
        )
        assert seen.text.startswith("a,b\n1,2\n")
        assert seen.error is not None and seen.error.name == "NameError"  # the memory went, the files stayed
        # the fresh worker's own folder (the outcome hooks') is its own: a failure is still read as one
        failed = await console.run(python="raise KeyError('k')")
        assert failed.error is not None and failed.error.name == "KeyError"
        # a second restart carries them again, and a name the new worker already has is never replaced
        await console.restart()
        assert await console.get_file("result.txt") == b"42"


@pytest.mark.parametrize("version", VERSIONS)
async def test_a_copy_of_the_bridge_folder_a_cell_made_never_hides_the_next_errors(
    version: str, workspace: Path, recordings: Path
) -> None:
    # A cell that backs up its TMPDIR copies the bridge's outcome folder too; carried over the
    # restart, the copy must not be taken for the fresh worker's (errors would read as none).
    async with _console(version, workspace, recordings) as console:
        copied = await console.run(
            python="import os, shutil; t = os.environ['TMPDIR']\nshutil.copytree(t, os.path.join(t, 'backup'))"
        )
        assert copied.error is None, copied.error
        await console.restart()
        carried = await console.run(
            python="import os\nprint([n for n in os.listdir(os.path.join(os.environ['TMPDIR'], 'backup'))])"
        )
        assert "'.console-bridge-" in carried.text, carried.text  # the copy crossed the restart
        for _ in range(2):
            failed = await console.run(python="1 / 0")
            assert failed.error is not None and failed.error.name == "ZeroDivisionError", failed
        await console.restart()
        failed = await console.run(sql="select * from no_such_table")
        assert failed.error is not None, failed


@pytest.mark.parametrize("version", VERSIONS)
async def test_planted_links_cross_a_restart_as_links_and_are_still_refused(
    version: str, workspace: Path, recordings: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "host-secret.txt").write_text("secret")
    async with _console(version, workspace, recordings) as console:
        await console.run(
            python=(
                "import os; t = os.environ['TMPDIR']\n"
                f"os.symlink({str(outside / 'host-secret.txt')!r}, os.path.join(t, 'leak.txt'))\n"
                f"os.symlink({str(outside)!r}, os.path.join(t, 'dir'))\n"
                # names like the bridge's own folders: never carried, never a way into the TMPDIR root
                "os.mkdir(os.path.join(t, '.console-bridge-kept')); open(os.path.join(t, '.console-bridge-x'), 'w')\n"
                "for i in range(3000): open(os.path.join(t, f'many-{i}'), 'w').close()"
            )
        )
        await console.restart()
        for name in ("leak.txt", "dir/host-secret.txt"):
            with pytest.raises(NotAllowed):
                await console.get_file(name)
        names = await console.list_files("many-*")
        assert len(names) == 3000
        left = await console.run(
            python="import os; t = os.environ['TMPDIR']\n"
            "print(sorted(n for n in os.listdir(t) if not n.startswith('many-')))\n"
            "print(os.path.islink(os.path.join(t, 'leak.txt')), os.readlink(os.path.join(t, 'dir')))"
        )
        lines = left.text.splitlines()
        assert "'leak.txt'" in lines[0] and "'dir'" in lines[0] and ".console-bridge-x" not in lines[0]
        assert ".console-bridge-kept" not in lines[0]
        assert lines[1] == f"True {outside}"
        assert sorted(os.listdir(outside)) == ["host-secret.txt"]  # nothing was written through a link


@pytest.mark.parametrize("version", VERSIONS)
async def test_a_worker_that_dies_takes_its_files_and_says_so(version: str, workspace: Path, recordings: Path) -> None:
    async with _console(version, workspace, recordings) as console:
        await console.put_file("data.csv", b"1\n")
        died = await console.run(python="import os; os._exit(3)")
        assert died.error is not None and died.error.kind == "worker_exited"
        assert "files in its TMPDIR" in died.error.message
        with pytest.raises(NotAllowed):
            await console.get_file("data.csv")
        assert (await console.run(python="print('alive')")).text == "alive\n"


@pytest.mark.parametrize("version", VERSIONS)
async def test_a_cell_that_ages_its_folder_still_gets_the_files_put_for_it(
    version: str, workspace: Path, recordings: Path
) -> None:
    # The worker's folder is the one its startup code marked, not merely the newest: a cell may set
    # its folder's mtime to the past, and the session's other, older sandbox folder must not win.
    async with _console(version, workspace, recordings) as console:
        aged = await console.run(
            python="import os\nos.utime(os.path.dirname(os.environ['TMPDIR']), (1, 1))\nprint(os.environ['TMPDIR'])"
        )
        assert aged.error is None, aged.error
        path = await console.put_file("data.csv", b"1,2\n")
        assert path == f"{aged.text.strip()}/data.csv"  # the worker's own folder, not the older one
        seen = await console.run(python=f"print(open({path!r}).read(), end='')")
        assert seen.text == "1,2\n" and seen.error is None, (seen.text, seen.error)
        await console.restart()
        assert await console.get_file("data.csv") == b"1,2\n"


async def test_what_a_restart_cannot_carry_is_said(
    workspace: Path, recordings: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from console_bridge._console import _tmpdir_io

    monkeypatch.setattr(_tmpdir_io, "MAX_CARRIED", 5)  # (10,000 in use: a folder counts as one)
    async with _console("0.0.6", workspace, recordings) as console:
        await console.run(python="import os\nfor i in range(8): open(os.path.join(os.environ['TMPDIR'], f'f{i}'), 'w')")
        await console.restart()
        assert await console.list_files() == ["f0", "f1", "f2", "f3", "f4"]
        notices = console.status().extra["notices"]
        assert any("could not carry 3 entries of the TMPDIR" in notice for notice in notices), notices
