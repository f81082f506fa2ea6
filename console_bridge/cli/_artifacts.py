"""What ``run`` leaves on the host: the --artifacts folder and the session's recording.

Both may lie where the sandboxed code can write (the workspace under a writable profile, a
writable root). So they are written only after the session has stopped (no cell can race
them), and only through ``console_bridge._hostfs`` (nothing followed through a symlink the
code may have planted). A recordings folder the code could write is not handed to the server:
the session records into a private staging folder, and the finished recording is copied into
the requested folder after the session stopped.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from console_bridge._cells._recordings import Recording, default_recordings_root
from console_bridge._errors import BridgeError, LaunchRefused
from console_bridge._hostfs import copy_tree, open_dir, remove_entry, remove_tree, write_file
from console_bridge._results import Image
from console_bridge._vetting._launch import validate_root
from console_bridge._vetting._profiles import Profile, load_profile
from console_bridge._vetting._workspace import inside, vet_workspace, writable_places

__all__ = ["RecordingStage", "check_workspace", "rewrite_report", "write_artifacts"]

_IMAGE_NAME = re.compile(r"\Aimage-\d{3,}\.[A-Za-z0-9]+\Z")
_OWN_FILES = ("output.txt", "report.json")


def _load(profile: str) -> Profile | None:
    try:
        return load_profile(profile)
    except BridgeError:  # the session refuses it the same way, with its own message
        return None


def check_workspace(workspace: Path, profile: str) -> LaunchRefused | None:
    """The refusal of ``workspace`` under ``profile`` (before anything is written), or None."""
    loaded = _load(profile)
    if loaded is None:
        return None
    try:
        vet_workspace(workspace.expanduser().resolve(), loaded)
    except LaunchRefused as exc:
        return exc
    return None


def _writable_places(workspace: Path, profile: str, writable_roots: Sequence[str]) -> list[Path]:
    """The host folders the code may write in this run (besides its private TMPDIR)."""
    roots: list[Path] = []
    for root in writable_roots:
        with contextlib.suppress(BridgeError):
            roots.append(validate_root(root))
    loaded = _load(profile)
    return writable_places(workspace.expanduser(), loaded, roots) if loaded is not None else roots


@dataclass
class RecordingStage:
    """A private folder the session records into, when the requested one is writable by the code."""

    final_root: Path
    staging: Path

    @classmethod
    def plan(
        cls, workspace: Path, profile: str, writable_roots: Sequence[str], recordings_dir: str | None
    ) -> RecordingStage | None:
        final = Path(recordings_dir).expanduser() if recordings_dir is not None else default_recordings_root()
        final = final.absolute()
        places = _writable_places(workspace, profile, writable_roots)
        if not inside(final, places):
            return None
        staging = Path(tempfile.mkdtemp(prefix="console-bridge-recording-"))
        if inside(staging, places):  # $TMPDIR inside a writable place: use /tmp itself
            staging.rmdir()
            staging = Path(tempfile.mkdtemp(prefix="console-bridge-recording-", dir="/tmp"))
        return cls(final, staging)

    def publish(self, recording: Recording | None) -> Recording | None:
        """Copy the finished recording into the requested folder; returns it there."""
        if recording is None or not recording.path.is_relative_to(self.staging):
            return recording  # none, or recorded in the workspace's .agents/console (read-only to the code)
        self.final_root.mkdir(parents=True, exist_ok=True)
        name = f"sessions/{recording.run_id}"
        copy_tree(self.staging, name, self.final_root, name)
        return Recording(recording.run_id, self.final_root / "sessions" / recording.run_id)

    def cleanup(self) -> None:
        with contextlib.suppress(OSError, BridgeError):
            remove_tree(self.staging.parent, self.staging.name)


def write_artifacts(
    dest: Path,
    expected_real: str,
    *,
    output: str,
    images: Sequence[tuple[str, Image]],
    recording: Path | None,
    report: dict[str, Any],
    files: Sequence[tuple[str, bytes]] = (),
    notebooks: Sequence[tuple[str, bytes]] = (),
) -> None:
    """Write output.txt, the images, the executed notebooks, a copy of the recording and report.json
    into ``dest``.

    Called after the session stopped. ``dest`` must still resolve to ``expected_real`` (what it
    resolved to before the run); inside it nothing is followed through a symlink: stale entries
    of an earlier run (even links) are removed as entries, the recording is copied as folders and
    regular files only.
    """
    now = os.path.realpath(dest)
    if now != expected_real:
        raise OSError(
            f"the artifacts folder {str(dest)!r} now resolves to {now!r}, not {expected_real!r} as before the "
            "run (did the code replace it?); nothing was written. Use an artifacts folder outside the places the "
            "code can write, or remove what it planted"
        )
    # A folder made here is private (0700), as the recording store is: it holds the code's output and a
    # copy of its recording. A folder that exists keeps the mode its owner gave it.
    dest.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = open_dir(dest)
    try:
        for name in os.listdir(fd):
            if name in _OWN_FILES or _IMAGE_NAME.match(name) or name in ("recording", "files"):
                remove_entry(fd, name)
        write_file(fd, "output.txt", output.encode("utf-8"))
        for name, image in images:
            write_file(fd, name, image.data)
        for name, data in files:  # collected from the TMPDIR (--collect); names checked by _hostfs
            write_file(fd, f"files/{name}", data)
        for name, data in notebooks:  # (a file name: an earlier run's copy is replaced, never followed)
            write_file(fd, name, data, replace=True)
        skipped: list[str] = []
        if recording is not None:
            skipped = copy_tree(recording.parent, recording.name, fd, "recording").skipped
        report["artifacts"] = {
            "dir": str(dest.absolute()),
            "output": "output.txt",
            "images": [name for name, _image in images],
            "recording": "recording" if recording is not None else None,
            "recording_skipped": skipped,  # symlinks and special files, never copied
            "files": [f"files/{name}" for name, _data in files],
            "notebooks": [name for name, _data in notebooks],
        }
        write_file(fd, "report.json", (json.dumps(report, indent=2) + "\n").encode("utf-8"))
    finally:
        os.close(fd)


def rewrite_report(dest: Path, expected_real: str, report: dict[str, Any]) -> None:
    """After a failed write: make report.json match the exit status, if ``dest`` is still the folder it was."""
    with contextlib.suppress(OSError, BridgeError):
        if os.path.realpath(dest) != expected_real:
            return
        fd = open_dir(dest)
        try:
            write_file(fd, "report.json", (json.dumps(report, indent=2) + "\n").encode("utf-8"), replace=True)
        finally:
            os.close(fd)
