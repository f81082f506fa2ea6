"""Two sessions on one writable workspace (a manager's pool, two notebooks): mcp-console mounts over
``.git``, ``.agents``, ``.codex``, ``.aws`` (and from 0.0.6 ``.claude``) in the cells' sandbox,
making them when missing and removing them when its server ends. Removed in one session's close,
the other session's mounts over them were detached and its next cell wrote ``.git/config`` and
``.agents/console/config.yaml`` on the host (both versions, before ``_confinement._shared_roots``).
Now the bridge makes the names, holds the folder while any session uses it, and the last session
out removes what it made and is still empty."""

from __future__ import annotations

import fcntl
import os
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from console_bridge import AsyncConsole, LaunchRefused
from console_bridge._confinement._shared_roots import FOLDERS, WORKSPACE, RootHold

PLANT = textwrap.dedent(
    """\
    import os
    out = []
    for path in [".git/config", ".git/hooks/post-checkout", ".agents/console/config.yaml", ".codex/config.toml",
                 ".aws/credentials", ".claude/settings.json"]:
        for step in ("remove", "plant"):
            try:
                if step == "remove":
                    top = path.split("/")[0]
                    os.rename(top, top + ".gone")  # a mount point cannot be renamed away
                else:
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                    with open(path, "w") as f:
                        f.write("planted")
                out.append(f"{path} {step}: done")
            except OSError as e:
                out.append(f"{path} {step}: {type(e).__name__}")
    print("\\n".join(out))
    """
)
WRITABLE = "server: {sandbox.profile: workspace, sandbox.network: restricted, sandbox.tempdir: managed}\n"
EXPECTS = "expects: {sandboxed: true, network: restricted, writable: [tmpdir, workspace]}\n"


def _profile(tmp_path: Path) -> str:
    path = tmp_path / "writable.yaml"
    path.write_text(f"name: writable\n{WRITABLE}{EXPECTS}")
    return str(path)


NAMES = {name for name, _ in WORKSPACE}


def _planted(workspace: Path) -> list[str]:
    return sorted(
        str(Path(folder, name).relative_to(workspace))
        for folder, _, files in os.walk(workspace)
        for name in files
        if Path(folder, name).stat().st_size > 0
    )


@pytest.mark.anyio
@pytest.mark.console
@pytest.mark.parametrize("second_state", ["same", "other"])
async def test_one_sessions_close_leaves_anothers_protected_names_in_place(
    mcp_console: tuple[str, Path],
    second_state: str,
    tmp_path: Path,
    workspace: Path,
    recordings: Path,
    no_leaks: None,
    state_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``other``: the second session keeps its books in another state folder (a notebook and a manager
    configured apart): the folder's lock is the folder itself, so they still see each other."""
    _, binary = mcp_console
    options = {"command": binary, "profile": _profile(tmp_path), "recordings_dir": recordings, "languages": ("python",)}
    second = AsyncConsole(workspace, **options)
    async with AsyncConsole(workspace, **options):
        assert set(os.listdir(workspace)) == NAMES  # mcp-console makes no name the bridge did not
        if second_state == "other":
            monkeypatch.setenv("CONSOLE_BRIDGE_STATE_DIR", str(tmp_path / "other-state"))
        await second.start()
    try:
        assert set(os.listdir(workspace)) == NAMES, "the first session's close removed the names"
        result = await second.run(python=PLANT)
        assert result.error is None, result.combined
        assert ": done" not in result.combined, result.combined
        assert _planted(workspace) == [], f"a cell wrote a protected name on the host: {_planted(workspace)}"
        # A cell cannot lock the folder for itself (its own session holds it shared)
        grab = "import fcntl, os\ntry:\n    fcntl.flock(os.open('.', os.O_RDONLY), fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
        grab += "    print('locked')\nexcept OSError as e:\n    print(type(e).__name__)"
        assert (await second.run(python=grab)).combined.strip() == "BlockingIOError"
        assert "2" in (await second.run(python="print(1 + 1)")).combined
    finally:
        await second.close()
    if second_state == "other":
        # the names the first session listed in its own books stay (empty, and safe) until a session
        # keeping its books there is the last out
        assert sorted(os.listdir(workspace)) == sorted(NAMES) and _planted(workspace) == []
        monkeypatch.setenv("CONSOLE_BRIDGE_STATE_DIR", str(state_dir))
        async with AsyncConsole(workspace, **options):
            pass
    assert os.listdir(workspace) == [], "the last session out left the names it made"
    assert os.listdir(state_dir / "roots") == [], "the last session out left its list"


@pytest.mark.anyio
@pytest.mark.console
async def test_the_users_own_names_stay_as_they_are(
    tmp_path: Path, workspace: Path, recordings: Path, no_leaks: None
) -> None:
    from tests.support.binaries import binary_for

    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    (workspace / ".aws").mkdir()
    (workspace / ".aws" / "config").write_text("[default]\n")
    (workspace / ".claude").mkdir()  # the user's Claude Code settings: kept read-only, not replaced
    (workspace / ".claude" / "settings.json").write_text("{}")
    options = {"profile": _profile(tmp_path), "recordings_dir": recordings, "languages": ("python",)}
    async with AsyncConsole(workspace, command=binary_for("0.0.6"), **options) as console:
        assert "2" in (await console.run(python="print(1 + 1)")).combined
    assert sorted(os.listdir(workspace)) == [".aws", ".claude", ".git"]
    assert (workspace / ".aws" / "config").read_text() == "[default]\n"
    assert (workspace / ".claude" / "settings.json").read_text() == "{}"
    assert (workspace / ".git" / "HEAD").is_file()


def test_the_last_hold_out_removes_only_what_the_bridge_made_and_is_still_empty(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / ".git").mkdir()  # the user's: never the bridge's to remove
    first, second = RootHold(tmp_path / "locks"), RootHold(tmp_path / "locks")
    first.acquire([(root, WORKSPACE)])
    second.acquire([(root, WORKSPACE)])
    assert first.locks == second.locks and len(first.locks) == 1
    assert sorted(os.listdir(root)) == [".agents", ".aws", ".claude", ".codex", ".git"]
    (root / ".aws" / "credentials").write_text("the host's")  # filled while held: stays
    first.release()
    assert sorted(os.listdir(root)) == [".agents", ".aws", ".claude", ".codex", ".git"], "removed while held"
    second.release()
    assert sorted(os.listdir(root)) == [".aws", ".git"]
    assert os.listdir(tmp_path / "locks") == []
    second.release()  # idempotent


def test_a_supervisors_hold_keeps_the_names_after_its_host_let_go(tmp_path: Path) -> None:
    """The supervisor holds the lock too (it outlives the session's cells): a host that dies first
    does not let another session's close remove the names under live cells."""
    root = tmp_path / "root"
    root.mkdir()
    host, other = RootHold(tmp_path / "locks"), RootHold(tmp_path / "locks")
    host.acquire([(root, WORKSPACE)])
    other.acquire([(root, WORKSPACE)])
    supervisor = os.open(host.locks[0], os.O_RDONLY)
    fcntl.flock(supervisor, fcntl.LOCK_SH)
    host.release()
    other.release()
    assert sorted(os.listdir(root)) == [".agents", ".aws", ".claude", ".codex", ".git"]
    os.close(supervisor)
    late = RootHold(tmp_path / "locks")  # the next session's close tidies what the dead one left
    late.acquire([(root, WORKSPACE)])
    late.release()
    assert os.listdir(root) == []


@pytest.mark.anyio
@pytest.mark.console
async def test_names_are_made_only_where_mcp_console_mounts_over_them(
    mcp_console: tuple[str, Path], tmp_path: Path, workspace: Path, recordings: Path, no_leaks: None
) -> None:
    """A writable root: 0.0.5 mounts over its .git, .agents, .codex and .aws; 0.0.6 over nothing
    there (checked against each binary: a name the bridge makes that is not mounted over would be
    a folder the cells may fill)."""
    version, binary = mcp_console
    out = tmp_path / "out"
    out.mkdir()
    options = {"command": binary, "writable_roots": [out], "recordings_dir": recordings, "languages": ("python",)}
    async with AsyncConsole(workspace, **options) as console:
        made = set(os.listdir(out))
        assert made == ({name for name, _ in FOLDERS} if version == "0.0.5" else set()), made
        assert os.listdir(workspace) == []  # the read-only profile: the workspace is not writable
        # held all the same: a cell of a read-only session cannot lock it and stall the writers' starts
        grab = "import fcntl, os\ntry:\n    fcntl.flock(os.open('.', os.O_RDONLY), fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
        grab += "    print('locked')\nexcept OSError as e:\n    print(type(e).__name__)"
        assert (await console.run(python=grab)).combined.strip() == "BlockingIOError"
        git = str(out / ".git")
        code = f"import os\ntry:\n    os.mkdir({git!r})\nexcept OSError as e:\n    print(type(e).__name__)"
        result = await console.run(python=code)
        assert (result.combined.strip() != "") == (version == "0.0.5"), result.combined
    assert os.listdir(out) == ([] if version == "0.0.5" else [".git"])


def test_two_state_folders_see_one_lock_and_an_exclusive_holder_is_refused_in_time(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    first, second = RootHold(tmp_path / "state-a"), RootHold(tmp_path / "state-b")
    first.acquire([(root, WORKSPACE)])
    second.acquire([(root, WORKSPACE)])
    first.release()  # not the last out: the second, with books elsewhere, holds the folder
    assert sorted(os.listdir(root)) == sorted(NAMES)
    second.release()
    assert sorted(os.listdir(root)) == sorted(
        NAMES
    )  # listed in state-a's books: left (empty) until one of its own ends
    holder = os.open(root, os.O_RDONLY)
    fcntl.flock(holder, fcntl.LOCK_EX)
    began = time.monotonic()
    with pytest.raises(LaunchRefused, match=r"stayed locked exclusively for 0.2 s.*fuser -v"):
        RootHold(tmp_path / "state-a", wait=0.2).acquire([(root, WORKSPACE)])
    assert time.monotonic() - began < 5
    os.close(holder)
    late = RootHold(tmp_path / "state-a")
    late.acquire([(root, WORKSPACE)])
    late.release()
    assert os.listdir(root) == []
