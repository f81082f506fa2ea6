"""Which folders may be a session's workspace: under a profile that lets code write the workspace, only a
folder that would also be accepted as a writable root (never ``/``, home, their ancestors, system folders
or a shared temporary folder itself)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from console_bridge._confinement._registry import state_dir
from console_bridge._errors import LaunchRefused
from console_bridge._governance._policy import Policy
from console_bridge._vetting._launch import shared_temp_dirs, validate_root
from console_bridge._vetting._profiles import Profile
from console_bridge._vetting._sandbox import WORKSPACE

__all__ = [
    "Evidence",
    "evidence",
    "inside",
    "reachable_places",
    "vet_evidence",
    "vet_recordings",
    "vet_workspace",
    "writable_places",
]

HINT = (
    "Run from a folder made for the project, e.g. `mkdir ~/my-analysis && cd ~/my-analysis` "
    "(or pass --workspace DIR / workspace=DIR), or use the read-only profile, which writes nothing there."
)


def vet_workspace(workspace: Path, profile: Profile) -> None:
    """Refuse ``workspace`` when ``profile`` makes it writable and it is a place no writable root may be.

    Under read-only profiles any existing folder may be the workspace but ``/``, the home folder,
    an ancestor of it and a shared temporary folder: the view would hold all of it (every project,
    the shell history, other users' temporary files), which the view exists to leave out.
    """
    if WORKSPACE not in profile.expects_writable and not profile.read_write:
        resolved = workspace.resolve()
        homes = _homes()
        temps = shared_temp_dirs()
        whole = (
            "the root folder"
            if resolved == Path("/")
            else "a shared temporary folder"
            if resolved in temps
            else "a folder holding a shared temporary folder"
            if any(resolved in temp.parents for temp in temps)
            else "your home folder"
            if resolved in homes or any(_same_folder(resolved, home) for home in homes)  # (a bind mount too)
            else "an ancestor of your home folder"
            if any(resolved in home.parents for home in homes)
            else None
        )
        if whole is not None:
            raise LaunchRefused(
                f"the workspace {str(resolved)!r} is {whole}: its cells would see all of it (other projects, "
                f"shell history, other users' temporary files). {HINT.split(', or use the read-only')[0]}.",
                details={"workspace": str(resolved), "profile": profile.name},
            )
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


def _same_folder(one: Path, other: Path) -> bool:
    try:
        return os.path.samefile(one, other)
    except OSError:
        return False


def _homes() -> set[Path]:
    """The user's home folder, as ``$HOME`` says and as the password database says (a changed or
    unset ``HOME`` must not make the real one acceptable)."""
    found = set()
    with contextlib.suppress(KeyError, RuntimeError, OSError):
        found.add(Path.home().resolve())
    with contextlib.suppress(KeyError, OSError, ImportError):
        import pwd

        found.add(Path(pwd.getpwuid(os.getuid()).pw_dir).resolve())
    return {home for home in found if home != Path("/")}  # (a home of "/" is the root check's)


def writable_places(workspace: Path, profile: Profile, roots: Sequence[Path]) -> list[Path]:
    """The host folders a session's code may write (besides its private TMPDIR), resolved."""
    places = [Path(root).resolve() for root in roots]
    ws = workspace.resolve()
    if WORKSPACE in profile.expects_writable:
        places.append(ws)
    places.extend((ws / item).resolve() for item in profile.read_write)
    return places


def inside(path: Path, places: Sequence[Path]) -> bool:
    """``path`` (resolved here) is one of ``places`` or lies inside one."""
    resolved = path.resolve()
    return any(resolved == place or place in resolved.parents for place in places)


def _links_on_the_way(path: Path) -> list[tuple[Path, str]]:
    """Every prefix of the absolute ``path`` (lexically, as given) that is a symlink, with its target."""
    found: list[tuple[Path, str]] = []
    current = Path(path.anchor)
    for part in path.parts[1:]:
        current = current / part
        with contextlib.suppress(OSError):
            if current.is_symlink():
                found.append((current, os.readlink(current)))
    return found


def vet_recordings(base: Path, workspace: Path, profile: Profile, roots: Sequence[Path]) -> None:
    """Refuse a recordings folder the session's own code could write while the server records into it,
    or one reached through a symlink in the workspace or a writable root (any profile: a cell of an
    earlier session could have planted ``recs -> /elsewhere`` there)."""
    if base == workspace / ".agents" / "console":  # kept read-only inside the workspace by both versions
        return
    code_places = [workspace.resolve(), *(Path(root).resolve() for root in roots)]
    for link, target in _links_on_the_way(base):
        if inside(link.parent, code_places):
            raise LaunchRefused(
                f"the recordings folder {str(base)!r} is reached through the symlink {str(link)!r} -> {target!r}, "
                "which lies in the workspace or a writable root, where a cell may have planted it. Pass "
                "recordings_dir= (CLI: --recordings-dir) the real folder, outside the workspace and the writable "
                "roots, or remove the link; nothing was started.",
                details={"recordings_dir": str(base), "symlink": str(link), "target": target},
            )
    places = writable_places(workspace, profile, roots)
    if inside(base, places):
        raise LaunchRefused(
            f"the recordings folder {str(base)!r} lies where the code may write under profile {profile.name!r} "
            "(the workspace or a writable root): a cell could tamper with the live recording or plant symlinks "
            "in it. Pass recordings_dir= a folder outside the workspace and the writable roots; "
            "`console-bridge run` does this for you (it records privately and copies the recording afterwards).",
            details={"recordings_dir": str(base), "profile": profile.name},
        )


def reachable_places(workspace: Path, profile: Profile, roots: Sequence[Path]) -> list[Path]:
    """Where a session's code can write, plus the workspace and roots it can always read (resolved)."""
    return [*writable_places(workspace, profile, roots), workspace.resolve(), *(Path(r).resolve() for r in roots)]


@dataclass(frozen=True, slots=True)
class Evidence:
    """A host file or folder a session's code must not reach; ``readable``: refused where it can read, too."""

    what: str
    path: Path
    readable: bool = True


def evidence(policy: Policy | None) -> list[Evidence]:
    """The registry (state folder; denied to every cell, so refused only where code can write) and the
    policy's audit log (refused in the workspace and the writable roots, and denied everywhere else)."""
    found = [Evidence("console-bridge state folder (the session registry)", state_dir(), readable=False)]
    log = policy.audit_log if policy is not None else None
    if log is not None:
        found.append(Evidence("audit log", log.path))
    return found


def vet_evidence(items: Sequence[Evidence], workspace: Path, profile: Profile, roots: Sequence[Path]) -> None:
    """Refuse evidence (the audit log, the registry, a token file) that lies where the session's code can
    write it (any profile), or read it (the workspace and the writable roots) when ``readable``."""
    writable = writable_places(workspace, profile, roots)
    reachable = reachable_places(workspace, profile, roots)
    for item in items:
        if inside(item.path, reachable if item.readable else writable):
            where = "read it and, under a writable profile, rewrite it" if item.readable else "rewrite it"
            raise LaunchRefused(
                f"the {item.what} {str(item.path)!r} lies inside the workspace or a writable root, where the "
                f"session's code can {where}. Put it in a folder outside the workspace and the writable roots "
                "(e.g. under ~/.local/state); nothing was started.",
                details={"evidence": item.what, "path": str(item.path), "profile": profile.name},
            )
