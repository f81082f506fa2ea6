"""Issue 30, item 3, measured against an attacker: a cell makes many empty files, then a burst.

One session per run, ``Limits(writes="64MiB", files=...)``; the cell builds the tree itself (wide:
1,000 files a folder; deep: a chain of folders, 10 files each), plays a trick, then writes ``--burst``
MiB (one file in 8 MiB writes, or 4 MiB files). Printed: the walk of the tree (seconds), the bytes that
landed against the limit, the seconds from the burst's first byte to the cell's end, how the cell ended,
and whether the next cell ran. The tricks:

* ``none``: the burst into the workspace's top folder.
* ``nested``: the burst into folders the cell makes just before (``os.makedirs('a/b/c')``): the
  watcher adds a watch to a new folder when it reads its creation, later than the cell fills it.
* ``delete``: one file removed first (a fast hit waited for a walk when files were removed).
* ``rename``: a folder the watcher has seen, renamed, the burst into a folder inside it.
* ``blind``: a folder made and removed at once (its watch fails: the kernel's changes were off until a walk).

    python scripts/measure_burst.py --files 100000 --shape wide --trick nested
    python scripts/measure_burst.py --files 400000 --files-limit 500000 --shape deep --trick delete
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

from console_bridge import AsyncConsole, Limits
from console_bridge._confinement._disk import FolderUsage

MiB = 1 << 20


def cell(files: int, shape: str, trick: str, burst: int, kind: str) -> str:
    """The attacker's cell: the tree, the trick, the burst (its start time in ``t0``)."""
    if shape == "wide":
        build = (
            f"for i in range({files}):\n"
            "    if i % 1000 == 0:\n        d = f'tree/w{i // 1000}'; os.makedirs(d)\n"
            "    os.close(os.open(f'{d}/f{i}', os.O_CREAT | os.O_WRONLY, 0o644))\n"
        )
    else:
        build = (
            "d = 'tree'\n"
            f"for i in range({files}):\n"
            "    if i % 10 == 0:\n        d = f'{d}/d' if len(d) < 3000 else f'tree/r{i}'; os.makedirs(d)\n"
            "    os.close(os.open(f'{d}/f{i}', os.O_CREAT | os.O_WRONLY, 0o644))\n"
        )
    where = "'.'"
    if trick == "nested":
        where = "'n/a/b/c'"
    elif trick == "rename":
        where = "'moved/sub'"
    prelude = {
        "none": "",
        "nested": "os.makedirs('n/a/b/c')\n",
        "delete": "os.unlink('victim')\n",
        "rename": "os.rename('seen', 'moved')\n",
        "blind": "os.mkdir('gone')\nos.rmdir('gone')\n",
    }[trick]
    if kind == "one":
        write = (
            f"with open(os.path.join({where}, 'big.bin'), 'wb') as f:\n"
            f"    for _ in range({burst // 8}):\n        f.write(chunk)\n"
        )
    else:
        write = (
            f"for n in range({burst // 4}):\n"
            f"    with open(os.path.join({where}, f'm{{n}}.bin'), 'wb') as f:\n        f.write(chunk[: 4 << 20])\n"
        )
    return (
        "import os, time\nos.makedirs('tree', exist_ok=True)\n"
        + build
        + "chunk = b'z' * (8 << 20)\n"
        + "open('t0', 'w').write(repr(time.time()))\n"
        + prelude
        + write
        + "print('burst done')\n"
    )


def landed(workspace: Path) -> int:
    """The bytes of the burst's files (a stack, not ``os.walk``: a deep tree is deeper than Python recurses)."""
    total, stack = 0, [str(workspace)]
    while stack:
        with os.scandir(stack.pop()) as listing:
            for entry in listing:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif entry.name.endswith(".bin"):
                    total += entry.stat(follow_symlinks=False).st_blocks * 512
    return total


async def measure(args: argparse.Namespace) -> int:
    root = Path(tempfile.mkdtemp(prefix="measure-burst-", dir=args.dir))
    workspace, recordings = root / "ws", root / "rec"
    workspace.mkdir()
    recordings.mkdir()
    (workspace / "victim").write_bytes(b"v" * 4096)
    (workspace / "seen" / "sub").mkdir(parents=True)
    limit = args.limit * MiB
    try:
        limits = Limits(writes=limit, files=args.files_limit)
        kwargs: dict[str, object] = {"command": args.command} if args.command else {}
        async with AsyncConsole(
            workspace, profile="workspace", limits=limits, recordings_dir=recordings, **kwargs
        ) as console:  # type: ignore[arg-type]
            began = time.time()
            out = await console.run(
                python=cell(args.files, args.shape, args.trick, args.burst, args.kind), timeout=args.timeout
            )
            ended = time.time()
            after = await console.run(python="print(1 + 1)")
        t0 = float((workspace / "t0").read_text()) if (workspace / "t0").exists() else began
        usage = FolderUsage([workspace])
        walk = time.monotonic()
        usage.measure()
        walk = time.monotonic() - walk
        got = landed(workspace)
        error = out.error
        print(
            f"files={args.files} shape={args.shape} trick={args.trick} burst={args.kind}:{args.burst}MiB "
            f"entries={usage.entries} walk={walk:.2f}s tree={t0 - began:.1f}s "
            f"landed={got / MiB:.0f}MiB limit={args.limit}MiB over={(got - limit) / MiB:+.0f}MiB "
            f"burst_to_end={ended - t0:.2f}s ended={error.kind + ':' + error.name if error else 'ok'} "
            f"next={'ok' if after.error is None and '2' in after.text else after.combined!r}"
        )
        return 0
    finally:
        # (rm, not shutil.rmtree: a deep tree is deeper than Python's recursion limit)
        subprocess.run(["rm", "-rf", "--", str(root)], check=False)  # noqa: ASYNC221 (the run is over)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=100_000 - 200)
    parser.add_argument("--files-limit", type=int, default=100_000)
    parser.add_argument("--shape", choices=["wide", "deep"], default="wide")
    parser.add_argument("--trick", choices=["none", "nested", "delete", "rename", "blind"], default="none")
    parser.add_argument("--kind", choices=["one", "many"], default="one")
    parser.add_argument("--burst", type=int, default=3072, help="MiB")
    parser.add_argument("--limit", type=int, default=64, help="the writes limit, MiB")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--command", default=os.environ.get("CONSOLE_BRIDGE_TEST_MCP_CONSOLE_0_0_6"))
    parser.add_argument("--dir", default=None, help="where the workspace goes (default: the temp folder)")
    return anyio.run(measure, parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
