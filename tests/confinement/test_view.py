"""The read view, attacked: profile x language x place, with the real binary and real namespaces.

A cell sees the runtime, its environments, the workspace, the read roots and its TMPDIR;
everything else of the host has no name. Each place below holds a canary; no cell, in any
language, under any profile, may read it, and the session goes on working. Runs as root
and as a normal user alike (CI runs this file as both).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from console_bridge import AsyncConsole
from tests.confinement.conftest import plant_home
from tests.support.binaries import binary_for

pytestmark = [pytest.mark.anyio, pytest.mark.console, pytest.mark.usefixtures("no_leaks")]

CANARY = "CANARY-view-5d1e"
HAS_R = shutil.which("R") is not None
#: Places under the (temporary) home folder that users' secrets live in and no deny list named.
HOME_PLACES = (
    ".bash_history",
    ".python_history",
    ".ipython/profile_default/history.sqlite",
    ".jupyter/jupyter_server_config.json",
    ".config/someapp/token",
    ".local/share/someapp/credentials",
    ".cache/someapp/session",
    "other-project/.env",
    ".config/console-bridge/token",
    ".git-credentials",
    ".aws/credentials",
    ".ssh/id_ed25519",
)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return plant_home(tmp_path, monkeypatch, HOME_PLACES, CANARY)


def _console(workspace: Path, version: str = "0.0.6", **kwargs: object) -> AsyncConsole:
    return AsyncConsole(workspace, command=binary_for(version), **kwargs)  # type: ignore[arg-type]


async def _denied(console: AsyncConsole, target: str, languages: tuple[str, ...]) -> None:
    out = await console.run(python=f"print(open({target!r}).read())")
    assert CANARY not in out.combined, (target, out.combined)
    assert "Error" in out.combined, (target, out.combined)  # FileNotFoundError / PermissionError
    if "sql" in languages:
        sql = await console.run(sql=f"select content from read_text('{target}')")
        assert CANARY not in sql.combined, (target, sql.combined)
    if "r" in languages:
        r_out = await console.run(r=f'tryCatch(cat(readLines("{target}")), error = function(e) cat("denied"))')
        assert CANARY not in r_out.combined, (target, r_out.combined)


@pytest.mark.parametrize("profile", ["read-only", "workspace"])
async def test_nothing_outside_the_view_has_a_name(
    profile: str, home: Path, tmp_path: Path, workspace: Path, recordings: Path
) -> None:
    languages = ("python", "sql", "r") if HAS_R else ("python", "sql")
    data = tmp_path / "data"
    data.mkdir()
    (data / "table.csv").write_text("a,b\n1,2\n")
    (workspace / "input.csv").write_text("x\n41\n")
    other_recordings = tmp_path / "other-recordings"
    other_ws = tmp_path / "other"
    other_ws.mkdir()
    host_tmp = Path("/tmp") / f".console-bridge-test-{os.getpid()}-{tmp_path.name}"
    host_tmp.write_text(f"{CANARY} host tmp\n")
    serve_token = Path("/tmp") / f"console-bridge-serve-test-{os.getpid()}.token"
    serve_token.write_text(f"{CANARY} token\n")
    serve_token.chmod(0o600)
    try:
        async with _console(other_ws, recordings_dir=other_recordings) as bystander:
            planted = await bystander.run(
                python=f"import os; p = os.path.join(os.environ['TMPDIR'], 'mine.txt'); open(p, 'w').write('{CANARY}');"
                " print(p)"
            )
            bystander_file = planted.text.strip().splitlines()[-1]
            bystander_recording = bystander.status().recording
            assert bystander_recording is not None
            async with _console(
                workspace, profile=profile, languages=languages, recordings_dir=recordings, read_roots=[data]
            ) as console:
                # after start: a denied file replaced by rename, a folder moved away and recreated,
                # and a secret created under a folder that did not exist
                fresh = home / ".git-credentials.tmp"
                fresh.write_text(f"{CANARY} replaced\n")
                os.replace(fresh, home / ".git-credentials")
                shutil.move(str(home / ".aws"), str(home / ".aws-old"))
                (home / ".aws").mkdir()
                (home / ".aws" / "credentials").write_text(f"{CANARY} recreated\n")
                (home / ".newapp").mkdir()
                (home / ".newapp" / "secret").write_text(f"{CANARY} created after start\n")
                targets = [str(home / name) for name in HOME_PLACES]
                targets += [
                    str(home / ".aws-old" / "credentials"),
                    str(home / ".newapp" / "secret"),
                    str(host_tmp),
                    str(serve_token),
                    bystander_file,
                    str(bystander_recording / "transcript.md"),
                    "/etc/shadow",
                ]
                for target in targets:
                    await _denied(console, target, languages)
                listing = await console.run(python=f"import os; print(sorted(os.listdir({str(home)!r})))")
                assert ".ssh" not in listing.text and "other-project" not in listing.text, listing.text
                # what the view holds works: workspace, read root, the venv, SQL, R
                ok = await console.run(python="import duckdb, json; print(open('input.csv').read().split()[1])")
                assert ok.text.strip() == "41", ok.text
                root = await console.run(python=f"print(open({str(data / 'table.csv')!r}).read().split()[1])")
                assert root.text.strip() == "1,2", root.text
                write = await console.run(python=f"open({str(data / 'x')!r}, 'w')")
                assert write.error is not None and "Read-only" in write.error.message + write.combined, write.combined
                sql = await console.run(sql="select 40 + 2 as answer")
                assert "42" in sql.text
                if "r" in languages:
                    r_ok = await console.run(r="cat(1 + 1)")
                    assert r_ok.text.strip().endswith("2"), r_ok.text
                view = {entry["path"] for entry in console.status().view}
                assert str(data) in view and str(workspace) in view
                assert not any(str(home) == path or str(home).startswith(path + "/") for path in view)
            # the bystander still reads its own file
            assert (await bystander.run(python=f"print(open({bystander_file!r}).read())")).text.strip() == CANARY
    finally:
        host_tmp.unlink(missing_ok=True)
        serve_token.unlink(missing_ok=True)


async def test_read_roots_are_validated_like_writable_roots(tmp_path: Path, workspace: Path) -> None:
    from console_bridge import LaunchRefused

    with pytest.raises(LaunchRefused, match="read root"):
        AsyncConsole(workspace, read_roots=["/"])
    with pytest.raises(LaunchRefused, match="does not exist"):
        AsyncConsole(workspace, read_roots=[tmp_path / "missing"])
    with pytest.raises(LaunchRefused, match="sequence"):
        AsyncConsole(workspace, read_roots=str(tmp_path))  # type: ignore[arg-type]


# ------------------------------------------------------------- the PATH of a session without R


async def test_a_session_without_r_gets_a_read_only_path_without_r(
    workspace: Path, recordings: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its PATH is one folder of symlinks to the host's commands but R (made once in the bridge's
    cache and bound read-only, the cache's host path unnamed in the view)."""
    from console_bridge._confinement._view import SHIM_DIR

    cache = tmp_path / "cache"
    monkeypatch.setenv("CONSOLE_BRIDGE_CACHE_DIR", str(cache))
    code = (
        "import os, shutil, subprocess\n"
        "print('R', shutil.which('R'), shutil.which('Rscript'))\n"
        "print('ls', shutil.which('ls'), subprocess.run(['ls', '/'], capture_output=True, text=True).returncode)\n"
        "try:\n"
        f"    open({SHIM_DIR!r} + '/planted', 'w')\n"
        "except OSError as exc:\n"
        "    print('write', type(exc).__name__, exc.errno)\n"
        f"print('cache', os.path.exists({str(cache)!r}))\n"
    )
    async with _console(workspace, recordings_dir=recordings, languages=("python",)) as console:
        out = await console.run(python=code)
    lines = dict(line.split(" ", 1) for line in out.text.splitlines())
    assert lines["R"] == "None None", out.text
    assert lines["ls"] == f"{SHIM_DIR}/ls 0", out.text
    assert lines["write"] == "OSError 30", out.text  # EROFS
    assert lines["cache"] == "False", out.text
    [shim] = (cache / "path-shims").iterdir()
    assert not (shim / "planted").exists() and not (shim / "R").exists() and (shim / "ls").is_symlink()


def test_the_path_shim_is_made_once_per_path_and_only_used_when_it_is_ours(tmp_path: Path) -> None:
    from console_bridge._confinement._path_shim import cached_shim

    bin_a, bin_b = tmp_path / "a", tmp_path / "b"
    for folder, names in ((bin_a, ("ls", "R", "cat")), (bin_b, ("ls", "tool"))):
        folder.mkdir()
        for name in names:
            (folder / name).write_text("")
    cache = tmp_path / "cache"
    shim = cached_shim(cache, [str(bin_a), str(bin_b)], ["R"])
    assert shim is not None
    assert sorted(p.name for p in shim.iterdir()) == ["cat", "ls", "tool"]
    assert os.readlink(shim / "ls") == f"{bin_a}/ls"  # the first folder wins, as PATH does
    assert cached_shim(cache, [str(bin_a), str(bin_b)], ["R"]) == shim  # reused
    (bin_b / "new").write_text("")  # a command added: the folder's mtime changed
    fresh = cached_shim(cache, [str(bin_a), str(bin_b)], ["R"])
    assert fresh is not None and fresh != shim and (fresh / "new").is_symlink()
    fresh.chmod(0o777)  # writable by others: never used as it is
    again = cached_shim(cache, [str(bin_a), str(bin_b)], ["R"])
    assert again is None or not (again.stat().st_mode & 0o022)
    assert not [p for p in (cache / "path-shims").iterdir() if p.name.startswith(".build-")]
