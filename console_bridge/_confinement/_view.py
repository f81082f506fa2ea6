"""What a session's processes can see of the host: the view, as a mount plan (pure data).

A cell sees the operating system runtime (``/usr``, ``/bin``, ``/sbin``, ``/lib*``,
``/etc`` without its secrets, ``/opt``), the interpreter environments the session runs
(the worker venv and its base installation, R's installation and library paths), what
mcp-console needs (its installation), the workspace, the ``read_roots``, the recording
folder the server writes (denied to cells by mcp-console's own rules) and its own TMPDIR.
Nothing else of the host has a name inside: not the home folder outside those paths,
``/root``, ``/home/*``, ``/tmp``, ``/var/tmp``, the host's ``/dev/shm``, ``/mnt``,
``/media``, ``/srv``, ``/run``, other sessions, console-bridge's state, token files.

The view is built by path when the session starts, so a rename, a recreated folder or a
file created later under a hidden place stays hidden. Inside ``/etc`` every entry that
is not readable by everyone (``/etc/shadow``, a root-only ``app-secret.conf``) is masked
at start, so root's cells do not see them either; names hidden inside a shown tree (those,
the workspace's ``.git``, ``deny_read``) stay hidden when the host renames, recreates or
creates them later, by a watch-and-remask (``_remask``).

:func:`build_view` turns the session's paths into a :class:`View`; its ``plan()`` is what
the supervisor applies (``_namespaces.apply_plan``) and its ``contains()`` is what the
probe uses to pick canaries outside the view. Nothing here mounts or writes.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from console_bridge._confinement._mount_steps import MountPlan, MountStep, WatchSpec

__all__ = ["RUNTIME_DIRS", "SHIM_DIR", "View", "ViewEntry", "build_view", "etc_secrets"]

#: The operating system runtime every view holds (those that exist; symlinks kept as symlinks).
RUNTIME_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt")
#: How deep the /etc scan for entries others may not read goes (it stays cheap: a few ms).
_ETC_DEPTH = 4
#: The server's own /tmp inside the view (a folder or two; cells cannot write it).
_SERVER_TMP = 64 << 20
#: Where the server's PATH points when commands are hidden (a folder of symlinks in the view's root).
SHIM_DIR = "/.console-bridge/path"


@dataclass(frozen=True, slots=True)
class ViewEntry:
    """One host path in the view: read-only unless ``writable``; ``why`` says what needs it.

    ``owned``: the user's own place (the workspace, read and writable roots, the server's own
    folders), which a root-started session sees through an idmapped mount: root's files there are
    its root's, whatever their mode. The system's trees (``/usr``, ``/opt``, the interpreters) are
    never mapped: their root-only files stay unreadable to a session of root."""

    path: str
    why: str
    writable: bool = False
    owned: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "why": self.why, "writable": self.writable}

    def merged(self, why: str, writable: bool, owned: bool) -> ViewEntry:
        """The same path asked for again: writable and owned if either asks for it."""
        return ViewEntry(self.path, self.why, self.writable or writable, self.owned or owned)


@dataclass(frozen=True)
class View:
    """The paths a session's processes see, and what is masked inside them."""

    root: str
    entries: tuple[ViewEntry, ...]
    symlinks: tuple[tuple[str, str], ...] = ()  # (path, target) recreated as in the host
    masks: tuple[str, ...] = ()
    tmpdir: str = ""
    tmpdir_size: int | None = None
    home: str = ""
    extra_dirs: tuple[str, ...] = field(default=())
    #: The server's PATH, when commands are hidden: one folder of symlinks to ``path_dirs``' entries.
    path_dirs: tuple[str, ...] = ()
    hidden_commands: tuple[str, ...] = ()
    #: A host folder already holding those symlinks (``_path_shim.cached_shim``), bound read-only.
    shim_source: str = ""
    #: Names kept hidden while the host changes the trees around them (``_remask``), and the
    #: tree hidden by mode (``/etc``: what not everyone may read), at any depth, later files too.
    hidden: tuple[str, ...] = ()
    hidden_tree: str = ""

    @property
    def search_path(self) -> str | None:
        """The PATH the server gets in this view (None: the host's PATH as it is)."""
        return SHIM_DIR if self.hidden_commands else None

    def pinned(self) -> list[str]:
        """The folders on the way to a hidden name inside a writable entry, shallowest first: each is
        bound onto itself, so no cell renames or removes it to make the name anew and hold it (the
        host's later secret would be written into the cell's file)."""
        folders: dict[str, None] = {}
        for name in self.hidden:
            entry = max((e.path for e in self.entries if _inside(name, e.path)), key=len, default=None)
            if entry is None or not any(e.path == entry and e.writable for e in self.entries):
                continue
            way = os.path.dirname(name)
            chain = []
            while way != entry and _inside(way, entry):
                chain.append(way)
                way = os.path.dirname(way)
            for folder in reversed(chain):
                if not os.path.isdir(folder) or os.path.islink(folder):
                    break
                folders.setdefault(folder)
        return sorted(folders, key=lambda path: (path.count("/"), path))

    def contains(self, path: str | os.PathLike[str]) -> bool:
        """True when ``path`` (absolute, normalised) has a name inside the view."""
        text = os.path.normpath(os.fspath(path))
        if any(_inside(text, mask) for mask in self.masks):
            return False
        places = [entry.path for entry in self.entries] + ([self.tmpdir] if self.tmpdir else [])
        places += [link for link, _ in self.symlinks]
        return any(_inside(text, place) for place in places)

    def plan(self) -> MountPlan:
        """The steps the supervisor applies, in order (parents before children)."""
        steps: list[MountStep] = [{"op": "empty", "path": "/.cb-empty"}]
        for link, target in self.symlinks:
            steps.append({"op": "symlink", "path": link, "target": target})
        # The server's own /tmp (mcp-console makes a folder there); cells see it read-only.
        steps.append({"op": "tmpfs", "path": "/tmp", "mode": 0o1777, "size": _SERVER_TMP})
        for entry in sorted(self.entries, key=lambda e: (e.path.count("/"), e.path)):
            steps.append(
                {
                    "op": "bind",
                    "source": entry.path,
                    "path": entry.path,
                    "writable": entry.writable,
                    "idmap": entry.owned,
                }
            )
        for folder in self.extra_dirs:
            steps.append({"op": "dir", "path": folder})
        steps.append({"op": "dev", "path": "/dev"})
        steps.append({"op": "tmpfs", "path": "/dev/shm", "mode": 0o1777, "size": self.tmpdir_size})
        steps.append({"op": "proc", "path": "/proc"})
        if self.tmpdir:
            steps.append(
                {"op": "tmpfs", "path": self.tmpdir, "mode": 0o700, "size": self.tmpdir_size, "session_owned": True}
            )
        if self.hidden_commands and self.shim_source:
            steps.append({"op": "bind", "source": self.shim_source, "path": SHIM_DIR, "writable": False})
        elif self.hidden_commands:
            steps.append(
                {"op": "shim", "path": SHIM_DIR, "sources": list(self.path_dirs), "hide": list(self.hidden_commands)}
            )
        for folder in self.pinned():
            steps.append({"op": "pin", "path": folder})
        for mask in self.masks:
            steps.append({"op": "mask", "path": mask})
        watch: WatchSpec = {"names": list(self.hidden), "etc": self.hidden_tree or None}
        return {"root": self.root, "steps": steps, "watch": watch}

    def describe(self) -> list[dict[str, Any]]:
        """What ``status().view`` lists: every host path in the view and why."""
        out = [entry.as_dict() for entry in sorted(self.entries, key=lambda e: e.path)]
        if self.tmpdir:
            out.append({"path": self.tmpdir, "why": "the session's private TMPDIR", "writable": True})
        return out


def _inside(path: str, place: str) -> bool:
    return path == place or path.startswith(place.rstrip("/") + "/")


def etc_secrets(etc: str = "/etc", depth: int = _ETC_DEPTH) -> list[str]:
    """Entries under ``etc`` that not everyone may read (files) or enter (folders)."""
    found: list[str] = []

    def walk(folder: str, level: int) -> None:
        try:
            items = list(os.scandir(folder))
        except OSError:
            return
        for item in items:
            try:
                info = item.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISLNK(info.st_mode):
                continue
            if stat.S_ISDIR(info.st_mode):
                if info.st_mode & 0o005 != 0o005:
                    found.append(item.path)
                elif level < depth:
                    walk(item.path, level + 1)
            elif stat.S_ISREG(info.st_mode) and not info.st_mode & 0o004:
                found.append(item.path)

    walk(etc, 1)
    return sorted(found)


def _norm(path: str | os.PathLike[str]) -> str:
    return os.path.normpath(os.path.abspath(os.fspath(path)))


def build_view(
    *,
    root: str | os.PathLike[str],
    workspace: str | os.PathLike[str],
    workspace_writable: bool,
    writable_roots: Sequence[str | os.PathLike[str]] = (),
    read_roots: Sequence[str | os.PathLike[str]] = (),
    environments: Iterable[tuple[str | os.PathLike[str], str]] = (),
    recording_base: str | os.PathLike[str] | None = None,
    files: Iterable[tuple[str | os.PathLike[str], str]] = (),
    server_dirs: Iterable[tuple[str | os.PathLike[str], str]] = (),
    tmpdir: str | os.PathLike[str] | None = None,
    tmpdir_size: int | None = None,
    home: str | os.PathLike[str] | None = None,
    masks: Iterable[str] = (),
    runtime: Sequence[str] = RUNTIME_DIRS,
    etc_masks: Sequence[str] | None = None,
    search_path: str | None = None,
    hide_commands: Sequence[str] = (),
    hidden: Iterable[str] = (),
) -> View:
    """The view of one session (reads the host only to tell folders, files and symlinks apart).

    ``environments`` are (path, why) pairs of interpreter installations (the worker venv, its
    base, R's folders, mcp-console's installation); ``files`` single files the server or
    worker must read (the R hook profile). Paths that do not exist are left out.
    ``hide_commands`` (e.g. R when a session does not ask for it) are left out of the server's
    PATH: the folders of ``search_path`` that are in the view become one folder of symlinks
    without them (mcp-console discovers R through PATH at every start, seconds of work).
    ``hidden`` are names to keep hidden whatever the host does to them later, existing or not
    (the workspace's ``.git``, the credential stores); ``masks`` are kept hidden too.
    """
    entries: dict[str, ViewEntry] = {}
    symlinks: list[tuple[str, str]] = []

    def add(raw: str | os.PathLike[str], why: str, writable: bool = False, owned: bool = False) -> None:
        path = _norm(raw)
        if path == "/" or not os.path.exists(path):
            return
        real = os.path.realpath(path)
        if real != path and os.path.exists(real):  # a path through a symlink: bind where it really is too
            add(real, why, writable, owned)
        current = entries.get(path)
        entries[path] = (
            ViewEntry(path, why, writable, owned) if current is None else current.merged(why, writable, owned)
        )

    for item in runtime:
        if os.path.islink(item):
            symlinks.append((item, os.readlink(item)))
        elif os.path.isdir(item):
            add(item, "operating system runtime")
    for path, why in environments:
        add(path, why)
    files_list = list(files)
    server_dirs_list = list(server_dirs)
    for path, why in files_list:
        add(path, why)
    add(workspace, "workspace", workspace_writable, owned=True)
    for path in read_roots:
        add(path, "read root", owned=True)
    for path in writable_roots:
        add(path, "writable root", True, owned=True)
    for path, why in server_dirs_list:
        add(path, why, True, owned=True)
    if recording_base is not None:
        add(recording_base, "recordings (the server writes them; cells are denied them)", True, owned=True)
    # A path inside another entry with the same mode needs no bind of its own.
    kept: list[ViewEntry] = []
    for entry in sorted(entries.values(), key=lambda e: e.path):
        parent = next((k for k in reversed(kept) if _inside(entry.path, k.path)), None)
        if parent is not None and (parent.writable, parent.owned) == (entry.writable, entry.owned):
            continue
        kept.append(entry)
    secrets = list(etc_secrets() if etc_masks is None else etc_masks)
    all_masks = [m for m in dict.fromkeys([*secrets, *(_norm(m) for m in masks)])]
    # Never mask what holds the session's own folders (a state folder inside the recordings folder or
    # the workspace): mcp-console's deny rules keep those from cells, the server must still write them.
    own = [_norm(p) for p in (tmpdir, recording_base) if p is not None]
    own += [_norm(p) for p, _ in server_dirs_list] + [_norm(p) for p, _ in files_list]
    all_masks = [m for m in all_masks if not any(_inside(place, m) for place in own)]
    kept_names = dict.fromkeys(_norm(m) for m in [*masks, *hidden])
    hidden_names = tuple(
        name
        for name in kept_names
        if not any(_inside(place, name) for place in own) and any(_inside(name, e.path) for e in kept)
    )
    tmp = _norm(tmpdir) if tmpdir is not None else ""
    home_text = _norm(home) if home is not None else ""
    extra = (home_text,) if home_text and not any(_inside(home_text, e.path) for e in kept) else ()
    view_paths = [e.path for e in kept] + [link for link, _ in symlinks]
    path_dirs = tuple(
        dict.fromkeys(
            os.path.normpath(d)
            for d in (search_path or "").split(os.pathsep)
            if d and os.path.isabs(d) and any(_inside(os.path.normpath(d), p) for p in view_paths)
        )
    )
    return View(
        root=_norm(root),
        entries=tuple(kept),
        symlinks=tuple(symlinks),
        masks=tuple(m for m in all_masks if any(_inside(m, e.path) for e in kept)),
        tmpdir=tmp,
        tmpdir_size=tmpdir_size,
        home=home_text,
        extra_dirs=extra,
        path_dirs=path_dirs if hide_commands else (),
        hidden_commands=tuple(hide_commands),
        hidden=hidden_names,
        hidden_tree="/etc" if any(e.path == "/etc" for e in kept) and etc_masks is None else "",
    )


def path_is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:
        return False
