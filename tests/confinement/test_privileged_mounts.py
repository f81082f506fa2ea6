"""Issue 42, item 3: a privileged helper never resolves a path a cell controls.

The remasker mounts as the session's root. A cell that plants a symlink at a hidden name (``notyet.env
-> /usr/lib/os-release``) once had the helper mount over the *target* in the session's view; a folder
target or ``/proc/1/root/...`` ended the session. Every mount now targets a descriptor opened one
name at a time without following a symlink (``_remask.open_beneath``), beneath the session's view: the
symlink itself is masked, its target is untouched, and the session goes on. Python and R cells, file,
folder, ``/proc`` and dangling targets, planted before the start (the view's masks) and while the
session runs (the remasker); as root and as a normal user (the non-root CI stage).
"""

from __future__ import annotations

import errno
import os
import shutil
import textwrap
import time
from pathlib import Path

import pytest

from console_bridge import AsyncConsole
from console_bridge._confinement._remask import open_beneath
from tests.support.binaries import binary_for

HAS_R = shutil.which("R") is not None
#: name -> where a cell points it
TARGETS = {
    "file.env": "/usr/lib/os-release",
    "folder.env": "/usr/share/doc",
    "proc.env": "/proc/1/root/etc/hostname",
    "dangling.env": "/no/such/place",
}


def _profile(tmp_path: Path) -> Path:
    profile = tmp_path / "planted.yaml"
    names = ", ".join(f'"{{workspace}}/{name}"' for name in [*TARGETS, "r-file.env", "r-folder.env"])
    profile.write_text(
        textwrap.dedent(
            f"""\
            name: planted
            server: {{sandbox.profile: workspace, sandbox.network: restricted, sandbox.tempdir: managed}}
            expects: {{sandboxed: true, network: restricted, writable: [tmpdir, workspace]}}
            deny_read: [{names}]
            """
        )
    )
    return profile


LOOK = """\
import os
def _look(name):
    try:
        return ("link" if os.path.islink(name) else "masked") + ":" + repr(open(name).read()[:40])
    except Exception as exc:
        return ("link" if os.path.islink(name) else "masked") + ":" + type(exc).__name__
"""


@pytest.mark.anyio
@pytest.mark.console
@pytest.mark.parametrize("version", ["0.0.5", "0.0.6"])
async def test_a_symlink_planted_at_a_hidden_name_is_masked_itself_never_its_target(
    version: str, tmp_path: Path, workspace: Path, recordings: Path
) -> None:
    os_release = Path("/usr/lib/os-release").read_text()
    languages = ("python", "r") if HAS_R else ("python",)
    # Planted before the start (an earlier session's cell): the view's masks at start (apply_plan).
    early = {"file.env", "folder.env"}
    for name in early:
        (workspace / name).symlink_to(TARGETS[name])
    async with AsyncConsole(
        workspace,
        command=binary_for(version),
        profile=str(_profile(tmp_path)),
        recordings_dir=recordings,
        languages=languages,
    ) as c:
        # Planted while it runs: a missing hidden name is the bridge's placeholder (issue 42, item 1), so
        # a cell gets the name only once the host removed it; then the remasker masks what the cell made.
        late = [name for name in TARGETS if name not in early] + (["r-file.env", "r-folder.env"] if HAS_R else [])
        refused = await c.run(python=f"import os\nos.symlink('/etc/hostname', {late[0]!r})")
        assert refused.error is not None, refused.combined
        for name in late:
            (workspace / name).unlink()
        time.sleep(0.5)
        plant = "".join(f"os.symlink({TARGETS[name]!r}, {name!r})\n" for name in late if name in TARGETS)
        planted = await c.run(python="import os\n" + plant + LOOK)
        assert planted.error is None, planted.combined
        if HAS_R:
            made = await c.run(
                r='file.symlink("/usr/lib/os-release", "r-file.env"); file.symlink("/usr/share/doc", "r-folder.env")'
            )
            assert made.error is None, made.combined
        time.sleep(1.0)  # the remasker's turn
        names = [*TARGETS, *(["r-file.env", "r-folder.env"] if HAS_R else [])]
        seen = await c.run(python="for _n in " + repr(names) + ":\n    print(_n, _look(_n))")
        assert seen.error is None, seen.combined
        lines = dict(line.split(" ", 1) for line in seen.text.splitlines())
        for name in names:
            # the name is a mount point now (no symlink left at it in the view), empty or unreadable
            assert lines[name].startswith("masked:"), (name, lines[name])
            assert "ID=" not in lines[name] and "NAME=" not in lines[name], (name, lines[name])
        # the targets are what they were, in the session's view
        targets = await c.run(
            python="print(open('/usr/lib/os-release').read()[:200])\nprint(len(os.listdir('/usr/share/doc')) > 0)"
        )
        assert os_release[:200].strip() in targets.text and "True" in targets.text, targets.combined
        if HAS_R:
            r_reads = await c.run(r='cat(readLines("/usr/lib/os-release", n = 1), "\\n")')
            assert os_release.splitlines()[0] in r_reads.text, r_reads.combined
        # the session still answers: no mount failure ended it
        assert (await c.run(python="print(6 * 7)")).text.strip() == "42"
        assert c.status().limits["hidden_names"]["enforced_by"] == "watched"
    # the host's side is untouched: the symlinks are the cell's, the targets the host's
    for name, target in TARGETS.items():
        assert os.readlink(workspace / name) == target
    assert Path("/usr/lib/os-release").read_text() == os_release


def test_open_beneath_follows_no_symlink_on_the_way_or_at_the_end(tmp_path: Path) -> None:
    real = tmp_path / "real"
    (real / "inner").mkdir(parents=True)
    (real / "inner" / "file").write_text("x")
    (tmp_path / "hop").symlink_to(real)
    (real / "link").symlink_to("/etc/hostname")
    fd = open_beneath(str(real / "inner" / "file"))
    try:
        assert os.path.samestat(os.fstat(fd), (real / "inner" / "file").stat())
    finally:
        os.close(fd)
    fd = open_beneath(str(real / "link"))  # the symlink itself, not /etc/hostname
    try:
        assert os.path.samestat(os.fstat(fd), os.lstat(real / "link"))
    finally:
        os.close(fd)
    for way, code in ((tmp_path / "hop" / "inner" / "file", errno.ENOTDIR), (real / "none" / "x", errno.ENOENT)):
        with pytest.raises(OSError) as caught:
            open_beneath(str(way))
        assert caught.value.errno == code, (way, caught.value)
    with pytest.raises(OSError, match="not a plain path"):
        open_beneath(str(real / ".." / "real" / "inner"))
    top = os.open(real, os.O_PATH | os.O_DIRECTORY)
    try:  # beneath a folder given as the top: an absolute path is read below it
        fd = open_beneath("/inner/file", top)
        assert os.path.samestat(os.fstat(fd), (real / "inner" / "file").stat())
        os.close(fd)
    finally:
        os.close(top)
