"""Issue 42, item 1: a hidden name is never an inode a cell holds.

With a deny rule for a name that does not exist yet in a writable place, a cell could make it, keep
it open (a file, a FIFO, a folder, a hard link, a rename over it) and read through that what the host
writes there later: a mount over the name does not revoke an open file. The bridge holds such a name
with a placeholder of its own, made before the server starts and masked in the view from the start
(``_confinement/_shared_roots.py``), so every way to make or hold it fails; what the host writes
later never reaches a cell; the session still works; the last session out removes what is still
empty. Python and R; as root and as a normal user (the non-root CI stage).
"""

from __future__ import annotations

import shutil
import stat
import textwrap
import time
from pathlib import Path

import pytest

from console_bridge import AsyncConsole
from console_bridge._confinement._shared_roots import placeholders
from tests.support.binaries import binary_for

HAS_R = shutil.which("R") is not None
CANARY = "CANARY-LATER-BY-HOST"
NAMES = ("later.env", "fifo.env", "dir.env", "link.env", "moved.env", "r-later.env", "cfg/a/b/deep.key")


def _profile(tmp_path: Path) -> Path:
    profile = tmp_path / "held.yaml"
    rules = ", ".join(f'"{{workspace}}/{name}"' for name in NAMES)
    profile.write_text(
        textwrap.dedent(
            f"""\
            name: held
            server: {{sandbox.profile: workspace, sandbox.network: restricted, sandbox.tempdir: managed}}
            expects: {{sandboxed: true, network: restricted, writable: [tmpdir, workspace]}}
            deny_read: [{rules}]
            """
        )
    )
    return profile


ATTACK = """\
import errno, os
held, tried = [], {}
def _try(tag, act):
    try:
        got = act()
        if isinstance(got, int):
            held.append(got)
        tried[tag] = "made"
    except OSError as exc:
        tried[tag] = errno.errorcode.get(exc.errno, str(exc.errno))
_try("open", lambda: os.open("later.env", os.O_RDWR | os.O_CREAT, 0o600))
_try("fifo", lambda: os.mkfifo("fifo.env"))
_try("mkdir", lambda: os.mkdir("dir.env"))
open("mine", "w").close()
_try("link", lambda: os.link("mine", "link.env"))
open("mine2", "w").close()
_try("rename", lambda: os.rename("mine2", "moved.env"))
_try("deep", lambda: os.makedirs("cfg/a/b"))
_try("unlink", lambda: os.unlink("later.env"))
_try("read", lambda: os.open("later.env", os.O_RDONLY))
print(sorted(tried.items()))
"""

AFTER = """\
seen = [os.pread(fd, 200, 0) for fd in held]
for name in ("later.env", "fifo.env", "dir.env", "link.env", "moved.env", "mine", "mine2"):
    try:
        seen.append(open(name, "rb").read(200))
    except OSError as exc:
        seen.append(type(exc).__name__.encode())
try:
    seen.append(repr(os.listdir("cfg")).encode())
except OSError as exc:
    seen.append(type(exc).__name__.encode())
print(b"|".join(seen))
"""


@pytest.mark.anyio
@pytest.mark.console
@pytest.mark.parametrize("version", ["0.0.5", "0.0.6"])
async def test_no_cell_holds_a_hidden_name_the_host_writes_later(
    version: str, tmp_path: Path, workspace: Path, recordings: Path
) -> None:
    languages = ("python", "r") if HAS_R else ("python",)
    async with AsyncConsole(
        workspace,
        command=binary_for(version),
        profile=str(_profile(tmp_path)),
        recordings_dir=recordings,
        languages=languages,
    ) as c:
        # the bridge's placeholders, on the host: a file the host may write, a folder on the deep way
        info = (workspace / "later.env").lstat()
        assert stat.S_ISREG(info.st_mode) and info.st_size == 0 and stat.S_IMODE(info.st_mode) == 0o600
        assert (workspace / "cfg").is_dir() and not any((workspace / "cfg").iterdir())
        attacked = await c.run(python=ATTACK)
        assert attacked.error is None, attacked.combined
        tried = dict(eval(attacked.text.strip()))
        for tag in ("open", "fifo", "mkdir", "link", "rename", "deep", "unlink"):
            assert tried[tag] != "made", (tag, tried)
        if HAS_R:
            r_try = await c.run(
                r='x <- tryCatch({ f <- file("r-later.env", open = "w+"); "made" }, error = function(e) "refused", '
                'warning = function(w) "refused"); cat(x, dir.create("cfg/r", showWarnings = FALSE), "\\n")'
            )
            assert "made" not in r_try.text and "FALSE" in r_try.text, r_try.combined
        # the host writes its secret under every name, later, in place and by making the deep way
        for name in ("later.env", "fifo.env", "dir.env", "link.env", "moved.env", "r-later.env"):
            with open(workspace / name, "w") as handle:  # (the placeholder: opened, truncated, written)
                handle.write(CANARY)
        (workspace / "cfg" / "a" / "b").mkdir(parents=True)
        (workspace / "cfg" / "a" / "b" / "deep.key").write_text(CANARY)
        time.sleep(0.5)
        after = await c.run(python=AFTER)
        assert after.error is None, after.combined
        assert CANARY not in after.combined, after.combined
        if HAS_R:
            r_read = await c.run(
                r='cat(tryCatch(readLines("later.env", warn = FALSE), error = function(e) "denied"), '
                'tryCatch(readLines("cfg/a/b/deep.key", warn = FALSE), error = function(e) "denied"), "\\n")'
            )
            assert CANARY not in r_read.combined, r_read.combined
        assert (await c.run(python="print(6 * 7)")).text.strip() == "42"
    # what the host wrote stays; the placeholders nobody wrote went with the last session
    assert (workspace / "later.env").read_text() == CANARY
    assert (workspace / "cfg" / "a" / "b" / "deep.key").read_text() == CANARY
    assert (workspace / "mine").exists()  # the cell's own files are the cell's


@pytest.mark.anyio
@pytest.mark.console
async def test_placeholders_nobody_wrote_are_gone_after_the_session(
    tmp_path: Path, workspace: Path, recordings: Path
) -> None:
    async with AsyncConsole(
        workspace, command=binary_for("0.0.6"), profile=str(_profile(tmp_path)), recordings_dir=recordings
    ) as c:
        assert (workspace / "later.env").exists() and (workspace / "cfg").is_dir()
        assert (await c.run(python="print(1 + 1)")).text.strip() == "2"
    left = sorted(str(path.relative_to(workspace)) for path in workspace.rglob("*"))
    assert left == [], left


def test_placeholders_are_the_first_missing_step_and_nothing_past_a_symlink(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    (ws / "here.env").write_text("x")
    (ws / "hop").symlink_to(tmp_path)
    (ws / "afile").write_text("x")
    hidden = [
        str(ws / "later.env"),  # missing: a file
        str(ws / "here.env"),  # there: nothing
        str(ws / "sub" / "deep" / "x.key"),  # the way is missing from "deep": a folder
        str(ws / "hop" / "y.env"),  # past a symlink: elsewhere
        str(ws / "afile" / "z"),  # past a file: nothing
        str(ws / ".ssh"),  # a store that is a folder
        str(tmp_path / "outside.env"),  # not in a writable folder
    ]
    held = placeholders(hidden, [ws], folders=[str(ws / ".ssh")])
    assert sorted((step, folder) for _, step, folder in held) == [
        (".ssh", True),
        ("later.env", False),
        ("sub/deep", True),
    ]
    assert all(root == ws for root, _, _ in held)
