"""Host-side file operations on folders a cell could have changed, without following symlinks.

A cell that may write to the workspace, a writable root or a recordings folder can plant
symlinks there (``art/recording -> ~/.ssh``) or swap a folder for one. Everything the host
does in such a place goes through this module: the place (the *root*) is opened once as a
directory descriptor, and every name below it is walked one component at a time with
``O_NOFOLLOW`` relative to the descriptor of its parent. A symlink met on the way is never
followed: it is refused (reads, writes) or removed as a link (``remove_tree``), and a tree
copy skips it. Special files (FIFOs, sockets, devices) are never opened for reading.

A root is a trusted path (opened here with ``O_DIRECTORY | O_NOFOLLOW``: its last component
must not be a symlink) or an already open directory descriptor, which this module never
closes (a caller may open ``/proc/<pid>/root/<dir>`` itself).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field

from console_bridge._errors import NotAllowed

__all__ = [
    "CopyReport",
    "Entry",
    "Root",
    "copy_tree",
    "open_dir",
    "open_file",
    "open_regular",
    "open_root",
    "prune_unused",
    "read_file",
    "remove_entry",
    "remove_tree",
    "split_name",
    "walk_root",
    "walk_tree",
    "write_file",
]

Root = int | str | os.PathLike[str]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW | _CLOEXEC
_READ_FLAGS = os.O_RDONLY | _NOFOLLOW | _CLOEXEC | getattr(os, "O_NONBLOCK", 0)
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
_CHUNK = 1 << 20


def split_name(name: str | os.PathLike[str]) -> list[str]:
    """The components of a relative name; refuses absolute names, ``..``, NUL and empty names.

    ``.`` components and repeated slashes are dropped (``a//./b`` is ``["a", "b"]``).
    """
    text = os.fspath(name)
    if not isinstance(text, str):
        raise NotAllowed(f"file name {text!r} must be text, not bytes; pass a str")
    if "\x00" in text:
        raise NotAllowed(f"file name {text!r} contains a NUL byte; pass a plain relative name")
    if text.startswith("/"):
        raise NotAllowed(f"file name {text!r} is absolute; pass a name relative to the folder, like 'out/data.csv'")
    parts = [part for part in text.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise NotAllowed(f"file name {text!r} contains '..'; pass a name inside the folder, without '..'")
    if not parts:
        raise NotAllowed(f"file name {text!r} names no file; pass a name like 'out/data.csv'")
    return parts


def _refuse_link(where: str, exc: OSError) -> NotAllowed:
    return NotAllowed(
        f"{where!r} is a symlink or not a folder (code could have replaced it; {exc.strerror}); nothing is "
        "followed through it. Remove it, or pick a folder the sandboxed code cannot write."
    )


def open_dir(path: str | os.PathLike[str]) -> int:
    """Open a trusted folder path as a directory descriptor; its last component must not be a symlink."""
    try:
        return os.open(os.fspath(path), _DIR_FLAGS)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise _refuse_link(os.fspath(path), exc) from None
        raise


@contextlib.contextmanager
def open_root(root: Root) -> Iterator[int]:
    """A directory descriptor for ``root`` (an open descriptor is used as is and not closed)."""
    if isinstance(root, int):
        yield root
        return
    fd = open_dir(root)
    try:
        yield fd
    finally:
        os.close(fd)


def _open_child_dir(parent: int, name: str, *, create: bool, shown: str, owner: tuple[int, int] | None = None) -> int:
    """Open ``name`` under ``parent`` as a folder (created with mode 0o755 when ``create``, owned by
    ``owner`` when given), never a symlink."""
    if create:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o755, dir_fd=parent)
            if owner is not None:
                os.chown(name, *owner, dir_fd=parent, follow_symlinks=False)
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise _refuse_link(shown, exc) from None
        raise


@contextlib.contextmanager
def _walk_to(root: int, parts: list[str], *, create: bool, owner: tuple[int, int] | None = None) -> Iterator[int]:
    """The descriptor of the folder ``parts`` under ``root`` (closed on exit unless it is ``root``)."""
    fd = root
    try:
        for index, part in enumerate(parts):
            child = _open_child_dir(fd, part, create=create, shown="/".join(parts[: index + 1]), owner=owner)
            if fd != root:
                os.close(fd)
            fd = child
        yield fd
    finally:
        if fd != root:
            os.close(fd)


def open_regular(path: str | os.PathLike[str], *, dir_fd: int | None = None) -> tuple[int, os.stat_result] | None:
    """A regular file opened for reading without following a symlink in its last component (nor
    blocking on a FIFO planted there), with its stat; None when it is missing, a link or not a regular
    file. The caller closes the descriptor."""
    try:
        fd = os.open(path, _READ_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
    except OSError:
        os.close(fd)
        return None
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        return None
    return fd, info


def open_file(root: Root, name: str | os.PathLike[str]) -> int:
    """An open read-only descriptor of the regular file ``name`` under ``root`` (the caller closes it).

    No component is followed through a symlink; a FIFO, socket or device is refused (NotAllowed).
    """
    parts = split_name(name)
    with open_root(root) as root_fd, _walk_to(root_fd, parts[:-1], create=False) as parent:
        try:
            fd = os.open(parts[-1], _READ_FLAGS, dir_fd=parent)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise _refuse_link(os.fspath(name), exc) from None
            raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise NotAllowed(f"{os.fspath(name)!r} is not a regular file; only regular files are read")
    os.set_blocking(fd, True)
    return fd


def read_file(root: Root, name: str | os.PathLike[str], max_bytes: int) -> bytes:
    """The bytes of the regular file ``name`` under ``root``; larger than ``max_bytes``: NotAllowed.

    No component is followed through a symlink; a FIFO, socket or device is refused.
    """
    fd = open_file(root, name)
    try:
        size = os.fstat(fd).st_size
        if size > max_bytes:
            raise NotAllowed(
                f"{os.fspath(name)!r} is {size} bytes, over the limit of {max_bytes}; "
                "raise max_bytes or write a smaller file"
            )
        chunks: list[bytes] = []
        total = 0
        while chunk := os.read(fd, min(_CHUNK, max_bytes + 1 - total)):
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:
                raise NotAllowed(
                    f"{os.fspath(name)!r} grew past the limit of {max_bytes} bytes while it was read; "
                    "raise max_bytes or write a smaller file"
                )
        return b"".join(chunks)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def write_file(
    root: Root,
    name: str | os.PathLike[str],
    data: bytes,
    *,
    mode: int = 0o644,
    replace: bool = False,
    inherit_owner: bool = False,
) -> None:
    """Create the file ``name`` under ``root`` with ``data``, creating missing folders on the way.

    Nothing is followed through a symlink. An existing entry is an error (``FileExistsError``)
    unless ``replace``, which removes a file or symlink there first (never a folder).
    ``inherit_owner``: what is created belongs to the owner of ``root`` (root writing into a
    session's TMPDIR, whose cells run as an unprivileged block of host ids).
    """
    parts = split_name(name)
    with open_root(root) as root_fd:
        owner = _owner_of(root_fd) if inherit_owner else None
        with _walk_to(root_fd, parts[:-1], create=True, owner=owner) as parent:
            _create(parent, parts[-1], data, mode=mode, replace=replace, owner=owner, shown=os.fspath(name))


def _owner_of(fd: int) -> tuple[int, int] | None:
    """(uid, gid) of the folder ``fd`` when it is not this process's (else None: nothing to change)."""
    info = os.fstat(fd)
    return None if (info.st_uid, info.st_gid) == (os.geteuid(), os.getegid()) else (info.st_uid, info.st_gid)


def _create(
    parent: int, name: str, data: bytes, *, mode: int, replace: bool, owner: tuple[int, int] | None, shown: str
) -> None:
    if replace:
        with contextlib.suppress(FileNotFoundError):
            info = os.stat(name, dir_fd=parent, follow_symlinks=False)
            if stat.S_ISDIR(info.st_mode):
                raise IsADirectoryError(errno.EISDIR, "is a folder, not replaced", shown)
            os.unlink(name, dir_fd=parent)
    fd = os.open(name, _CREATE_FLAGS, mode, dir_fd=parent)
    try:
        if owner is not None:
            os.fchown(fd, *owner)
        _write_all(fd, data)
    finally:
        os.close(fd)


def _open_locked_dir(parent: int, name: str) -> int:
    """Open a folder the code made unreadable (mode 0): chmod it to 0o700 through an ``O_PATH`` handle of the
    folder itself (never a symlink: ``O_NOFOLLOW | O_DIRECTORY``), then open it."""
    o_path = getattr(os, "O_PATH", 0)
    if not o_path or not os.path.isdir("/proc/self/fd"):
        raise PermissionError(errno.EACCES, "folder is not readable and cannot be unlocked here", name)
    handle = os.open(name, o_path | os.O_DIRECTORY | _NOFOLLOW | _CLOEXEC, dir_fd=parent)
    try:
        os.chmod(f"/proc/self/fd/{handle}", 0o700)
    finally:
        os.close(handle)
    return os.open(name, _DIR_FLAGS, dir_fd=parent)


def remove_entry(parent: int, name: str) -> None:
    """Remove ``name`` under the folder descriptor ``parent``: a folder as a tree, anything else as itself."""
    try:
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
        except PermissionError:
            fd = _open_locked_dir(parent, name)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # a symlink (even to a folder) or a file: unlink the entry
            os.unlink(name, dir_fd=parent)
            return
        raise
    try:
        os.fchmod(fd, 0o700)  # finalized recordings are read-only; this changes the folder itself, never a target
        with os.scandir(fd) as entries:
            names = [entry.name for entry in entries]
        for child in names:
            remove_entry(fd, child)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent)


def remove_tree(parent: Root, name: str | os.PathLike[str]) -> None:
    """Remove ``name`` (relative, no ``..``) under ``parent`` and everything in it; symlinks go as links.

    Missing: ``FileNotFoundError``. A symlink on the way to ``name`` is refused (NotAllowed).
    """
    parts = split_name(name)
    with open_root(parent) as root_fd, _walk_to(root_fd, parts[:-1], create=False) as fd:
        remove_entry(fd, parts[-1])


@dataclass
class CopyReport:
    """What ``copy_tree`` copied and what it left out (relative names)."""

    files: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # symlinks, FIFOs, sockets, devices, unreadable entries
    bytes: int = 0


def copy_tree(
    src_root: Root,
    src_name: str | os.PathLike[str],
    dst_root: Root,
    dst_name: str | os.PathLike[str],
    *,
    max_bytes: int | None = None,
) -> CopyReport:
    """Copy the folder ``src_name`` under ``src_root`` to a new folder ``dst_name`` under ``dst_root``.

    Copies folders and regular files only (as ordinary 0o755/0o644 entries of the host user);
    symlinks and special files are skipped and listed in the report. ``dst_name`` must not
    exist (``FileExistsError``). ``max_bytes`` caps the total copied (NotAllowed beyond).
    """
    dst_parts = split_name(dst_name)
    report = CopyReport()
    with open_root(dst_root) as dst_fd, _walk_to(dst_fd, dst_parts[:-1], create=True) as dst_parent:
        os.mkdir(dst_parts[-1], 0o755, dir_fd=dst_parent)
        target = _open_child_dir(dst_parent, dst_parts[-1], create=False, shown=os.fspath(dst_name))
        try:
            for entry in walk_tree(src_root, src_name, report.skipped):
                *folders, leaf = entry.name.split("/")
                with _walk_to(target, folders, create=False) as where:
                    if entry.is_dir:
                        os.mkdir(leaf, 0o755, dir_fd=where)
                        continue
                    out = os.open(leaf, _CREATE_FLAGS, 0o644, dir_fd=where)
                    try:
                        while chunk := os.read(entry.fd, _CHUNK):
                            report.bytes += len(chunk)
                            if max_bytes is not None and report.bytes > max_bytes:
                                raise NotAllowed(
                                    f"the copy passed its limit of {max_bytes} bytes at {entry.name!r}; raise "
                                    "the limit or remove large files from the source"
                                )
                            _write_all(out, chunk)
                    finally:
                        os.close(out)
                    report.files.append(entry.name)
        finally:
            os.close(target)
    return report


@dataclass(frozen=True)
class Entry:
    """One folder or regular file met by ``walk_tree``; ``fd`` is an open descriptor of a file (else -1),
    valid only until the walk moves on."""

    name: str  # relative to the walked folder, "/"-separated
    info: os.stat_result
    fd: int = -1

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.info.st_mode)


def walk_tree(root: Root, name: str | os.PathLike[str], skipped: list[str] | None = None) -> Iterator[Entry]:
    """Folders (before their contents) and regular files under ``name``, sorted, never through a symlink.

    Symlinks and special files are left out (and appended to ``skipped`` when given).
    """
    parts = split_name(name)
    with open_root(root) as root_fd, _walk_to(root_fd, parts[:-1], create=False) as parent:
        top = _open_child_dir(parent, parts[-1], create=False, shown=os.fspath(name))
        try:
            yield from _walk_fd(top, "", [] if skipped is None else skipped)
        finally:
            os.close(top)


def walk_root(root: Root, skipped: list[str] | None = None) -> Iterator[Entry]:
    """Like :func:`walk_tree`, for everything under ``root`` itself."""
    with open_root(root) as root_fd:
        top = os.open(".", _DIR_FLAGS, dir_fd=root_fd)
        try:
            yield from _walk_fd(top, "", [] if skipped is None else skipped)
        finally:
            os.close(top)


def _walk_fd(folder: int, prefix: str, skipped: list[str]) -> Iterator[Entry]:
    with os.scandir(folder) as entries:
        names = sorted(entry.name for entry in entries)
    for name in names:
        shown = prefix + name
        try:
            fd = os.open(name, _READ_FLAGS, dir_fd=folder)
        except OSError:  # a symlink (ELOOP), or unreadable
            skipped.append(shown)
            continue
        try:
            info = os.fstat(fd)
            if stat.S_ISDIR(info.st_mode):
                yield Entry(shown, info)
                yield from _walk_fd(fd, shown + "/", skipped)
            elif stat.S_ISREG(info.st_mode):
                yield Entry(shown, info, fd)
            else:
                skipped.append(shown)
        finally:
            os.close(fd)


def prune_unused(
    parent: str | os.PathLike[str], keep: str | os.PathLike[str], *, unused: float, stale_build: float
) -> None:
    """Remove the folders of a shared cache (``parent``) that no session used for ``unused`` seconds
    (a use touches its mtime), and builds' ``.build-*`` scratch folders older than ``stale_build``
    (their builder died); never ``keep``, never through a symlink. Errors are left alone: another
    process may be pruning or using the same cache."""
    import shutil
    import time

    now, keep = time.time(), os.fspath(keep)
    with contextlib.suppress(OSError):
        for entry in os.scandir(parent):
            if entry.path == keep:
                continue
            with contextlib.suppress(OSError):
                age = now - entry.stat(follow_symlinks=False).st_mtime
                dead_build = entry.name.startswith(".build-") and age > stale_build
                if (age > unused or dead_build) and entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
