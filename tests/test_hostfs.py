"""``console_bridge._hostfs``: no host-side file operation follows a symlink a cell could have planted."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tarfile
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from console_bridge import NotAllowed
from console_bridge._cells._recordings import FINISHED, Recordings
from console_bridge._hostfs import (
    copy_tree,
    open_dir,
    open_root,
    read_file,
    remove_tree,
    split_name,
    walk_tree,
    write_file,
)


def snapshot(folder: Path) -> dict[str, tuple[int, bytes | str | None]]:
    """Every entry under ``folder`` (and the folder itself): mode and contents (or link target)."""
    seen: dict[str, tuple[int, bytes | str | None]] = {".": (folder.lstat().st_mode, None)}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = Path(root) / name
            info = path.lstat()
            if stat.S_ISLNK(info.st_mode):
                content: bytes | str | None = os.readlink(path)
            elif stat.S_ISREG(info.st_mode):
                content = path.read_bytes()
            else:
                content = None
            seen[str(path.relative_to(folder))] = (info.st_mode, content)
    return seen


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "outside"
    (folder / "sub").mkdir(parents=True)
    (folder / "secret.txt").write_text("secret")
    (folder / "sub" / "deep.txt").write_text("deep")
    folder.chmod(0o750)
    return folder


@pytest.fixture
def root(tmp_path: Path, outside: Path) -> Path:
    folder = tmp_path / "root"
    (folder / "real").mkdir(parents=True)
    (folder / "real" / "file.txt").write_text("inside")
    (folder / "link").symlink_to(outside)
    (folder / "real" / "up").symlink_to("../..")
    (folder / "filelink").symlink_to(outside / "secret.txt")
    return folder


@pytest.mark.parametrize("name", ["", ".", "/etc/passwd", "a/../b", "..", "a/\x00b", "./"])
def test_split_name_refuses(name: str) -> None:
    with pytest.raises(NotAllowed):
        split_name(name)


def test_split_name_normalises() -> None:
    assert split_name("a//./b/") == ["a", "b"]


def test_read_file_refuses_links_fifos_and_big_files(root: Path) -> None:
    assert read_file(root, "real/file.txt", 100) == b"inside"
    for name in ("filelink", "link/secret.txt", "real/up/outside/secret.txt"):
        with pytest.raises(NotAllowed, match="symlink"):
            read_file(root, name, 100)
    with pytest.raises(NotAllowed, match="over the limit"):
        read_file(root, "real/file.txt", 3)
    os.mkfifo(root / "fifo")
    with pytest.raises(NotAllowed, match="not a regular file"):
        read_file(root, "fifo", 100)  # returns at once: a FIFO is never waited on
    with pytest.raises(FileNotFoundError):
        read_file(root, "missing", 100)


def test_write_file_creates_folders_never_through_links(root: Path, outside: Path) -> None:
    before = snapshot(outside)
    write_file(root, "new/deeper/out.txt", b"data")
    assert (root / "new" / "deeper" / "out.txt").read_bytes() == b"data"
    with pytest.raises(FileExistsError):
        write_file(root, "new/deeper/out.txt", b"again")
    write_file(root, "new/deeper/out.txt", b"again", replace=True)
    assert (root / "new" / "deeper" / "out.txt").read_bytes() == b"again"
    for name in ("link/planted.txt", "real/up/outside/planted.txt"):
        with pytest.raises(NotAllowed):
            write_file(root, name, b"x")
    with pytest.raises(FileExistsError):  # O_EXCL: a symlink in the last place is not written through
        write_file(root, "filelink", b"x")
    write_file(root, "filelink", b"replaced", replace=True)  # replace removes the link itself
    assert not (root / "filelink").is_symlink() and (root / "filelink").read_bytes() == b"replaced"
    assert snapshot(outside) == before


def test_remove_tree_unlinks_links_as_links(root: Path, outside: Path) -> None:
    before = snapshot(outside)
    (root / "real" / "ro").mkdir()
    (root / "real" / "ro" / "f").write_text("x")
    (root / "real" / "ro" / "f").chmod(0o400)
    (root / "real" / "ro").chmod(0o500)
    (root / "real" / "dirlink").symlink_to(outside / "sub")
    with pytest.raises(NotAllowed):  # a symlink on the way is refused, not walked
        remove_tree(root, "link/sub")
    remove_tree(root, "link")  # the link goes, not its target
    assert not (root / "link").exists() and not (root / "link").is_symlink()
    remove_tree(root, "real")
    assert not (root / "real").exists()
    assert snapshot(outside) == before
    with pytest.raises(FileNotFoundError):
        remove_tree(root, "real")


def test_copy_tree_skips_links_and_special_files(root: Path, outside: Path, tmp_path: Path) -> None:
    before = snapshot(outside)
    os.mkfifo(root / "real" / "fifo")
    (root / "real" / "link-to-secret").symlink_to(outside / "secret.txt")
    dest = tmp_path / "dest"
    dest.mkdir()
    report = copy_tree(root, "real", dest, "copy/real")
    assert report.files == ["file.txt"]
    assert sorted(report.skipped) == ["fifo", "link-to-secret", "up"]
    assert (dest / "copy" / "real" / "file.txt").read_text() == "inside"
    assert sorted(p.name for p in (dest / "copy" / "real").iterdir()) == ["file.txt"]
    with pytest.raises(FileExistsError):
        copy_tree(root, "real", dest, "copy/real")
    with pytest.raises(NotAllowed):
        copy_tree(root, "link", dest, "other")
    with pytest.raises(NotAllowed, match="limit"):
        copy_tree(root, "real", dest, "capped", max_bytes=2)
    assert [entry.name for entry in walk_tree(root, "real")] == ["file.txt"]
    assert snapshot(outside) == before


def test_root_may_be_an_open_descriptor_and_is_not_closed(root: Path) -> None:
    fd = open_dir(root)
    try:
        write_file(fd, "via-fd.txt", b"fd")
        assert read_file(fd, "via-fd.txt", 10) == b"fd"
        remove_tree(fd, "via-fd.txt")
        with open_root(fd) as same:
            assert same == fd
        os.fstat(fd)  # still open
    finally:
        os.close(fd)
    with pytest.raises(NotAllowed, match="symlink"):
        open_dir(root / "link")


# ------------------------------------------------------------------ property: never outside the root
_PARTS = st.sampled_from(["a", "b", "link", "up", "abs", "filelink", "..", ".", "", "real"])
_NAMES = st.builds(
    lambda lead, parts: lead + "/".join(parts),
    st.sampled_from(["", "", "/", "./"]),
    st.lists(_PARTS, min_size=1, max_size=6),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=_NAMES, data=st.binary(max_size=8))
def test_random_names_never_resolve_outside_the_root(name: str, data: bytes) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        base = Path(scratch)
        outside = base / "outside"
        (outside / "a").mkdir(parents=True)
        (outside / "a" / "b").write_text("keep")
        root = base / "root"
        (root / "real" / "a").mkdir(parents=True)
        (root / "link").symlink_to(outside)
        (root / "up").symlink_to("..")
        (root / "real" / "up").symlink_to("../..")
        (root / "abs").symlink_to("/")
        (root / "filelink").symlink_to(outside / "a" / "b")
        before = snapshot(outside)
        sibling = base / "sibling"
        sibling.mkdir()
        for operation in (
            lambda: write_file(root, name, data),
            lambda: write_file(root, name, data, replace=True),
            lambda: read_file(root, name, 100),
            lambda: copy_tree(root, name, sibling, "copy"),
            lambda: remove_tree(root, name),
        ):
            try:
                result = operation()
            except (NotAllowed, OSError):
                continue
            if isinstance(result, bytes):  # whatever was read came from inside the root
                assert result in (b"", data)
        assert snapshot(outside) == before
        assert sorted(p.name for p in base.iterdir()) == ["outside", "root", "sibling"]
        # Everything written lies inside the root: no entry of the root resolves outside it.
        for path in root.rglob("*"):
            if not path.is_symlink():
                assert Path(os.path.realpath(path)).is_relative_to(root.resolve())


# ------------------------------------------------------------------ Recordings on a forged tree (no processes)
def test_forged_recording_links_are_never_followed(tmp_path: Path, outside: Path) -> None:
    (outside / "transcript.md").write_text(f"# not ours\n{FINISHED}\n")
    (outside / "events.jsonl").write_text('{"event": "secret"}\n')
    outside.chmod(0o750)
    before = snapshot(outside)
    sessions = tmp_path / "recs" / "sessions"
    run_id, linked_id = "20200101T000000.000000000Z-0000000001", "20200102T000000.000000000Z-0000000002"
    (sessions / run_id / "capture").mkdir(parents=True)
    (sessions / run_id / "transcript.md").symlink_to(outside / "transcript.md")
    (sessions / run_id / "capture" / "events.jsonl").symlink_to(outside / "events.jsonl")
    (sessions / run_id / "capture" / "dirlink").symlink_to(outside)
    (sessions / linked_id).symlink_to(outside)
    recs = Recordings(tmp_path / "recs")
    assert [rec.run_id for rec in recs.list()] == [run_id]  # a symlinked run folder is no recording
    with pytest.raises(NotAllowed, match="symlink"):
        recs.get(linked_id)
    rec = recs.get(run_id)
    assert rec.finalized is False and list(rec.events()) == []
    with pytest.raises(NotAllowed, match="is not a recording run-id"):
        recs.get(run_id + "\n")  # (a `$` would have let the newline through)
    archive = recs.export(run_id, tmp_path / "out.tar.gz")
    assert (archive.stat().st_mode & 0o777) == 0o600  # private, as the recording store is
    with tarfile.open(archive) as tar:
        assert sorted(m.name for m in tar.getmembers()) == [run_id, f"{run_id}/capture"]
    (tmp_path / "planted.tar.gz").symlink_to(outside / "x.tar.gz")
    with pytest.raises(NotAllowed, match="symlink"):
        recs.export(run_id, tmp_path / "planted.tar.gz")
    assert recs.prune(keep_last=0) == [rec]
    assert not (sessions / run_id).exists() and (sessions / linked_id).is_symlink()
    assert snapshot(outside) == before


@pytest.mark.skipif(os.geteuid() != 0 or not Path("/usr/bin/python3").exists(), reason="needs root to become nobody")
def test_remove_tree_unlocks_folders_the_code_made_unreadable(tmp_path: Path) -> None:
    """As an ordinary user (root bypasses permissions): mode-0 folders are unlocked through their own handle."""
    package = Path(__file__).resolve().parents[1] / "console_bridge"
    scratch = Path(tempfile.mkdtemp(prefix="hostfs-nobody-"))
    try:
        (scratch / "console_bridge").mkdir()
        (scratch / "console_bridge" / "__init__.py").write_text("")
        for name in ("_errors.py", "_hostfs.py"):
            shutil.copy(package / name, scratch / "console_bridge" / name)
        script = (
            "import os, sys\n"
            "from console_bridge._hostfs import remove_tree\n"
            "base = sys.argv[1]\n"
            "os.makedirs(os.path.join(base, 'victim', 'locked', 'inner'))\n"
            "open(os.path.join(base, 'victim', 'locked', 'inner', 'f'), 'w').write('x')\n"
            "os.mkdir(os.path.join(base, 'outside'))\n"
            "os.chmod(os.path.join(base, 'outside'), 0o750)\n"
            "os.symlink(os.path.join(base, 'outside'), os.path.join(base, 'victim', 'locked', 'link'))\n"
            "os.chmod(os.path.join(base, 'victim', 'locked', 'inner'), 0)\n"
            "os.chmod(os.path.join(base, 'victim', 'locked'), 0)\n"
            "remove_tree(base, 'victim')\n"
            "print(sorted(os.listdir(base)), oct(os.stat(os.path.join(base, 'outside')).st_mode & 0o777))\n"
        )
        work = scratch / "work"
        work.mkdir()
        for path in (scratch, work, *scratch.joinpath("console_bridge").iterdir(), scratch / "console_bridge"):
            os.chown(path, 65534, 65534)

        def drop() -> None:
            os.setgid(65534)
            os.setuid(65534)

        proc = subprocess.run(
            ["/usr/bin/python3", "-c", script, str(work)],
            cwd=scratch,
            env={"PYTHONPATH": str(scratch), "PATH": "/usr/bin:/bin"},
            preexec_fn=drop,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == "['outside'] 0o750"
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
