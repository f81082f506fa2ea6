"""Which folders may be a session's workspace: under a profile that lets code write the workspace, only a
folder that would also be accepted as a writable root (never ``/``, home, their ancestors, system folders
or a shared temporary folder itself)."""

from __future__ import annotations

from pathlib import Path

from console_bridge._console._launch import validate_root
from console_bridge._console._profiles import Profile
from console_bridge._console._sandbox import WORKSPACE
from console_bridge._errors import LaunchRefused

__all__ = ["vet_workspace"]

HINT = (
    "Run from a folder made for the project, e.g. `mkdir ~/my-analysis && cd ~/my-analysis` "
    "(or pass --workspace DIR / workspace=DIR), or use the read-only profile, which writes nothing there."
)


def vet_workspace(workspace: Path, profile: Profile) -> None:
    """Refuse ``workspace`` when ``profile`` makes it writable and it is a place no writable root may be.

    Under read-only profiles any existing folder may be the workspace.
    """
    if WORKSPACE not in profile.expects_writable and not profile.read_write:
        return
    try:
        validate_root(workspace, what="workspace")
    except LaunchRefused as exc:
        reason = exc.message.split("; grant ")[0]
        raise LaunchRefused(
            f"{reason}; profile {profile.name!r} lets the code write to the workspace, so it must not be a "
            f"shared or system folder. {HINT}",
            details={"workspace": str(workspace), "profile": profile.name},
        ) from None
