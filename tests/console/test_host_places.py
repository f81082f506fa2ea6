"""Which host folders a session accepts for its workspace and recordings (constructing starts nothing)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from console_bridge import AsyncConsole, LaunchRefused


def test_workspace_profile_refuses_shared_system_and_home_folders_and_read_only_the_whole_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home" / "me"
    home.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    for where in ("/", "/tmp", "/var/tmp", "/dev/shm", "/etc", "/usr/lib", str(home), str(home.parent)):
        if not Path(where).is_dir():
            continue
        with pytest.raises(LaunchRefused, match=r"mkdir ~/my-analysis && cd ~/my-analysis") as caught:
            AsyncConsole(where, profile="workspace")
        assert "profile 'workspace' lets the code write to the workspace" in caught.value.message
    # Read-only: a folder the view would hold whole (every project, the shell history, other
    # users' temporary files) is refused too; a system folder is in the view anyway.
    whole = {"/": "the root folder", "/tmp": "a shared temporary folder", "/var/tmp": "a shared temporary folder"}
    whole["/var"] = "a folder holding a shared temporary folder"  # (its view would hold /var/tmp)
    whole |= {str(home): "your home folder", str(home.parent): "an ancestor of your home folder"}
    for where, why in whole.items():
        with pytest.raises(LaunchRefused, match=r"mkdir ~/my-analysis && cd ~/my-analysis") as caught:
            AsyncConsole(where, profile="read-only")
        assert f"is {why}: its cells would see all of it" in caught.value.message
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for where in ("/etc", "/usr/lib", str(elsewhere)):
        AsyncConsole(where, profile="read-only")  # nothing is written there, and nothing more is seen
    project = home / "my-analysis"
    project.mkdir()
    AsyncConsole(project, profile="workspace", recordings_dir=tmp_path / "recs")


def test_recordings_dir_the_code_could_write_is_refused(tmp_path: Path) -> None:
    ws, data = tmp_path / "ws", tmp_path / "data"
    ws.mkdir()
    data.mkdir()
    with pytest.raises(LaunchRefused, match="tamper with the live recording"):
        AsyncConsole(ws, profile="workspace", recordings_dir=ws / "recs")
    with pytest.raises(LaunchRefused, match="console-bridge run"):
        AsyncConsole(ws, writable_roots=[data], recordings_dir=data / "deep" / "recs")
    AsyncConsole(ws, profile="read-only", recordings_dir=ws / "recs")  # read-only workspace: nothing can race it
    AsyncConsole(ws, writable_roots=[data], recordings_dir=tmp_path / "recs")
    (ws / ".agents" / "console").mkdir(parents=True)  # the server's own choice, read-only to the code
    AsyncConsole(ws, profile="workspace", recordings_dir=ws / "recs")


def test_a_recordings_dir_reached_through_a_link_in_the_workspace_is_refused(tmp_path: Path) -> None:
    """Issue 30: a cell planted ``recs -> /elsewhere`` in the workspace; a later read-only session's
    ``recordings_dir="recs"`` became that folder (written through before mcp-console refused it)."""
    ws, data, elsewhere = tmp_path / "ws", tmp_path / "data", tmp_path / "elsewhere"
    for folder in (ws, data, elsewhere):
        folder.mkdir()
    (ws / "recs").symlink_to(elsewhere)
    (data / "deep").symlink_to(elsewhere)
    with pytest.raises(LaunchRefused, match="symlink") as info:
        AsyncConsole(ws, profile="read-only", recordings_dir=ws / "recs" / "sub")
    assert str(ws / "recs") in str(info.value) and str(elsewhere) in str(info.value)
    with pytest.raises(LaunchRefused, match="symlink"):
        AsyncConsole(ws, writable_roots=[data], recordings_dir=data / "deep")
    # a link outside the workspace and the roots (a symlinked home, say) is the user's own
    (tmp_path / "mine").symlink_to(elsewhere)
    AsyncConsole(ws, profile="read-only", recordings_dir=tmp_path / "mine")
    assert not any(elsewhere.iterdir())


def test_the_home_check_does_not_trust_home_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """A changed HOME does not make the real home folder (from the password database) acceptable."""
    import pwd

    real = Path(pwd.getpwuid(os.getuid()).pw_dir).resolve()
    if not real.is_dir() or real == Path("/"):
        pytest.skip(f"this user's home folder {real} is not a folder of its own")
    monkeypatch.setenv("HOME", "/nonexistent")
    with pytest.raises(LaunchRefused, match="is your home folder: its cells would see all of it"):
        AsyncConsole(real, profile="read-only")
