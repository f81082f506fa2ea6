"""Each recording carries its workspace, profile and owner; listing and pruning filter by workspace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from console_bridge import BridgeError, Console, Owner, Recordings
from console_bridge._cells._recordings import sidecar_path, write_sidecar
from tests.support.binaries import binary_for

pytestmark = pytest.mark.console


def test_recordings_carry_their_workspace_and_filter_by_it(tmp_path: Path) -> None:
    recs = tmp_path / "recs"
    spaces = [tmp_path / "a", tmp_path / "b"]
    session_ids = []
    for space in spaces:
        space.mkdir()
        with Console(space, command=binary_for("0.0.6"), recordings_dir=recs, owner=Owner("agent-7")) as console:
            console.run(python="1")
            session_ids.append(console.status().session_id)
    everything = Recordings(recs).list()
    # `console-bridge ps` names a session by its id: the recording is found by that id too
    by_session = Recordings(recs).get(session_ids[0])
    assert by_session.workspace == str(spaces[0].resolve()) and by_session.info["session_id"] == session_ids[0]
    with pytest.raises(BridgeError, match="no recording of session"):
        Recordings(recs).get("20200101T000000-0123abcd")
    assert len(everything) == 2
    only_a = Recordings(recs).list(workspace=spaces[0])
    assert len(only_a) == 1 and only_a[0].workspace == str(spaces[0].resolve())
    assert only_a[0].profile == "read-only" and only_a[0].owner == "agent-7"
    info = json.loads(sidecar_path(only_a[0].path).read_text())
    assert set(info) >= {"workspace", "profile", "owner", "user", "run_id"}
    only_b = Recordings(recs).list(workspace=spaces[1])
    gone = Recordings(recs).prune(keep_last=0, workspace=spaces[1])
    assert [rec.run_id for rec in gone] == [only_b[0].run_id]
    assert [rec.run_id for rec in Recordings(recs).list()] == [only_a[0].run_id]
    assert not sidecar_path(gone[0].path).exists()


def test_the_sidecar_is_created_new_and_never_through_a_symlink(tmp_path: Path) -> None:
    folder = tmp_path / "sessions" / "20261130T000000.000000000Z-0000000001"
    folder.mkdir(parents=True)
    target = tmp_path / "elsewhere"
    sidecar_path(folder).symlink_to(target)
    with pytest.raises(OSError):
        write_sidecar(folder, {"workspace": "/x"})
    assert not target.exists()


def test_a_sidecar_that_is_a_fifo_or_a_folder_is_ignored_not_waited_on(tmp_path: Path) -> None:
    import os

    sessions = tmp_path / "recs" / "sessions"
    fifo_id, dir_id = "20200101T000000.000000000Z-0000000001", "20200101T000001.000000000Z-0000000002"
    for run_id in (fifo_id, dir_id):
        (sessions / run_id).mkdir(parents=True)
    os.mkfifo(sidecar_path(sessions / fifo_id))
    sidecar_path(sessions / dir_id).mkdir()
    found = Recordings(tmp_path / "recs").list(workspace=tmp_path)  # reads every sidecar: no hang, no crash
    assert found == []
    assert {rec.run_id: rec.info for rec in Recordings(tmp_path / "recs").list()} == {fifo_id: {}, dir_id: {}}
