"""The sandbox's ``/dev`` gets the TMPDIR's cap as a real tmpfs size: the kernel holds it.

mcp-console's sandbox mounts each worker a fresh ``/dev`` tmpfs without a size (its ``shm``
folder, and every other name in it, bounded only by memory), where a cell writes at memory
speed: a watcher that looks every 20 ms still let a few hundred MiB past a 32 MiB cap. So
when the bridge adopts a worker it remounts that ``/dev`` with ``size=`` the TMPDIR's cap, in
the worker's own namespaces: a short stdlib-only child (``python -I -S``) joins the user
namespace that owns the worker's mount namespace (the session's own or one nested in it, where
the bridge's user has every capability: it owns the session's; ``NS_GET_USERNS``) and then that
mount namespace, and remounts, keeping every other flag as it is. Past the cap a write fails
with ``ENOSPC``; the session reports it as the cell's ``tmpdir`` limit (the worker lives on).
Where the remount is refused the watcher (``_disk.WriteWatch``) still holds the cap by
accounting.
"""

from __future__ import annotations

from console_bridge._confinement._child import run_child

__all__ = ["cap_dev"]

_CODE = r"""
import ctypes, fcntl, os, sys
pid, size = sys.argv[1], int(sys.argv[2])
libc = ctypes.CDLL(None, use_errno=True)
mnt = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
owner = fcntl.ioctl(mnt, 0xB701)  # NS_GET_USERNS: the user namespace that owns the mount namespace
if os.fstat(owner).st_ino != os.stat("/proc/self/ns/user").st_ino and libc.setns(owner, 0) != 0:
    print(f"setns(the mount namespace's user namespace): {os.strerror(ctypes.get_errno())}")
    sys.exit(1)
if libc.setns(mnt, 0) != 0:
    print(f"setns(mnt): {os.strerror(ctypes.get_errno())}")
    sys.exit(1)
os.chdir("/")
info = os.statvfs("/dev")
flags = 32  # MS_REMOUNT
for bit, value in ((os.ST_RDONLY, 1), (os.ST_NOSUID, 2), (os.ST_NODEV, 4), (os.ST_NOEXEC, 8),
                   (getattr(os, "ST_NOATIME", 1024), 1024), (getattr(os, "ST_NODIRATIME", 2048), 2048),
                   (getattr(os, "ST_RELATIME", 1 << 21), 1 << 21)):
    if info.f_flag & bit:
        flags |= value
used = (info.f_blocks - info.f_bfree) * info.f_frsize
if libc.mount(None, b"/dev", None, flags, f"size={max(size, used + (1 << 20))}".encode()) != 0:
    print(f"remounting /dev: {os.strerror(ctypes.get_errno())}")
    sys.exit(1)
print("ok")
"""


def cap_dev(pid: int, size: int, *, timeout: float = 10.0) -> str | None:
    """Give process ``pid``'s ``/dev`` (its sandbox's tmpfs) the size ``size``; None when done, else why not."""
    done = run_child(_CODE, str(pid), str(size), timeout=timeout)
    if isinstance(done, str):
        return done
    if done.returncode == 0 and done.stdout.strip() == "ok":
        return None
    return (done.stdout.strip() or done.stderr.strip() or f"exit status {done.returncode}")[-300:]
