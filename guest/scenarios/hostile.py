"""The guest's checks of a cell that fights back (issue 30), run by check.py (``--only hostile``).

One workspace-profile session with small caps. A cell tampers with the outcome log (the cell and
every later one must fail as ``tampered`` until ``restart()``), blinds the ``/dev`` watcher with
``rmdir /dev/shm; ln -s pts /dev/shm`` before filling ``/dev`` (stopped at the TMPDIR cap), and
floods the workspace with empty files (stopped at ``Limits(files=...)``); after each the session
must still run a cell. A second session (``hostile-hidden-names``) hides ``deny_read`` names and
the workspace's ``.git``, and the host renames, recreates and creates them later: no cell reads a
token (the remasker, ``_confinement/_remask.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

CAP_MIB = 64
FILES = 2000
TAMPER = (
    "import glob, os\n"
    "log = glob.glob(os.path.join(os.environ['TMPDIR'], '.console-bridge-*', 'outcomes.jsonl'))[0]\n"
    "os.remove(log)\nos.mkdir(log)\n"
)
BLIND_AND_FILL = (
    "import os\nos.rmdir('/dev/shm')\nos.symlink('pts', '/dev/shm')\n"
    "with open('/dev/big', 'wb') as f:\n    for i in range(1024):\n        f.write(b's' * (1 << 20))\n"
    "        print(i + 1, flush=True)\nprint('never')"
)
FLOOD = "import os\nos.makedirs('many', exist_ok=True)\nfor i in range(100000):\n    open(f'many/f{i}', 'w').close()\n"


PROFILE = """\
name: hiding
server: {sandbox.profile: workspace, sandbox.network: restricted, sandbox.tempdir: managed}
expects: {sandboxed: true, network: restricted, writable: [tmpdir, workspace]}
deny_read: ["{workspace}/secret.env", "{workspace}/cfg/a/b/c/d/deep.key"]
"""
READ = (
    "def _r(p):\n    try:\n        return open(p).read()\n    except Exception as e:\n        return type(e).__name__\n"
)


def check_hidden_names(report: Any, base: Path) -> None:
    """The host changes hidden names under a running session; Python and SQL cells read no token."""
    import os
    import shutil
    import time

    import check as bed

    from console_bridge import Console

    folder = bed.fresh_dir(base, "hidden")
    workspace = folder / "w"
    workspace.mkdir()
    (workspace / "secret.env").write_text("TOKEN-START\n")
    (folder / "hiding.yaml").write_text(PROFILE)
    console = bed.start_session(
        report,
        "hidden-start",
        lambda: Console(workspace, profile=str(folder / "hiding.yaml"), startup_timeout=bed.STARTUP_TIMEOUT),
    )
    if console is None:
        report.record("hostile-hidden-names", False, 0.0, why="no session (see hidden-start)")
        return

    def reads(path: str) -> str:
        py = console.run(python=f"print(_r({path!r}))", timeout=120).combined
        sql = console.run(sql=f"select content from read_text('{path}')", timeout=120)
        return py + sql.combined + (sql.error.message if sql.error is not None else "")

    try:
        with report.timed("hostile-hidden-names") as d:
            console.run(python=READ, timeout=120)
            seen: dict[str, str] = {"at start": reads("secret.env")}
            os.rename(workspace / "secret.env", workspace / "secret.env.bak")
            (workspace / "secret.env").write_text("TOKEN-RECREATED\n")
            time.sleep(1)
            seen["renamed away, recreated"] = reads("secret.env")
            (workspace / "n.tmp").write_text("TOKEN-OVER\n")
            os.rename(workspace / "n.tmp", workspace / "secret.env")
            time.sleep(1)
            seen["renamed over"] = reads("secret.env")
            deep = workspace / "cfg/a/b/c/d/deep.key"
            deep.parent.mkdir(parents=True)
            deep.write_text("TOKEN-DEEP\n")
            time.sleep(1)
            seen["created later, depth 6"] = reads("cfg/a/b/c/d/deep.key")
            (workspace / ".git").mkdir(exist_ok=True)  # (mcp-console's sandbox may have made an empty one)
            (workspace / ".git" / "config").write_text("[http]\n\textraheader = TOKEN-GIT\n")
            time.sleep(1)
            seen[".git created later"] = reads(".git/config")
            shutil.rmtree(workspace / ".git")
            (workspace / ".git").mkdir()
            (workspace / ".git" / "config").write_text("[http]\n\textraheader = TOKEN-GIT-AGAIN\n")
            time.sleep(1)
            seen[".git made again"] = reads(".git/config")
            leaked = [step for step, text in seen.items() if "TOKEN" in text]
            hidden = console.status().limits.get("hidden_names", {})
            after = console.run(python="print(1 + 1)", timeout=120).text.strip()
            d["leaked"], d["mechanism"] = leaked, hidden.get("enforced_by")
            held = hidden.get("enforced_by")
            d["why"] = f"a token read after: {leaked or 'none'}; held by {held}; next cell {after!r}"
            d["ok"] = not leaked and hidden.get("enforced_by") == "watched" and after == "2"
    finally:
        bed.close_quietly(console)


def _kind(result: Any) -> str | None:
    return None if result.error is None else f"{result.error.kind}/{result.error.name}"


def check_hostile(report: Any, base: Path) -> None:
    import check as bed  # the bed's helpers (check.py runs this from its own folder)

    from console_bridge import Console

    folder = bed.fresh_dir(base, "hostile")
    workspace = folder / "w"
    workspace.mkdir()
    limits = bed.limits(tmpdir=f"{CAP_MIB}MiB", files=FILES)
    console = bed.start_session(
        report,
        "hostile-start",
        lambda: Console(workspace, profile="workspace", limits=limits, startup_timeout=bed.STARTUP_TIMEOUT),
    )
    if console is None:
        for check in ("hostile-outcome-tamper", "hostile-dev-blind", "hostile-files"):
            report.record(check, False, 0.0, why="no session (see hostile-start)")
        return
    try:
        with report.timed("hostile-outcome-tamper") as d:
            kinds = [_kind(console.run(python=code, timeout=120)) for code in (TAMPER, "1 / 0", "print(1)")]
            console.restart()
            after = [_kind(console.run(python=code, timeout=120)) for code in ("print(1)", "1 / 0")]
            d["why"] = f"tamper, then a failing and a fine cell: {kinds}; after restart(): {after}"
            d["ok"] = kinds == ["tampered/OutcomeLogTampered"] * 3 and after == [None, "exception/ZeroDivisionError"]
        with report.timed("hostile-dev-blind") as d:
            result = console.run(python=BLIND_AND_FILL, timeout=300)
            written = max((int(word) for word in result.text.split() if word.isdigit()), default=0)
            note = str(console.status().limits["tmpdir"]["note"])
            bound = CAP_MIB if "remounted" in note else CAP_MIB + 256
            after_text = console.run(python="print(1 + 1)", timeout=120).text.strip()
            d["why"] = (
                f"{_kind(result)} after {written} MiB of a {CAP_MIB} MiB cap ({note[-60:]}); next cell {after_text!r}"
            )
            d["ok"] = _kind(result) == "limit/tmpdir" and written <= bound and after_text == "2"
        with report.timed("hostile-files") as d:
            result = console.run(python=FLOOD, timeout=300)
            made = len(list((workspace / "many").iterdir())) if (workspace / "many").is_dir() else 0
            after_text = console.run(python="print(1 + 1)", timeout=120).text.strip()
            d["why"] = f"{_kind(result)} after {made} files of a {FILES} limit; next cell {after_text!r}"
            # the limit counts every entry the session added to its writable folders, TMPDIR too (the
            # restart above made a new outcome folder, the cells their files): the flood may stop a few
            # short of FILES in many/ (1,993 of 2,000 seen in the login scope)
            floor = FILES - 64
            d["ok"] = _kind(result) == "limit/files" and floor < made <= FILES + 50_000 and after_text == "2"
    finally:
        bed.close_quietly(console)
    check_hidden_names(report, base)
