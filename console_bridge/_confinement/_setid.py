"""No cell makes a set-user-ID or set-group-ID file: a seccomp filter on the server's whole tree.

Stdlib only (the supervisor imports it as a top-level module). What a cell writes into the
workspace or a writable root lands owned by whoever started the session (root's sessions write
through idmapped mounts), and the owner of a file may ``chmod u+s`` it: a cell could leave a
set-user-ID root shell in root's workspace, which any local user who reaches the folder would
run as root (measured: ``os.chmod("sh", 0o6755)`` on a copy of ``/bin/sh`` did, before this
filter). ``nosuid`` on the session's mounts does not help: the host runs the file through its
own mounts.

:func:`install` loads a classic-BPF seccomp filter in the server's process before ``exec``, so
it holds for every descendant (filters are inherited and cannot be removed; mcp-console's own
sandbox stacks its filter on top). It refuses with ``EPERM``:

* ``chmod``, ``fchmod``, ``fchmodat``, ``fchmodat2`` with ``S_ISUID`` or ``S_ISGID`` in the mode;
* ``open``, ``openat``, ``creat``, ``mknod``, ``mknodat`` creating a file with those bits;

and with ``ENOSYS`` the calls it cannot inspect (``openat2``, whose mode is behind a pointer, and
``io_uring_setup``, whose operations bypass the filter), and every system call of another ABI
than the native one (i386 or x32 on x86-64), whose numbers differ. ``mkdir`` cannot set those
bits (the kernel masks them).

File capabilities (``security.capability``) are the other way to a privileged file. The kernel
already refuses them to a user namespace's root for the host (measured in round five); as defence
in depth every extended attribute write (``setxattr``, ``lsetxattr``, ``fsetxattr``,
``setxattrat``) is refused with ``EOPNOTSUPP``: a filter cannot read the attribute's name (it is
behind a pointer), and "this file system has no extended attributes" is what ``cp -a``,
``shutil.copy2`` and archivers already take in their stride. Reading them still works. Everything
else passes.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct

_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_LD_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JSET = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_RET = 0x06  # BPF_RET | BPF_K
_NR, _ARCH = 0, 4  # offsets in struct seccomp_data; args[i] at 16 + 8 * i (low word first)
_SETID = 0o6000
_CREATES = 0o100 | 0o20000000  # O_CREAT | __O_TMPFILE (the same on x86-64 and aarch64)
_X32 = 0x40000000

#: Per architecture: (AUDIT_ARCH_*, {syscall: (mode argument, flags argument or None)}, refused outright
#: (ENOSYS), extended attribute writes (EOPNOTSUPP)).
ARCHES: dict[str, tuple[int, dict[int, tuple[int, int | None]], tuple[int, ...], tuple[int, ...]]] = {
    "x86_64": (
        0xC000003E,
        {
            2: (2, 1),  # open(path, flags, mode)
            257: (3, 2),  # openat(dir, path, flags, mode)
            85: (1, None),  # creat(path, mode)
            133: (1, None),  # mknod(path, mode, dev)
            259: (2, None),  # mknodat(dir, path, mode, dev)
            90: (1, None),  # chmod(path, mode)
            91: (1, None),  # fchmod(fd, mode)
            268: (2, None),  # fchmodat(dir, path, mode)
            452: (2, None),  # fchmodat2(dir, path, mode, flags)
        },
        (437, 425),  # openat2, io_uring_setup
        (188, 189, 190, 463),  # setxattr, lsetxattr, fsetxattr, setxattrat
    ),
    "aarch64": (
        0xC00000B7,
        {
            56: (3, 2),  # openat
            33: (2, None),  # mknodat
            52: (1, None),  # fchmod
            53: (2, None),  # fchmodat
            452: (2, None),  # fchmodat2
        },
        (437, 425),
        (5, 6, 7, 463),
    ),
}
ARCHES["arm64"] = ARCHES["aarch64"]


class SetidError(Exception):
    """The filter could not be installed; the message says why."""


def _op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k & 0xFFFFFFFF)


def program(machine: str) -> list[bytes]:
    """The filter's instructions for ``machine`` (``os.uname().machine``)."""
    spec = ARCHES.get(machine)
    if spec is None:
        raise SetidError(f"no seccomp filter is known for this architecture ({machine})")
    arch, checked, refused, xattrs = spec
    enosys = _RET_ERRNO | errno.ENOSYS
    eperm = _RET_ERRNO | errno.EPERM
    unsupported = _RET_ERRNO | errno.EOPNOTSUPP
    ops = [_op(_LD_ABS, _ARCH), _op(_JEQ, arch, 1, 0), _op(_RET, enosys)]
    if machine == "x86_64":
        ops += [_op(_LD_ABS, _NR), _op(_JGE, _X32, 0, 1), _op(_RET, enosys)]
    for number in refused:
        ops += [_op(_LD_ABS, _NR), _op(_JEQ, number, 0, 1), _op(_RET, enosys)]
    for number in xattrs:
        ops += [_op(_LD_ABS, _NR), _op(_JEQ, number, 0, 1), _op(_RET, unsupported)]
    for number, (mode, flags) in checked.items():
        body = []
        if flags is not None:  # a mode is only meaningful when the call creates the file
            body += [_op(_LD_ABS, 16 + 8 * flags), _op(_JSET, _CREATES, 0, 3)]
        body += [_op(_LD_ABS, 16 + 8 * mode), _op(_JSET, _SETID, 0, 1), _op(_RET, eperm), _op(_RET, _RET_ALLOW)]
        ops += [_op(_LD_ABS, _NR), _op(_JEQ, number, 0, len(body)), *body]
    ops.append(_op(_RET, _RET_ALLOW))
    return ops


class _Prog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))


def install(machine: str | None = None) -> None:
    """Load the filter into this process (and so everything it will start); ``SetidError`` if not."""
    ops = program(machine or os.uname().machine)
    code = ctypes.create_string_buffer(b"".join(ops))
    prog = _Prog(len(ops), ctypes.cast(code, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        number = ctypes.get_errno()
        raise SetidError(f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(number)} (errno {number})")
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        number = ctypes.get_errno()
        raise SetidError(
            f"loading the seccomp filter against set-user-ID files: {os.strerror(number)} (errno {number})"
        )
