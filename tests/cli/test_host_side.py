"""What ``run`` and ``recordings`` do on the host, where sandboxed code could have planted symlinks.

Each attack runs real code in the real sandbox (``--profile workspace`` or a ``--writable-root``),
then checks that the attack failed (the outside folder keeps its mode and contents) and that the
session still worked (a second file ran after the planting one).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import tarfile
import uuid
from pathlib import Path

import pytest

from console_bridge import AsyncConsole, LaunchRefused
from tests.support.cli import cli_env, cli_path

from .conftest import PROC_TIMEOUT, write

AFTER = "print('session still works:', 6 * 7)\n"
PLANT = ("plant.py", "after.py")
FORGED = "20200101T000000.000000000Z-0000000001"
FORGED_2 = "20200102T000000.000000000Z-0000000002"


def snapshot(folder: Path) -> dict[str, tuple[int, bytes | str | None]]:
    """Every entry under ``folder`` and the folder itself: mode and contents (or link target)."""
    seen: dict[str, tuple[int, bytes | str | None]] = {".": (folder.lstat().st_mode, None)}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = Path(root) / name
            info = path.lstat()
            content: bytes | str | None = None
            if stat.S_ISLNK(info.st_mode):
                content = os.readlink(path)
            elif stat.S_ISREG(info.st_mode):
                content = path.read_bytes()
            seen[str(path.relative_to(folder))] = (info.st_mode, content)
    return seen


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder of the host user that the code must not be able to change through the CLI."""
    folder = tmp_path / "outside"
    (folder / "sub").mkdir(parents=True)
    (folder / "keep.txt").write_text("keep")
    (folder / "sub" / "deep.txt").write_text("deep")
    (folder / "sub").chmod(0o710)  # modes no cleanup step would set (0o700, 0o755): a chmod through a link shows
    folder.chmod(0o750)
    return folder


def run_cli(args: list[str], cwd: Path, tmp: Path, home: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = cli_env(tmp)
    if home is not None:
        env["HOME"] = str(home)
    return subprocess.run(
        [cli_path(), *args],
        cwd=cwd,
        input="",
        capture_output=True,
        text=True,
        timeout=PROC_TIMEOUT,
        env=env,
        check=False,
    )


@pytest.mark.console
def test_artifacts_folder_replaced_by_a_symlink(tmp_path: Path, outside: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    write(ws, "plant.py", f"import os\nos.symlink({str(outside)!r}, 'art')\nprint('planted')\n")
    write(ws, "after.py", AFTER)
    before = snapshot(outside)
    proc = run_cli(
        ["run", "--profile", "workspace", "--recordings-dir", str(tmp_path / "recs"), "--artifacts", "art", *PLANT],
        ws,
        tmp_path,
    )
    assert (ws / "art").is_symlink()  # the attack was real: the code did plant it
    assert "session still works: 42" in proc.stdout
    assert proc.returncode == 1, proc.stderr
    assert "could not write the artifacts" in proc.stderr and "did the code replace it?" in proc.stderr
    assert snapshot(outside) == before  # no output.txt, report.json or recording copy went through the link


@pytest.mark.console
def test_symlink_inside_the_artifacts_recording_folder(tmp_path: Path, outside: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    plant = (
        "import os\n"
        "os.makedirs('art/recording', exist_ok=True)\n"
        f"os.symlink({str(outside)!r}, 'art/recording/x')\n"
        f"os.symlink({str(outside / 'keep.txt')!r}, 'art/output.txt')\n"
        "print('planted')\n"
    )
    write(ws, "plant.py", plant)
    write(ws, "after.py", AFTER)
    before = snapshot(outside)
    proc = run_cli(
        ["run", "--profile", "workspace", "--recordings-dir", str(tmp_path / "recs"), "--artifacts", "art", *PLANT],
        ws,
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "session still works: 42" in proc.stdout
    assert snapshot(outside) == before  # mode 0o750 kept (the old tree walk chmodded it to 0o755), contents kept
    art = ws / "art"
    assert not (art / "output.txt").is_symlink() and (art / "output.txt").read_text() == proc.stdout
    assert not (art / "recording" / "x").exists() and not (art / "recording" / "x").is_symlink()
    report = json.loads((art / "report.json").read_text())
    assert report["exit_status"] == 0 and report["recording"]["finalized"] is True
    assert (art / "recording").is_dir() and not any(p.is_symlink() for p in (art / "recording").rglob("*"))


@pytest.mark.console
def test_forged_recordings_in_a_writable_root(tmp_path: Path, outside: Path) -> None:
    """The code forges recordings full of symlinks in a recordings folder it may write; delete, prune and
    export then never touch the outside; the run's own recording was out of the code's reach."""
    ws, data = tmp_path / "ws", tmp_path / "data"
    ws.mkdir()
    data.mkdir()
    recs = data / "recs"
    forge = (
        "import os\n"
        f"recs = {str(recs)!r}\n"
        f"for run_id in ({FORGED!r}, {FORGED_2!r}):\n"
        "    base = os.path.join(recs, 'sessions', run_id)\n"
        "    os.makedirs(os.path.join(base, 'capture'))\n"
        "    open(os.path.join(base, 'transcript.md'), 'w').write('# forged\\n## Recording finished\\n')\n"
        f"    os.symlink({str(outside)!r}, os.path.join(base, 'capture', 'dirlink'))\n"
        f"    os.symlink({str(outside / 'keep.txt')!r}, os.path.join(base, 'filelink'))\n"
        "print(sorted(os.listdir(os.path.join(recs, 'sessions'))))\n"
    )
    write(ws, "forge.py", forge)
    write(ws, "after.py", AFTER)
    before = snapshot(outside)
    proc = run_cli(
        ["run", "--writable-root", str(data), "--recordings-dir", str(recs), "forge.py", "after.py"], ws, tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    assert "session still works: 42" in proc.stdout
    # While the code ran, the session recorded elsewhere: it saw only its own forgeries.
    assert f"[{FORGED!r}, {FORGED_2!r}]" in proc.stdout
    own = [p.name for p in (recs / "sessions").iterdir() if p.name not in (FORGED, FORGED_2)]
    assert len(own) == 1 and (recs / "sessions" / own[0] / "transcript.md").is_file()  # published afterwards

    exported = run_cli(["recordings", "--root", str(recs), "export", FORGED, str(tmp_path / "x.tar.gz")], ws, tmp_path)
    assert exported.returncode == 0, exported.stderr
    with tarfile.open(tmp_path / "x.tar.gz") as archive:
        members = archive.getmembers()
    assert not any(m.issym() or m.islnk() for m in members)
    assert sorted(m.name for m in members) == [FORGED, f"{FORGED}/capture", f"{FORGED}/transcript.md"]
    shown = run_cli(["recordings", "--root", str(recs), "show", FORGED, "--json"], ws, tmp_path)
    assert shown.returncode == 0 and json.loads(shown.stdout)["files"] == 1

    deleted = run_cli(["recordings", "--root", str(recs), "delete", FORGED], ws, tmp_path)
    assert deleted.returncode == 0, deleted.stderr
    assert not (recs / "sessions" / FORGED).exists()
    pruned = run_cli(
        ["recordings", "--root", str(recs), "prune", "--all", "--older-than", "365d", "--json"], ws, tmp_path
    )
    assert pruned.returncode == 0, pruned.stderr
    assert json.loads(pruned.stdout)["removed"] == [FORGED_2]
    assert [p.name for p in (recs / "sessions").iterdir()] == own  # the real recording stays
    assert snapshot(outside) == before


@pytest.mark.console
def test_a_recordings_folder_swapped_for_a_symlink_is_refused(tmp_path: Path, outside: Path) -> None:
    data, ws = tmp_path / "data", tmp_path / "ws"
    (data / "recs").mkdir(parents=True)
    ws.mkdir()
    swap = (
        "import os\n"
        f"os.rename({str(data / 'recs')!r}, {str(data / 'old')!r})\n"
        f"os.symlink({str(outside)!r}, {str(data / 'recs')!r})\n"
    )
    write(ws, "swap.py", swap)
    write(ws, "after.py", AFTER)
    before = snapshot(outside)
    proc = run_cli(
        ["run", "--writable-root", str(data), "--recordings-dir", str(data / "recs"), "swap.py", "after.py"],
        ws,
        tmp_path,
    )
    assert "session still works: 42" in proc.stdout
    assert proc.returncode == 1 and "could not copy the recording" in proc.stderr
    assert snapshot(outside) == before
    kept = re.search(r"it stays in '([^']+)'", proc.stderr)  # the recording is not lost: remove it here
    assert kept is not None and Path(kept.group(1)).is_dir()
    shutil.rmtree(kept.group(1))


# ------------------------------------------------------------------ workspace vetting
@pytest.mark.parametrize("where", ["/tmp", "/etc", "/", "/dev/shm"])
def test_workspace_profile_refuses_shared_and_system_folders(tmp_path: Path, where: str) -> None:
    write(tmp_path, "job.py", "print('must not run')\n")
    artifacts = f"cb-test-artifacts-{uuid.uuid4().hex}"
    recs = tmp_path / "recs"
    proc = run_cli(
        [
            "run",
            "--profile",
            "workspace",
            "--recordings-dir",
            str(recs),
            "--artifacts",
            artifacts,
            *[str(tmp_path / "job.py")],
        ],
        Path(where),
        tmp_path,
    )
    assert proc.returncode == 3, proc.stderr
    assert "must not run" not in proc.stdout
    assert "mkdir ~/my-analysis && cd ~/my-analysis" in proc.stderr
    assert not (Path(where) / artifacts).exists() and not recs.exists()


def test_workspace_profile_refuses_home_and_its_ancestors(tmp_path: Path) -> None:
    home = tmp_path / "home" / "someone"
    home.mkdir(parents=True)
    write(tmp_path, "job.py", "print('must not run')\n")
    for cwd in (home, home.parent):
        proc = run_cli(
            ["run", "--profile", "workspace", "--artifacts", "out", "--json", str(tmp_path / "job.py")],
            cwd,
            tmp_path,
            home=home,
        )
        assert proc.returncode == 3, proc.stderr
        assert json.loads(proc.stdout)["exit_status"] == 3
        assert "home directory" in proc.stderr and "mkdir ~/my-analysis" in proc.stderr
    assert os.listdir(home) == [] and sorted(os.listdir(home.parent)) == ["someone"]


def test_read_only_profile_refuses_only_the_folders_the_view_would_hold_whole() -> None:
    # (the view leaves the host's /tmp and home out; a workspace there would bring all of it in)
    for where in ("/tmp", "/etc", "/"):
        with pytest.raises(LaunchRefused, match="my-analysis"):
            AsyncConsole(where, profile="workspace")
    for where in ("/tmp", "/"):
        with pytest.raises(LaunchRefused, match="its cells would see all of it"):
            AsyncConsole(where, profile="read-only")
    AsyncConsole("/etc", profile="read-only")  # constructing starts nothing; /etc is in the view anyway


@pytest.mark.console
def test_a_project_folder_under_tmp_still_works_with_the_workspace_profile(tmp_path: Path) -> None:
    write(tmp_path, "job.py", "open('made-by-code.txt', 'w').write('ok')\nprint('wrote')\n")
    proc = run_cli(
        ["run", "--profile", "workspace", "--recordings-dir", str(tmp_path / "recs"), "job.py"], tmp_path, tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "made-by-code.txt").read_text() == "ok"
