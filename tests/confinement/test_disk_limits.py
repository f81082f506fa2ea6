"""Bounded disk (issue 20): writes to the workspace, the recording's total, /dev/shm -- attacked.

Each attack test asserts that the attack stopped at the limit with ``error.kind == "limit"``
naming it, that what was written before is intact, and that the session still works.
The pure tests pin the bookkeeping (``_confinement._disk``, ``_recording_cap``) on planted trees.
"""

from __future__ import annotations

import hashlib
import os
import resource
from pathlib import Path
from typing import Any

import anyio
import pytest

from console_bridge import AsyncConsole, LaunchRefused, Limits
from console_bridge._confinement._disk import FolderUsage
from console_bridge._confinement._recording_cap import RecordingCap
from tests.support.binaries import binary_for

MiB = 1 << 20


def _console(workspace: Path, version: str = "0.0.6", **kwargs: object) -> AsyncConsole:
    return AsyncConsole(workspace, command=binary_for(version), **kwargs)  # type: ignore[arg-type]


async def _next(c: AsyncConsole, code: str, **kwargs: object) -> object:
    """The cell after a limit stopped the worker: never refused as Busy, never a stale running result
    (issue 30; it was a cell ending as the server answered "running", which the bridge now collects)."""
    result: Any = await c.run(python=code, **kwargs)  # type: ignore[arg-type]
    assert not result.running, result
    return result


def _size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file() and not f.is_symlink())


# ---------------------------------------------------------------- attacks (real binary)
console_tests = pytest.mark.usefixtures("no_leaks")


@pytest.mark.anyio
@pytest.mark.console
@console_tests
@pytest.mark.parametrize("files", [1, 40])
async def test_a_flood_of_writes_into_the_workspace_stops_at_the_limit(
    files: int, workspace: Path, recordings: Path
) -> None:
    before = workspace / "kept.csv"
    before.write_text("a,b\n1,2\n")
    digest = hashlib.sha256(before.read_bytes()).hexdigest()
    limit = 48 * MiB
    flood = (
        "import os\n"
        f"for n in range(3000):\n"
        f"    with open(f'flood-{{n % {files}}}.bin', 'ab') as f:\n"
        "        f.write(b'z' * (1 << 20))\n"
        "print('never')"
    )
    async with _console(workspace, profile="workspace", limits=Limits(writes=limit), recordings_dir=recordings) as c:
        assert c.status().limits["writes"]["enforced_by"] == "accounting"
        await c.run(python="x = 1")
        out = await c.run(python=flood, timeout=120)
        assert out.error is not None and out.error.kind == "limit" and out.error.name == "writes", out
        assert "never" not in out.text
        written = sum(p.stat().st_size for p in workspace.glob("flood-*.bin"))
        # stopped at the limit, give or take what one cell writes between two looks (3 GiB unchecked)
        # (blocks are counted, which may run a little ahead of the sizes)
        assert limit - 8 * MiB <= written < limit + 512 * MiB, written
        assert hashlib.sha256(before.read_bytes()).hexdigest() == digest  # nothing written before was touched
        usage = c.status().usage
        assert usage is not None and usage.writes_bytes is not None and usage.writes_bytes >= limit
        after: Any = await _next(c, "print(1 + 1)")
        assert after.error is None and after.text.strip() == "2", after
        # over the limit, a cell that writes on is stopped again; deleting gives the budget back
        again = await c.run(python=flood, timeout=120)
        assert again.error is not None and again.error.name == "writes"
        for path in workspace.glob("flood-*.bin"):
            path.unlink()
        fine: Any = await _next(c, "open('result.bin', 'wb').write(b'r' * (8 << 20))\nprint('ok')", timeout=60)
        assert fine.error is None and fine.text.strip() == "ok", fine
    assert (workspace / "result.bin").stat().st_size == 8 * MiB


@pytest.mark.anyio
@pytest.mark.console
@console_tests
async def test_a_burst_is_stopped_when_it_happens_whatever_the_trees_size(workspace: Path, recordings: Path) -> None:
    """Issue 30, item 3: 150,000 files make a walk of the workspace take about a second; a burst of 1 GiB
    then ran to its end before the walk saw it (measured with 400,000 files: 1024 MiB against a 64 MiB
    limit). The kernel's changes (``_inotify.ChangeWatch``, read every 5 ms while a cell runs and between
    the entries of a walk) stop it at the limit plus what a cell writes in a few milliseconds (87-109 MiB
    measured here at 3.4 GB/s, with 400,000 files)."""
    many = workspace / "many"
    many.mkdir()
    for n in range(150_000):
        os.close(os.open(many / f"f{n}", os.O_CREAT | os.O_WRONLY, 0o644))
    limit = 64 * MiB
    burst = "with open('big.bin', 'wb') as f:\n    for i in range(1024):\n        f.write(b'z' * (1 << 20))\n"
    async with _console(workspace, profile="workspace", limits=Limits(writes=limit), recordings_dir=recordings) as c:
        out = await c.run(python=burst, timeout=120)
        written = (workspace / "big.bin").stat().st_size
        assert out.error is not None and out.error.kind == "limit" and out.error.name == "writes", out
        assert limit <= written < limit + 192 * MiB, written >> 20
        after: Any = await _next(c, "print(1 + 1)")
        assert after.error is None and after.text.strip() == "2", after


#: An attacker's cell: a tree of empty files of its own (wide and deep), a trick, then 3 GiB in 8 MiB writes
#: (``one``: to one file; ``many``: 4 MiB files). Each trick once turned the kernel's changes off or blind.
_TRICKS = {
    # the burst in folders made just before: their watches came after they were filled (1056 MiB landed)
    "nested": ("os.makedirs('n/a/b/c')\n", "'n/a/b/c'", "one"),
    "nested-many": ("os.makedirs('m/a/b/c')\n", "'m/a/b/c'", "many"),
    # a folder made and removed at once: its watch failed, the changes were off until a walk (572 MiB)
    "blind": ("os.mkdir('gone')\nos.rmdir('gone')\n", "'.'", "one"),
    # a file removed first: a hit waited for a walk of the whole tree (228 MiB)
    "delete": ("os.unlink('victim')\n", "'.'", "one"),
    # a watched folder renamed: its subfolder's watch kept the old name (292 MiB)
    "rename": ("os.rename('seen', 'moved')\n", "'moved/sub'", "one"),
}


def _attack(trick: str) -> str:
    prelude, where, kind = _TRICKS[trick]
    tree = (
        f"import os\nd = 'own-{trick}'\nfor i in range(3000):\n"
        "    if i % 100 == 0:\n        d = f'{d}/d'; os.makedirs(f'{d}/w')\n"
        "    os.close(os.open(f'{d}/w/f{i}' if i % 2 else f'{d}/f{i}', os.O_CREAT | os.O_WRONLY, 0o644))\n"
    )
    if kind == "one":
        burst = f"with open(os.path.join({where}, 'big.bin'), 'wb') as f:\n"
        burst += "    for _ in range(384):\n        f.write(chunk)\n"
    else:
        burst = f"for n in range(768):\n    with open(os.path.join({where}, f'm{{n}}.bin'), 'wb') as f:\n"
        burst += "        f.write(chunk[: 4 << 20])\n"
    return tree + "chunk = b'z' * (8 << 20)\n" + prelude + burst + "print('never')"


def _bursts(workspace: Path) -> list[str]:
    """The files the bursts wrote (a walk of our own: the deep tree is deeper than ``rglob`` recurses)."""
    found, stack = [], [str(workspace)]
    while stack:
        with os.scandir(stack.pop()) as listing:
            for entry in listing:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif entry.name.endswith(".bin"):
                    found.append(entry.path)
    return found


@pytest.mark.anyio
@pytest.mark.console
@console_tests
@pytest.mark.parametrize("version", ["0.0.5", "0.0.6"])
async def test_a_burst_after_a_tree_of_empty_files_stops_at_the_limit_whatever_the_trick(
    version: str, workspace: Path, recordings: Path
) -> None:
    """Issue 30, item 3, against an attacker: 100,000 empty files (wide, and 200 folders deep: the walk takes about a
    second), then in one cell a tree of its own, a trick, and 3 GiB. Each burst stops at the writes limit
    plus a margin of 256 MiB (what a cell writes in the watcher's 5 ms, and while its processes are
    killed, on a loaded runner; 2-4 MiB measured here), reported as the writes limit, and the session goes on.
    ``scripts/measure_burst.py`` runs the same with 400,000 files made by the cell (a minute to make)."""
    for n in range(100):
        wide = workspace / "wide" / f"w{n}"
        wide.mkdir(parents=True)
        for i in range(900):
            os.close(os.open(wide / f"f{i}", os.O_CREAT | os.O_WRONLY, 0o644))
    deep = workspace / "deep"
    for _ in range(200):
        deep = deep / "d"
        deep.mkdir(parents=True)
        for i in range(50):
            os.close(os.open(deep / f"f{i}", os.O_CREAT | os.O_WRONLY, 0o644))
    (workspace / "victim").write_bytes(b"v" * 4096)
    (workspace / "seen" / "sub").mkdir(parents=True)
    limit, margin = 64 * MiB, 256 * MiB
    limits = Limits(writes=limit, files=200_000)
    async with _console(workspace, version, profile="workspace", limits=limits, recordings_dir=recordings) as c:
        for trick in _TRICKS:
            out = await c.run(python=_attack(trick), timeout=120)
            landed = sum(os.lstat(path).st_blocks * 512 for path in _bursts(workspace))
            assert out.error is not None and out.error.kind == "limit" and out.error.name == "writes", (trick, out)
            assert "never" not in out.text
            assert limit - 8 * MiB <= landed <= limit + margin, (trick, landed >> 20)
            for path in _bursts(workspace):
                os.unlink(path)  # the budget back for the next trick
            after: Any = await _next(c, "print(1 + 1)")
            assert after.error is None and after.text.strip() == "2", (trick, after)


@pytest.mark.anyio
@pytest.mark.console
@console_tests
async def test_a_background_writer_left_by_a_cell_is_stopped_too(workspace: Path, recordings: Path) -> None:
    code = (
        "import subprocess, sys\n"
        "subprocess.Popen([sys.executable, '-c', "
        "\"import time\\nwith open('bg.bin', 'wb') as f:\\n    for _ in range(3000):\\n"
        "        f.write(b'q' * (1 << 20)); f.flush(); time.sleep(0.002)\"], start_new_session=True)\n"
        "print('started')"
    )
    limit = 32 * MiB
    async with _console(workspace, profile="workspace", limits=Limits(writes=limit), recordings_dir=recordings) as c:
        out = await c.run(python=code)
        assert out.text.strip() == "started", out
        size = -1
        for _ in range(200):  # the writer is stopped within a few looks of passing the limit
            step = await c.run(python="import time; time.sleep(0.05)\nprint('ran')")
            # a stop between cells takes only what the cells left behind. (A stop decided as a cell
            # ended can still take the worker: the next cell then says it did not run, never passes.)
            stopped = step.error is not None and (step.error.name == "writes" or "did not run" in step.error.message)
            assert step.text.strip() == "ran" or stopped, step
            now = (workspace / "bg.bin").stat().st_size if (workspace / "bg.bin").exists() else 0
            if now == size and now >= limit - 8 * MiB:
                break
            size = now
        assert limit - 8 * MiB <= size < limit + 512 * MiB, size
        after = await c.run(python="print(1 + 1)")
        assert after.text.strip() == "2", after


@pytest.mark.anyio
@pytest.mark.console
@console_tests
async def test_a_writer_left_asleep_by_a_cell_is_stopped_when_it_wakes_in_an_idle_session(
    workspace: Path, recordings: Path
) -> None:
    """Issue 35: between cells the watch skips its looks while nothing of the session runs (its CPU time
    stands still). A process a cell left, blocked until the session is idle and then writing, is stopped."""
    os.mkfifo(workspace / "go")
    code = (
        "import subprocess, sys\n"
        "subprocess.Popen([sys.executable, '-c', \"import time\\nopen('go').read()\\n"
        "with open('bg.bin', 'wb') as f:\\n    for _ in range(3000):\\n"
        "        f.write(b'q' * (1 << 20)); f.flush(); time.sleep(0.002)\"], start_new_session=True)\n"
        "print('started')"
    )
    limit = 32 * MiB
    async with _console(workspace, profile="workspace", limits=Limits(writes=limit), recordings_dir=recordings) as c:
        out = await c.run(python=code)
        assert out.text.strip() == "started", out
        watch = c._confined.watch
        assert watch is not None
        for _ in range(200):  # the watch goes idle: its looks wait for the session to run again
            if watch.activity is None or watch.activity() is None or watch._quiet is not None:
                break
            await anyio.sleep(0.05)
        assert watch.activity is None or watch.activity() is None or watch._quiet is not None
        await anyio.to_thread.run_sync((workspace / "go").write_text, "go")  # the writer wakes: no cell runs
        size = -1
        for _ in range(400):
            await anyio.sleep(0.1)
            now = (workspace / "bg.bin").stat().st_size if (workspace / "bg.bin").exists() else 0
            if now == size and now >= limit - 8 * MiB:
                break
            size = now
        assert limit - 8 * MiB <= size < limit + 512 * MiB, size
        assert watch.hits["writes"] >= 1
        after = await c.run(python="print(1 + 1)")
        assert after.text.strip() == "2", after


@pytest.mark.anyio
@pytest.mark.console
@console_tests
@pytest.mark.parametrize("version", ["0.0.5", "0.0.6"])
async def test_many_cells_of_output_leave_at_most_the_recording_limit(
    version: str, workspace: Path, recordings: Path
) -> None:
    limit = 4 * MiB
    async with _console(workspace, version, limits=Limits(recording=limit), recordings_dir=recordings) as c:
        assert c.status().limits["recording"]["enforced_by"] == "rlimit"
        await c.run(python="state = 'kept'")
        kinds = []
        for _ in range(12):
            out = await c.run(python="import sys\nfor _ in range(2):\n    sys.stdout.write('y' * (1 << 20))\n'end'")
            kinds.append(out.error.name if out.error is not None else None)
            assert out.error is None or out.error.kind == "limit", out.error
        assert kinds[0] is None and "recording" in kinds, kinds
        after = await c.run(python="print(state)")
        assert after.text.strip() == "kept" and after.error is None, after  # nothing was killed
        recording = c.status().recording
    assert recording is not None
    assert _size(recording) <= limit, _size(recording)


@pytest.mark.anyio
@pytest.mark.console
@console_tests
async def test_dev_shm_stops_at_the_tmpdir_cap(workspace: Path, recordings: Path) -> None:
    cap = 32 * MiB
    code = "with open('/dev/shm/fill', 'wb') as f:\n    for _ in range(2000):\n        f.write(b's' * (1 << 20))\n"
    code += "print('never')"
    async with _console(workspace, limits=Limits(tmpdir=cap), recordings_dir=recordings) as c:
        out = await c.run(python=code, timeout=120)
        assert out.error is not None and out.error.kind == "limit" and out.error.name == "tmpdir", out
        assert "/dev/shm" in out.error.message and "never" not in out.text
        after: Any = await _next(c, "import os\nprint(os.path.exists('/dev/shm/fill'), 1 + 1)")
        assert after.error is None and after.text.strip().endswith("2"), after


@pytest.mark.anyio
@pytest.mark.console
@console_tests
async def test_the_files_limit_stops_a_flood_of_empty_files(workspace: Path, recordings: Path) -> None:
    """Issue 30: empty files cost the writes limit nothing, so the host's inodes fitted under it. The files
    limit counts the entries a session adds, from the kernel's changes between two walks."""
    code = (
        "import os\nos.makedirs('many', exist_ok=True)\nfor i in range(200000):\n"
        "    open(f'many/f{i}', 'w').close()\nprint('never')"
    )
    async with _console(workspace, profile="workspace", limits=Limits(files=1000), recordings_dir=recordings) as c:
        assert c.status().limits["files"]["enforced_by"] == "accounting"
        out = await c.run(python=code, timeout=120)
        assert out.error is not None and out.error.kind == "limit" and out.error.name == "files", out.combined
        assert "never" not in out.text and "--files-limit" in out.error.message
        made = len(os.listdir(workspace / "many"))
        print("files made", made)
        # the kernel's changes are read every 5 ms while a cell runs: 1,048-1,051 measured here (2,072 with the
        # walks alone); the bound leaves room for a loaded 2-core runner. The limit counts every entry the
        # session added to its writable folders, its TMPDIR's too: 995 in many/ as a normal user in CI
        assert 1000 - 64 < made <= 1000 + 5_000, made
        after: Any = await _next(c, "print(1 + 1)")
        assert after.error is None and after.text.strip().endswith("2"), after


@pytest.mark.anyio
@pytest.mark.console
@console_tests
async def test_a_cell_cannot_blind_the_dev_watcher_with_a_symlink(workspace: Path, recordings: Path) -> None:
    """Issue 30: ``rmdir /dev/shm; ln -s pts /dev/shm``, then a fill of ``/dev``: the watcher measured
    through the cell's link (devpts) and 1.5 GiB went in against a 256 MiB cap. It measures the
    sandbox's ``/dev`` tmpfs on the mount itself now, whatever the cell made of its names."""
    cap = 32 * MiB
    blind = "import os\nos.rmdir('/dev/shm')\nos.symlink('pts', '/dev/shm')\nprint(os.path.islink('/dev/shm'))"
    fill = (
        "with open('/dev/big', 'wb') as f:\n    for i in range(2000):\n        f.write(b's' * (1 << 20))\n"
        "        print(i + 1, flush=True)\nprint('never')"
    )
    async with _console(workspace, limits=Limits(tmpdir=cap), recordings_dir=recordings) as c:
        blinded = await c.run(python=blind)
        assert blinded.error is None and blinded.text.strip() == "True", blinded.combined
        out = await c.run(python=fill, timeout=120)
        assert out.error is not None and out.error.kind == "limit" and out.error.name == "tmpdir", out.combined
        assert "never" not in out.text
        written = max(int(word) for word in out.text.split() if word.isdigit())  # MiB, as the cell counted
        if "remounted" in str(c.status().limits["tmpdir"]["note"]):  # the kernel holds the cap (_devcap)
            assert written <= cap // MiB, written
        else:  # the watcher's accounting: the cap, plus what a cell writes between two looks (20 ms)
            assert written <= cap // MiB + 256, written
        after: Any = await _next(c, "print(1 + 1)")
        assert after.error is None and after.text.strip().endswith("2"), after


@pytest.mark.anyio
@pytest.mark.console
@console_tests
async def test_read_only_sessions_hold_the_write_limit_by_their_view(workspace: Path, recordings: Path) -> None:
    async with _console(
        workspace,
        limits=Limits(enforce="strict", memory=None, recording=None, processes=None, tmpdir="64MiB"),
        recordings_dir=recordings,
    ) as c:
        assert c.status().limits["writes"]["enforced_by"] == "read-only-view"
        assert c.status().usage.writes_bytes is None  # type: ignore[union-attr]
        out = await c.run(python="open('x.txt', 'w').write('x')")
        assert out.error is not None  # the workspace is read-only
    with pytest.raises(LaunchRefused, match="writes") as refused:
        async with _console(
            workspace, profile="workspace", limits=Limits(enforce="strict", memory=None, recording=None, processes=None)
        ):
            pass
    assert "writes=None" in str(refused.value)


# ---------------------------------------------------------------- the bookkeeping (pure)
def test_folder_usage_counts_each_inode_once_and_stays_on_its_side(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / "sub").mkdir(parents=True)
    (root / "a.bin").write_bytes(b"a" * MiB)
    os.link(root / "a.bin", root / "sub" / "hard.bin")  # the same inode: counted once
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"o" * (4 * MiB))
    (root / "link").symlink_to(outside)  # not followed
    excluded = root / "recordings"
    excluded.mkdir()
    (excluded / "r.bin").write_bytes(b"r" * (2 * MiB))
    usage = FolderUsage([root], exclude=[excluded])
    total = usage.measure()
    assert MiB <= total < MiB + 64 * 1024, total
    (root / "sub" / "b.bin").write_bytes(b"b" * MiB)
    assert usage.measure() - total >= MiB


def _write_watch(root: Path, limit: int, stopped: list[bool]) -> Any:
    from console_bridge._confinement._disk import WriteWatch

    watch = WriteWatch(FolderUsage([root]), limit, shm_limit=None, worker_pid=lambda: None, stop_cells=stopped.append)
    assert watch.usage is not None and watch.usage.changes is not None and watch.usage.changes.complete
    return watch


def _fast(watch: Any) -> str | None:
    """One look at the kernel's changes since the last walk, no walk (the watcher's 5 ms look)."""
    return watch.check(stop=True, writes=False, shm=False, fast=True)  # type: ignore[no-any-return]


def _close(watch: Any) -> None:
    watch.close()
    watch.usage.changes.close()


def test_deleting_files_gives_the_budget_back_before_the_next_walk(tmp_path: Path) -> None:
    """The kernel's changes name the bytes files grew by, not what a deleted file held: a cell writing
    after the host freed the budget was stopped on books from before the deletion (found as a normal
    user in CI). The walk keeps the size of every file of 256 KiB or more, so its deletion gives the bytes
    back at once, and a real overdraw still stops -- without looking at the file system's free space,
    which other processes move (a statvfs stand-in stopped this test under a parallel run)."""
    root = tmp_path / "ws"
    root.mkdir()
    stopped: list[bool] = []
    watch = _write_watch(root, 8 * MiB, stopped)
    try:
        (root / "big.bin").write_bytes(b"z" * (16 * MiB))
        assert _fast(watch) == "writes"
        assert watch.added >= 16 * MiB and len(stopped) == 1
        (root / "big.bin").unlink()
        (root / "small.bin").write_bytes(b"s" * (4 * MiB))
        (tmp_path / "beside.bin").write_bytes(b"h" * (32 * MiB))  # the host writes beside: not the session's
        assert _fast(watch) is None and len(stopped) == 1
        (root / "more.bin").write_bytes(b"m" * (8 * MiB))
        assert _fast(watch) == "writes"
        assert len(stopped) == 2
        assert watch.check(stop=False) is None and 12 * MiB <= watch.added < 13 * MiB
    finally:
        _close(watch)


def test_a_rename_or_a_second_link_gives_nothing_back(tmp_path: Path) -> None:
    """Attacks on the credit a deletion gives: the bytes of a file renamed inside the tree, or kept by a
    second link, are still there, so removing the old name frees nothing net (the new name counts whole); a
    small file's deletion (its size not kept) gives its bytes back only at the next walk. Each burst after
    them is stopped by the kernel's changes, without a walk."""
    root = tmp_path / "ws"
    (root / "sub").mkdir(parents=True)
    for name in ("renamed.bin", "linked.bin", "old.bin"):
        (root / name).write_bytes(b"k" * (8 * MiB))
    (root / "small.bin").write_bytes(b"s" * (128 << 10))
    stopped: list[bool] = []
    watch = _write_watch(root, 4 * MiB, stopped)
    try:
        os.rename(root / "renamed.bin", root / "sub" / "renamed.bin")
        os.link(root / "linked.bin", root / "sub" / "link.bin")
        (root / "linked.bin").unlink()
        (root / "small.bin").unlink()
        changes = watch.usage.changes
        changes.drain()
        # the old names gave 16 MiB back, the new ones took as much: nothing net, the small file's bytes not yet
        assert changes.removed == 3 and abs(changes.grown - changes.freed) < (64 << 10), (changes.grown, changes.freed)
        (root / "burst.bin").write_bytes(b"b" * (4 * MiB + (512 << 10)))  # past the limit net of the small file
        assert _fast(watch) == "writes" and len(stopped) == 1
        # a file removed and another made under its name: the walk's size of the old one is no credit twice
        (root / "old.bin").unlink()
        (root / "old.bin").write_bytes(b"")
        (root / "old.bin").unlink()
        changes.drain()
        assert changes.freed == 8 * MiB, changes.freed
    finally:
        _close(watch)


def _recording(tmp_path: Path) -> Path:
    rec = tmp_path / "rec"
    (rec / "capture" / "sessions" / "001").mkdir(parents=True)
    (rec / "transcript.md").write_text("# transcript\n")
    (rec / "capture" / "events.jsonl").write_text("{}\n")
    return rec


def test_the_recording_cap_cuts_only_what_the_cell_added(tmp_path: Path) -> None:
    rec = _recording(tmp_path)
    cap = RecordingCap(4 * MiB)
    cells = rec / "capture" / "sessions" / "001"
    (cells / "cell-001.txt").write_bytes(b"1" * (2 * MiB))
    cap.before_cell(rec, None)  # no server pid: nothing to set, nothing measured
    assert cap.after_cell(rec) is False
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    try:
        cap.before_cell(rec, os.getpid())  # sets our own soft RLIMIT_FSIZE: restored at once
        assert resource.getrlimit(resource.RLIMIT_FSIZE)[0] <= cap.high - 2 * MiB + MiB
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    (cells / "cell-002.txt").write_bytes(b"2" * (3 * MiB))
    (cells / "cell-002.png").write_bytes(b"\x89PNG" + b"p" * MiB)
    (cells / "cell-002.txt").chmod(0o400)  # mcp-console makes a cell's raw output read-only once written
    assert cap.after_cell(rec) is True
    assert (cells / "cell-002.txt").stat().st_mode & 0o777 == 0o400  # its mode given back
    assert (cells / "cell-001.txt").stat().st_size == 2 * MiB  # an earlier cell's output is untouched
    assert (cells / "cell-002.png").stat().st_size in (0, 4 + MiB)  # an image is never cut in half
    assert (cells / "cell-002.txt").stat().st_size < 3 * MiB  # the cell's text was cut
    assert cap.total(rec) <= cap.low


def _walked(rec: Path) -> int:
    return sum(p.lstat().st_size for p in rec.rglob("*") if not p.is_dir() or p.is_symlink())


@pytest.mark.parametrize("watch", ["inotify", "listing", "overflow"])
def test_the_recording_tree_keeps_its_total_without_listing_every_cell(
    watch: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from console_bridge._confinement import _inotify, _recording_cap

    if watch == "listing":  # no inotify (or its watches ran out): changed folders are listed
        monkeypatch.setattr(_inotify.FolderWatch, "add", lambda self, folder: False)
    rec = _recording(tmp_path)
    cells = rec / "capture" / "sessions" / "001"
    tree = _recording_cap._Tree(str(rec))
    tree.refresh()
    listed: list[str] = []
    real_listdir = os.listdir
    monkeypatch.setattr(_recording_cap.os, "listdir", lambda folder: listed.append(folder) or real_listdir(folder))
    for n in range(1, 41):
        (cells / f"cell-{n:03d}.txt").write_bytes(b"c" * (n * 1000))
        if n == 10:
            (rec / "outputs" / "001").mkdir(parents=True)  # a folder that appears later
        if n >= 10:
            (rec / "outputs" / "001" / f"plot-{n}.png").write_bytes(b"p" * 500)
        if n == 20:
            (rec / "transcript.md").write_text("# transcript\n" * 100)  # a spanning file grows
        if watch == "overflow" and n == 30:
            tree.watch.overflowed = True  # as after IN_Q_OVERFLOW: everything is listed again
        changed = tree.refresh()
        assert str(cells / f"cell-{n:03d}.txt") in changed
        assert tree.total == _walked(rec), n
    if watch == "listing":
        assert len(listed) >= 40  # the cells' folder, every cell
    else:
        # watched folders are listed once when found (and all again after an overflow), not per cell
        assert len(listed) <= (8 if watch == "overflow" else 2), listed
    tree.close()
    tree.close()  # idempotent


@pytest.mark.anyio
@pytest.mark.console
@console_tests
async def test_a_cell_sent_to_a_worker_killed_while_idle_fails_clearly(workspace: Path, recordings: Path) -> None:
    # mcp-console answers such a cell with the death notices and isError false, without running it:
    # it must not pass for a cell that ran.
    from console_bridge._confinement._disk import kill_cells

    async with _console(workspace, recordings_dir=recordings) as c:
        await c.run(python="x = 1")
        worker = c._confined.worker.process  # the worker the session adopted before that cell
        assert worker is not None
        kill_cells(worker)
        lost = await c.run(python="print('ran')")
        assert lost.error is not None and lost.error.kind == "worker_exited", lost
        assert "signal 9" in lost.error.message and "ran" not in lost.text
        again = await c.run(python="print('ran')")
        assert again.error is None and again.text.strip() == "ran", again
