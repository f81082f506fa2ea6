"""Entering a session's namespaces and building its view: the only code that mounts.

Stdlib only (the supervisor imports it as a top-level module before it starts the server).
It runs in the server's process between ``fork`` and ``exec``:

1. ``unshare(CLONE_NEWUSER | CLONE_NEWNS)`` where the process may not mount on its own
   (a normal user: its uid and gid are mapped to themselves, so files keep their owners
   and the server runs without capabilities after ``exec``), or ``unshare(CLONE_NEWNS)``
   alone where it may (``CAP_SYS_ADMIN``);
2. every mount of the session's private tree made private, then :func:`apply_plan` builds
   the view on a fresh tmpfs: read-only binds of what the session may see, a minimal
   ``/dev``, the size-capped TMPDIR, masks over secrets inside a bound tree;
3. ``pivot_root`` into it and the old root detached, so nothing outside the view has a
   name any more (a rename or a file created later on the host cannot appear). ``chroot``
   is not used: a process in a chroot may not create the user namespaces mcp-console's
   own sandbox needs.

A mount plan is data (see ``_view.py``); a step that fails raises :class:`SetupError`
naming the step and the path.
"""

from __future__ import annotations

import ctypes
import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_MOVE = 8192
MS_REC = 16384
MS_PRIVATE = 1 << 18
MS_SLAVE = 1 << 19
MNT_DETACH = 2
_SYS_PIVOT_ROOT = 155
_SYS_MOUNT_SETATTR = 442
_AT_RECURSIVE = 0x8000
_MOUNT_ATTR_RDONLY = 0x1
_MOUNT_ATTR_NOSUID = 0x2
_MOUNT_ATTR_NODEV = 0x4
_DEVICES = ("null", "zero", "full", "random", "urandom", "tty")


class SetupError(Exception):
    """A namespace or mount step failed; the message names the step and the path."""


class _MountAttr(ctypes.Structure):
    _fields_ = (
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    )


_LIBC: ctypes.CDLL | None = None


def _libc() -> ctypes.CDLL:
    global _LIBC
    if _LIBC is None:
        _LIBC = ctypes.CDLL(None, use_errno=True)
    return _LIBC


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise SetupError(f"{what}: {os.strerror(code)} (errno {code})")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None, what: str) -> None:
    _check(
        _libc().mount(
            source.encode() if source is not None else None,
            target.encode(),
            fstype.encode() if fstype is not None else None,
            flags,
            data.encode() if data is not None else None,
        ),
        f"{what} ({target})",
    )


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def enter(user_namespace: bool) -> None:
    """Enter a private mount namespace (inside a new user namespace when ``user_namespace``)."""
    uid, gid = os.geteuid(), os.getegid()
    if user_namespace:
        _check(_libc().unshare(CLONE_NEWUSER | CLONE_NEWNS), "unshare(CLONE_NEWUSER|CLONE_NEWNS)")
        try:
            _write("/proc/self/setgroups", "deny")
            _write("/proc/self/uid_map", f"{uid} {uid} 1")
            _write("/proc/self/gid_map", f"{gid} {gid} 1")
        except OSError as exc:
            raise SetupError(f"mapping uid {uid} into the user namespace: {exc.strerror}") from None
    else:
        _check(_libc().unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _mount(None, "/", None, MS_REC | MS_PRIVATE, None, "making mounts private")


def _makedirs(path: str) -> None:
    try:
        os.makedirs(path, mode=0o755, exist_ok=True)
    except OSError as exc:
        raise SetupError(f"creating {path} in the view: {exc.strerror}") from None


def _make_file(path: str) -> None:
    _makedirs(os.path.dirname(path))
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o644))
    except OSError as exc:
        raise SetupError(f"creating {path} in the view: {exc.strerror}") from None


def _read_only(target: str) -> None:
    """Make a bind (and every mount beneath it) read-only, keeping the flags the kernel locks."""
    attr = _MountAttr(_MOUNT_ATTR_RDONLY | _MOUNT_ATTR_NOSUID | _MOUNT_ATTR_NODEV, 0, 0, 0)
    libc = _libc()
    result = libc.syscall(
        _SYS_MOUNT_SETATTR, -100, target.encode(), _AT_RECURSIVE, ctypes.byref(attr), ctypes.sizeof(attr)
    )
    if result == 0:
        return
    # Kernels before 5.12: remount the top bind read-only, carrying the flags it already has.
    flags = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV
    info = os.statvfs(target)
    if info.f_flag & os.ST_NOEXEC:
        flags |= MS_NOEXEC
    for name in ("ST_NOATIME", "ST_NODIRATIME", "ST_RELATIME"):
        bit = getattr(os, name, 0)
        if info.f_flag & bit:
            flags |= {"ST_NOATIME": 1024, "ST_NODIRATIME": 2048, "ST_RELATIME": 1 << 21}[name]
    _mount(None, target, None, flags, None, "remounting read-only")


def _bind(source: str, target: str, *, writable: bool) -> None:
    try:
        is_dir = os.path.isdir(source)
    except OSError:
        is_dir = False
    if is_dir:
        _makedirs(target)
    else:
        _make_file(target)
    _mount(source, target, None, MS_BIND | MS_REC, None, f"binding {source}")
    if not writable:
        _read_only(target)


def _dev(root: str) -> None:
    target = root + "/dev"
    _makedirs(target)
    _mount("tmpfs", target, "tmpfs", MS_NOSUID, "mode=0755,size=1m", "mounting /dev")
    for name in _DEVICES:
        if os.path.exists("/dev/" + name):
            _make_file(f"{target}/{name}")
            _mount("/dev/" + name, f"{target}/{name}", None, MS_BIND, None, f"binding /dev/{name}")
    for name, link in (
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
        ("ptmx", "pts/ptmx"),
    ):
        os.symlink(link, f"{target}/{name}")
    for name in ("pts", "shm"):
        os.mkdir(f"{target}/{name}", 0o755)


def apply_plan(plan: dict[str, Any]) -> None:
    """Build the view described by ``plan`` on ``plan["root"]`` and pivot into it."""
    root = str(plan["root"])
    _makedirs(root)
    _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=16m", "mounting the view's root")
    for step in plan["steps"]:
        kind = step["op"]
        path = str(step.get("path", ""))
        target = root + path
        if kind == "bind":
            _bind(str(step["source"]), target, writable=bool(step.get("writable")))
        elif kind == "symlink":
            _makedirs(os.path.dirname(target))
            os.symlink(str(step["target"]), target)
        elif kind == "dir":
            _makedirs(target)
        elif kind == "tmpfs":
            _makedirs(target)
            options = f"mode={int(step.get('mode', 0o700)):o}"
            if step.get("size"):
                options += f",size={int(step['size'])}"
            _mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, options, "mounting a tmpfs")
        elif kind == "mask":
            if os.path.isdir(target) and not os.path.islink(target):
                _mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV | MS_RDONLY, "mode=0000,size=4k", "masking")
            elif os.path.lexists(target):
                _mount(root + "/.cb-empty", target, None, MS_BIND, None, "masking")
                _read_only(target)
        elif kind == "empty":
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o000)
            os.close(fd)
        elif kind == "dev":
            _dev(root)
        elif kind == "proc":
            _bind("/proc", target, writable=True)
        elif kind == "shim":
            fill_shim(target, [str(source) for source in step["sources"]], set(step["hide"]))
        else:
            raise SetupError(f"unknown mount plan step {kind!r}")
    if os.path.lexists(root + "/.cb-empty"):  # the masks hold it; nothing else needs its name
        os.unlink(root + "/.cb-empty")
    _pivot(root)


def fill_shim(target: str, sources: list[str], hide: set[str]) -> None:
    """A PATH folder of symlinks to every command of ``sources`` (first one wins) but ``hide``."""
    _makedirs(target)
    made: set[str] = set(hide)
    for source in sources:
        try:
            names = os.listdir(source)
        except OSError:
            continue
        for name in names:
            if name not in made:
                made.add(name)
                os.symlink(f"{source}/{name}", f"{target}/{name}")


def _pivot(root: str) -> None:
    old = root + "/.cb-old-root"
    os.mkdir(old, 0o700)
    _check(_libc().syscall(_SYS_PIVOT_ROOT, root.encode(), old.encode()), "pivot_root into the view")
    os.chdir("/")
    _check(_libc().umount2(b"/.cb-old-root", MNT_DETACH), "detaching the host's root")
    os.rmdir("/.cb-old-root")
    _mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, None, "sealing the view's root")
