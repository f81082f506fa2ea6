"""Entering a session's namespaces and building its view: the only code that mounts.

Stdlib only (the supervisor imports it as a top-level module before it starts the server).
It runs in the server's process between ``fork`` and ``exec``. Every session gets a user
namespace, a mount namespace, a UTS and an IPC namespace of its own, and a session keyring of
its own, so no cell holds a privilege of the host, whoever started it:

* **a normal user** (``mode="user"``): ``unshare(CLONE_NEWUSER | CLONE_NEWNS | ...)``, its uid
  and gid mapped to themselves, so files keep their owners and the server runs without
  capabilities after ``exec``;
* **root** (``mode="mapped"``): the mount namespace first, while the process is still the
  host's root (so it can reach every path it binds), then, once the view is built and pivoted
  into, ``setns`` into a user namespace the supervisor made (:func:`make_user_namespace`) whose
  uid and gid 0 are an unprivileged host range (``_idmap.py``). The cell's uid 0 is then a host
  id no account uses: the kernel's checks by uid (``/proc/sys``, keyrings, root-only files)
  refuse it. The writable places (workspace, writable roots, the server's own folders) are
  bound through an idmapped mount (``mount_setattr(MOUNT_ATTR_IDMAP)``, Linux 5.12), so what a
  cell writes there lands owned by root on the host; the TMPDIR tmpfs belongs to the session's
  root.

Then:

1. every mount of the session's private tree made private, then :func:`apply_plan` builds
   the view on a fresh tmpfs: read-only binds of what the session may see, a minimal
   ``/dev``, the size-capped TMPDIR, masks over secrets inside a bound tree;
2. ``pivot_root`` into it and the old root detached, so nothing outside the view has a
   name any more (a rename or a file created later on the host cannot appear). ``chroot``
   is not used: a process in a chroot may not create (or join) the user namespaces
   mcp-console's own sandbox needs.

``/proc`` in the view is the host's procfs, bound (the server has no pid namespace of its own);
mcp-console's sandbox mounts the cells a procfs of their own pid namespace over it. Nothing is
bound over the host's ``/proc/sys``, ``/proc/sysrq-trigger`` and the like: the kernel then
finds that procfs not "fully visible" and refuses a fresh one to the nested namespace, and the
sandbox falls back to binding the host's (measured: the cells then saw the host's procfs,
every pid of the host). The session's ids hold there instead: the kernel checks those files by
uid, and a session's uid is never one of the host's accounts.

Syscalls glibc does not wrap are called by number from a table per architecture
(:data:`SYSCALLS`: x86-64 and aarch64); another architecture is refused by name.

A mount plan is data (see ``_view.py``); a step that fails raises :class:`SetupError`
naming the step and the path.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat

try:  # the host imports the package's module; the supervisor (python -I -S) loads siblings by file name
    from console_bridge._confinement._remask import open_beneath
except ImportError:
    from _remask import open_beneath  # type: ignore[import-not-found,no-redef]

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from console_bridge._confinement._mount_steps import MountPlan

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
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
MS_SHARED = 1 << 20
MNT_DETACH = 2
_AT_FDCWD = -100
_AT_EMPTY_PATH = 0x1000
_AT_RECURSIVE = 0x8000
_OPEN_TREE_CLONE = 1
_OPEN_TREE_CLOEXEC = 0o2000000
_MOVE_MOUNT_F_EMPTY_PATH = 0x4
_MOUNT_ATTR_RDONLY = 0x1
_MOUNT_ATTR_NOSUID = 0x2
_MOUNT_ATTR_NODEV = 0x4
_MOUNT_ATTR_IDMAP = 0x00100000
_KEYCTL_JOIN_SESSION_KEYRING = 1
_PR_SET_PDEATHSIG = 1
_SIGKILL = 9
_DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
#: System calls glibc does not wrap (or wraps only in newer releases), by architecture
#: (``os.uname().machine``). The mount API's numbers (428, 429, 442) are shared by every
#: architecture since Linux 5.1; the older ones are not (x86-64: arch/x86/entry/syscalls;
#: aarch64: include/uapi/asm-generic/unistd.h).
SYSCALLS: dict[str, dict[str, int]] = {
    "x86_64": {"pivot_root": 155, "keyctl": 250, "open_tree": 428, "move_mount": 429, "mount_setattr": 442},
    "aarch64": {"pivot_root": 41, "keyctl": 219, "open_tree": 428, "move_mount": 429, "mount_setattr": 442},
}
SYSCALLS["arm64"] = SYSCALLS["aarch64"]
#: The modes of :func:`enter`.
MODES = ("user", "mapped")


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


def syscall_number(name: str) -> int:
    """The number of system call ``name`` on this architecture; SetupError naming it on another."""
    machine = os.uname().machine
    table = SYSCALLS.get(machine)
    if table is None:
        known = ", ".join(sorted(set(SYSCALLS) - {"arm64"}))
        raise SetupError(
            f"this architecture ({machine}) is not one console-bridge knows the system call numbers of ({known}); "
            "run on one of those"
        )
    return table[name]


def _syscall(name: str, *args: Any) -> int:
    return int(_libc().syscall(syscall_number(name), *args))


def make_user_namespace(base: int, count: int) -> int:
    """A user namespace whose ids 0..count-1 are host ids ``base``..: an fd of it (close-on-exec).

    Made by the host's root (the supervisor) in a throwaway child that only unshares and waits:
    the maps of other ids than one's own can only be written from the parent namespace with
    ``CAP_SETUID``/``CAP_SETGID``. The namespace lives as long as the fd (and whoever joins it)."""
    ready_r, ready_w = os.pipe()
    done_r, done_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the holder: unshare, say so, wait for the parent to have the namespace
        try:
            os.close(ready_r)
            os.close(done_w)
            ok = _libc().unshare(CLONE_NEWUSER) == 0
            os.write(ready_w, b"1" if ok else str(ctypes.get_errno()).encode())
            os.read(done_r, 1)
        finally:
            os._exit(0)
    os.close(ready_w)
    os.close(done_r)
    try:
        answer = os.read(ready_r, 16)
        if answer != b"1":
            code = int(answer or b"0") or errno.EPERM
            raise SetupError(f"unshare(CLONE_NEWUSER) for the session's ids: {os.strerror(code)} (errno {code})")
        for name in ("uid_map", "gid_map"):
            try:
                _write(f"/proc/{pid}/{name}", f"0 {base} {count}\n")
            except OSError as exc:
                raise SetupError(
                    f"mapping the session's ids 0-{count - 1} to host ids {base}-{base + count - 1} ({name}): "
                    f"{exc.strerror}"
                ) from None
        return os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        os.close(ready_r)
        os.close(done_w)
        os.waitpid(pid, 0)


def claim_ids(locks: str, start: int, count: int, size: int) -> tuple[int, int]:
    """A block of ``size`` host ids of the range ``start``..``start + count`` that no live session
    holds: (its first id, the fd whose lock holds it). Each block is a lock file in ``locks``,
    held (``flock``) for as long as the fd is open, so a session that dies frees its ids with it;
    the search starts at a random block. A lock is taken only on the file the name still names
    (one removed by :func:`release_ids` while this opened it is left), so two sessions never
    hold one block."""
    import fcntl

    blocks = count // size
    if blocks < 1:
        raise SetupError(f"the id range {start}:{count} holds no block of {size} ids")
    try:
        os.makedirs(locks, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise SetupError(f"creating the id locks folder {locks}: {exc.strerror}") from None
    first = int.from_bytes(os.urandom(4), "little") % blocks
    for step in range(blocks):
        block = (first + step) % blocks
        base = start + block * size
        fd = os.open(f"{locks}/{base}", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            held, named = os.fstat(fd), os.stat(f"{locks}/{base}", follow_symlinks=False)
            if (held.st_dev, held.st_ino) != (named.st_dev, named.st_ino):
                raise OSError("removed by its last holder")
        except OSError:
            os.close(fd)
            continue
        return base, fd
    raise SetupError(f"every block of {size} ids in the range {start}:{count} is held by a live session")


def release_ids(locks: str, base: int, fd: int) -> None:
    """Give a claimed block back: its lock file is removed while still locked, then closed."""
    try:  # noqa: SIM105 (stdlib-only and light at import: no contextlib, see the module's docstring)
        os.unlink(f"{locks}/{base}")
    except OSError:
        pass
    os.close(fd)


def enter(mode: str) -> None:
    """Enter the session's namespaces: a user namespace mapping this user to itself (``"user"``), or,
    for root (``"mapped"``), mount, UTS and IPC namespaces only (the user namespace comes after the
    view is built: :func:`become_session_root`)."""
    if mode not in MODES:
        raise SetupError(f"unknown namespace mode {mode!r}")
    uid, gid = os.geteuid(), os.getegid()
    others = CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC
    if mode == "user":
        _check(_libc().unshare(CLONE_NEWUSER | others), "unshare(CLONE_NEWUSER|CLONE_NEWNS|CLONE_NEWUTS|CLONE_NEWIPC)")
        try:
            _write("/proc/self/setgroups", "deny")
            _write("/proc/self/uid_map", f"{uid} {uid} 1")
            _write("/proc/self/gid_map", f"{gid} {gid} 1")
        except OSError as exc:
            raise SetupError(f"mapping uid {uid} into the user namespace: {exc.strerror}") from None
    else:
        try:
            os.setgroups([])  # root's supplementary groups would follow it into the namespace
        except OSError as exc:
            raise SetupError(f"dropping the supplementary groups: {exc.strerror}") from None
        _check(_libc().unshare(others), "unshare(CLONE_NEWNS|CLONE_NEWUTS|CLONE_NEWIPC)")
    _mount(None, "/", None, MS_REC | MS_PRIVATE, None, "making mounts private")


def become_session_root(userns_fd: int) -> None:
    """After the view (mode ``"mapped"``): join the session's user namespace as its uid and gid 0,
    which are unprivileged ids of the host. The process keeps capabilities only inside that
    namespace; its mount, UTS and IPC namespaces belong to the host's, so it cannot change them."""
    _check(_libc().setns(userns_fd, CLONE_NEWUSER), "setns(CLONE_NEWUSER) into the session's user namespace")
    try:
        os.setresgid(0, 0, 0)
        os.setresuid(0, 0, 0)
    except OSError as exc:
        raise SetupError(f"becoming the session's root (its unprivileged host ids): {exc.strerror}") from None


def own_keyring() -> None:
    """A session keyring of the session's own: the host's (root's login keyring, say) is
    inherited across fork and exec, and holding it grants its possessor rights whatever the uid.
    Where a seccomp filter refuses ``keyctl`` (Docker's default) it refuses it to every
    descendant too, so nothing is reachable either way."""
    result = _syscall("keyctl", _KEYCTL_JOIN_SESSION_KEYRING, b"console-bridge")
    if result < 0:
        code = ctypes.get_errno()
        if code not in (errno.ENOSYS, errno.EPERM, errno.EACCES):
            raise SetupError(f"keyctl(KEYCTL_JOIN_SESSION_KEYRING): {os.strerror(code)} (errno {code})")


def die_with_parent() -> None:
    """SIGKILL when the supervisor dies (set last: a change of credentials clears it)."""
    _check(_libc().prctl(_PR_SET_PDEATHSIG, _SIGKILL, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")


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
    number = syscall_number("mount_setattr")
    result = libc.syscall(number, _AT_FDCWD, target.encode(), _AT_RECURSIVE, ctypes.byref(attr), ctypes.sizeof(attr))
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


def _bind(source: str, target: str, *, writable: bool, userns_fd: int | None = None) -> None:
    try:
        is_dir = os.path.isdir(source)
    except OSError:
        is_dir = False
    if is_dir:
        _makedirs(target)
    else:
        _make_file(target)
    if userns_fd is not None:
        _idmapped_bind(source, target, userns_fd, writable=writable)
        return
    _mount(source, target, None, MS_BIND | MS_REC, None, f"binding {source}")
    if not writable:
        _read_only(target)


def _idmapped_bind(source: str, target: str, userns_fd: int, *, writable: bool) -> None:
    """Bind ``source`` through an idmapped mount: the host's ids as the session's user namespace
    maps them (root's files are its root's; what it writes lands owned by root), nosuid and nodev,
    read-only unless ``writable``. Mounts beneath ``source`` come too where their file systems
    allow idmaps, else they are left out (never shown un-mapped)."""
    libc = _libc()
    flags = _MOUNT_ATTR_IDMAP | _MOUNT_ATTR_NOSUID | _MOUNT_ATTR_NODEV | (0 if writable else _MOUNT_ATTR_RDONLY)
    attr = _MountAttr(flags, 0, 0, userns_fd)
    what = f"binding {source} through an idmapped mount"
    for recursive in (True, False):
        flags = _OPEN_TREE_CLONE | _OPEN_TREE_CLOEXEC | (_AT_RECURSIVE if recursive else 0)
        tree = int(libc.syscall(syscall_number("open_tree"), _AT_FDCWD, source.encode(), flags))
        if tree < 0:
            _check(tree, f"{what} (open_tree {source})")
        try:
            result = libc.syscall(
                syscall_number("mount_setattr"),
                tree,
                b"",
                _AT_EMPTY_PATH | (_AT_RECURSIVE if recursive else 0),
                ctypes.byref(attr),
                ctypes.sizeof(attr),
            )
            if result != 0:
                code = ctypes.get_errno()
                if recursive and code == errno.EINVAL:
                    continue  # a mount beneath it has no idmap support: bind the top alone
                raise SetupError(
                    f"{what}: {os.strerror(code)} (errno {code}); idmapped mounts need Linux 5.12 or later and a "
                    "file system that supports them (ext4, xfs, btrfs, tmpfs since 6.3, ...)"
                )
            _check(
                libc.syscall(
                    syscall_number("move_mount"), tree, b"", _AT_FDCWD, target.encode(), _MOVE_MOUNT_F_EMPTY_PATH
                ),
                f"{what} (move_mount to {target})",
            )
            return
        finally:
            os.close(tree)


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


def apply_plan(plan: MountPlan, userns_fd: int | None = None, owner: int | None = None) -> None:
    """Build the view described by ``plan`` on ``plan["root"]`` and pivot into it.

    With ``userns_fd`` (mode ``"mapped"``) writable binds are idmapped through that user
    namespace, and the TMPDIR belongs to host id ``owner`` (the session's root)."""
    root = str(plan["root"])
    _makedirs(root)
    _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=16m", "mounting the view's root")
    for step in plan["steps"]:
        target = root + step["path"]
        if step["op"] == "bind":
            idmap = userns_fd if step.get("idmap") else None  # (the user's own places, in root's sessions)
            _bind(step["source"], target, writable=bool(step.get("writable")), userns_fd=idmap)
        elif step["op"] == "symlink":
            _makedirs(os.path.dirname(target))
            os.symlink(step["target"], target)
        elif step["op"] == "dir":
            _makedirs(target)
        elif step["op"] == "tmpfs":
            _makedirs(target)
            options = f"mode={int(step.get('mode', 0o700)):o}"
            size = step.get("size")
            if size:
                options += f",size={int(size)}"
            if step.get("session_owned") and owner is not None:
                options += f",uid={owner},gid={owner}"
            _mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, options, "mounting a tmpfs")
        elif step["op"] == "mask":
            _mask(root, step["path"])
        elif step["op"] == "pin":
            _pin(root, step["path"])
        elif step["op"] == "empty":
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o000)
            os.close(fd)
        elif step["op"] == "dev":
            _dev(root)
        elif step["op"] == "proc":
            _bind("/proc", target, writable=True)
        elif step["op"] == "shim":
            fill_shim(target, [str(source) for source in step["sources"]], set(step["hide"]))
        else:
            raise SetupError(f"unknown mount plan step {step!r}")
    if os.path.lexists(root + "/.cb-empty"):  # the masks hold it; nothing else needs its name
        os.unlink(root + "/.cb-empty")
    _pivot(root)


def _pin(root: str, path: str) -> None:
    """Bind the folder ``path`` of the view on ``root`` onto itself (a mount point: no cell renames or
    removes it), reached as ``_mask`` reaches a name; a folder that is not there is left alone."""
    top = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            fd = open_beneath(path, top)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                return
            raise SetupError(f"pinning ({root + path}): {exc}") from None
        try:
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                target = f"/proc/self/fd/{fd}"
                _mount(target, target, None, MS_BIND | MS_REC, None, f"pinning {path}")
        finally:
            os.close(fd)
    finally:
        os.close(top)


def _mask(root: str, path: str) -> None:
    """Mask ``path`` in the view on ``root`` through a descriptor opened beneath it, no symlink followed
    (``_remask.open_beneath``): a symlink at the name is masked itself, never where it points. A name
    that is absent, or lies past a symlink (elsewhere, shown or hidden by its own rules), is left to
    the remasker's watch."""
    top = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            fd = open_beneath(path, top)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                return
            raise SetupError(f"masking ({root + path}): {exc}") from None
        try:
            target = f"/proc/self/fd/{fd}"
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                _mount(
                    "tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV | MS_RDONLY, "mode=0000,size=4k", f"masking {path}"
                )
                return
            _mount(root + "/.cb-empty", target, None, MS_BIND, None, f"masking {path}")
        finally:
            os.close(fd)
        _read_only(root + path)  # (the name is the bind's root now: nothing left to follow)
    finally:
        os.close(top)


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
    _check(_syscall("pivot_root", root.encode(), old.encode()), "pivot_root into the view")
    os.chdir("/")
    _check(_libc().umount2(b"/.cb-old-root", MNT_DETACH), "detaching the host's root")
    os.rmdir("/.cb-old-root")
    _mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, None, "sealing the view's root")
    # Shared with the namespaces the sandbox makes below (they become its slaves, never the other way):
    # a mask the remasker adds later (``_remask``) reaches the cells at once.
    _mount(None, "/", None, MS_REC | MS_SHARED, None, "sharing the view's mounts with the sandbox")
