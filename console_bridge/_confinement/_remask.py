"""Names a view hides inside a tree it shows, kept hidden while the host changes the tree.

Stdlib only: the server's process uses it between building the view and ``exec``
(``_supervisor.enter_view``), in the session's mount namespace. The masking code here is the one
implementation; who runs it is one of two arrangements:

* **the shared remasker** (what the bridge uses): one process per host process, ``_remaskd``,
  with one inotify instance for all its sessions; the server's process hands it its watch list
  and namespaces (:func:`register`), and it runs :class:`Remasker` inside them per batch of events;
* **a remasker of the session's own** (:func:`start`, a supervisor started without the shared
  one): described below, one process and one inotify instance per session.

A mask is a mount over a name (``_namespaces.apply_plan``). The kernel keeps a mount on the
dentry it was made on: when the host renames the masked file away, recreates it, removes and
recreates its folder, or creates a hidden name after the session started (an editor saving by
rename, ``useradd`` rewriting ``/etc/shadow``, a CI step writing ``.git/config``), the new name
is a new dentry with no mount on it. So a small process of the session, the **remasker**, watches
(inotify) every folder on the way to each hidden name, and every folder of ``/etc`` for entries
not everyone may read, and masks what appears there: an empty read-only tmpfs over a folder,
``/dev/null`` bound read-only and ``nodev`` (so it cannot even be opened) over anything else.
The view's mounts are shared with the sandbox below (``MS_SHARED``): a mask made here reaches
the cells' mount namespace at once.

This is a **watch-and-remask**, a weaker mechanism than a mount made before anything runs: a
cell that reads a hidden name in the moment between the host's rename and the kernel waking the
remasker can still read it (``tests/confinement/test_hidden_names.py`` races renames against
reads and measures that window). Sessions name it in ``status().limits["hidden_names"]`` as
``"watched"``. Root's sessions hold the ``/etc`` rule by their ids as well: a file not everyone
may read is refused to a uid no host account has.

A session's own remasker is the supervisor's child (it is re-parented there, a subreaper), holds
no descriptor of the session but its own, writes nothing to the server's streams, dies with the
supervisor (``PR_SET_PDEATHSIG``) and is killed with the rest of the session's tree. The shared
one fails closed the other way round: the session ends when it dies or a remask fails
(``_remaskd``).
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import struct
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_IN_MODIFY = 0x2
_IN_ATTRIB = 0x4
_IN_CLOSE_WRITE = 0x8
_IN_MOVED_FROM = 0x40
_IN_MOVED_TO = 0x80
_IN_CREATE = 0x100
_IN_DELETE = 0x200
_IN_DELETE_SELF = 0x400
_IN_MOVE_SELF = 0x800
_IN_Q_OVERFLOW = 0x4000
_IN_IGNORED = 0x8000
_IN_ONLYDIR = 0x01000000
_IN_DONT_FOLLOW = 0x02000000
_WATCHED = (
    _IN_MODIFY | _IN_ATTRIB | _IN_MOVED_FROM | _IN_MOVED_TO | _IN_CREATE | _IN_DELETE | _IN_DELETE_SELF | _IN_MOVE_SELF
)
_EVENT = struct.Struct("iIII")
_PR_SET_PDEATHSIG = 1
_SIGKILL = 9
_MS_RDONLY = 1
_MS_NOSUID = 2
_MS_NODEV = 4
_MS_REMOUNT = 32
_MS_BIND = 4096


_O_PATH = getattr(os, "O_PATH", 0o10000000)


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def open_beneath(path: str, top: int | None = None) -> int:
    """An ``O_PATH`` descriptor of the absolute ``path``, walked one name at a time beneath the folder
    ``top`` (``/``, the view's root once inside it, when None) without following a symlink on the way
    or at the end: a symlink there is what the descriptor names. A privileged mount made on it never
    lands where a cell's symlink points. OSError (ENOTDIR, ELOOP, ENOENT) when the way is not real
    folders."""
    parts = [part for part in path.split("/") if part]
    if any(part in (".", "..") for part in parts):
        raise OSError(errno.EINVAL, f"not a plain path: {path!r}")
    fd = os.open("/", _O_PATH | os.O_DIRECTORY | os.O_CLOEXEC) if top is None else os.dup(top)
    try:
        for index, part in enumerate(parts):
            folder = os.O_DIRECTORY if index < len(parts) - 1 else 0
            below = os.open(part, _O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC | folder, dir_fd=fd)
            os.close(fd)
            fd = below
    except BaseException:
        os.close(fd)
        raise
    return fd


def mount_on(
    source: bytes | None, path: str, fstype: bytes | None, flags: int, data: bytes | None, *, top: int | None = None
) -> int:
    """``mount(2)`` onto :func:`open_beneath`'s descriptor of ``path`` (through ``/proc/self/fd``): 0, or
    -1 with ``ctypes.get_errno()`` saying why."""
    try:
        fd = open_beneath(path, top)
    except OSError as exc:
        ctypes.set_errno(exc.errno or errno.ENOENT)
        return -1
    try:
        return int(_libc().mount(source, f"/proc/self/fd/{fd}".encode(), fstype, flags, data))
    finally:
        os.close(fd)


def _unescape(field: str) -> str:
    """A mountinfo path: spaces, tabs, newlines and backslashes are written as octal escapes."""
    if "\\" not in field:
        return field
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and i + 3 < len(field) + 1 and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def mount_points(mountinfo: str = "/proc/self/mountinfo") -> set[str]:
    """Every mount point of this process's mount namespace."""
    with open(mountinfo, encoding="utf-8", errors="surrogateescape") as handle:
        return {_unescape(line.split(" ", 5)[4]) for line in handle if line.count(" ") >= 5}


def _empty(path: str, info: os.stat_result) -> bool:
    """An empty folder or an empty regular file."""
    if stat.S_ISREG(info.st_mode):
        return info.st_size == 0
    if stat.S_ISDIR(info.st_mode):
        try:
            with os.scandir(path) as entries:
                return next(entries, None) is None
        except OSError:
            return False
    return False


def _is_dir(path: str) -> bool:
    """A folder, not followed through a symlink."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _names(path: str, info: os.stat_result) -> bool:
    """Whether ``path`` still names the file ``info`` describes."""
    try:
        now = os.lstat(path)
    except OSError:
        return False
    return (now.st_dev, now.st_ino) == (info.st_dev, info.st_ino)


def secret(info: os.stat_result) -> bool:
    """What ``/etc`` hides: a file not everyone may read, a folder not everyone may enter and list."""
    if stat.S_ISDIR(info.st_mode):
        return info.st_mode & 0o005 != 0o005
    return stat.S_ISREG(info.st_mode) and not info.st_mode & 0o004


class Remasker:
    """The watch: ``names`` (absolute paths in the view) and, with ``etc``, that tree by mode."""

    def __init__(self, names: list[str], etc: str | None, *, mount: bool = True, fd: int | None = None) -> None:
        self.names = [os.path.normpath(name) for name in names]
        self.etc = os.path.normpath(etc) if etc else None
        self.mount = mount  # (False: tests of the watch alone record what would be masked)
        self.libc = _libc()
        # ``fd``: an inotify instance shared with other sessions' watches (``_remaskd``), not closed here
        self.owned = fd is None
        self.fd = self.libc.inotify_init1(os.O_CLOEXEC) if fd is None else fd
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self.folders: dict[int, str] = {}
        self.masked: list[str] = []
        self.failed: list[str] = []
        self._points: set[str] | None = None

    # ---------------------------------------------------------------- watch
    def _watch(self, folder: str) -> bool:
        """Watch ``folder`` (the kernel gives the same descriptor for a folder already watched: a
        folder renamed and found again is one watch, under its new name)."""
        wd = self.libc.inotify_add_watch(self.fd, os.fsencode(folder), _WATCHED | _IN_ONLYDIR | _IN_DONT_FOLLOW)
        if wd < 0:
            return False
        self.folders[wd] = folder
        return True

    def _is_masked(self, path: str) -> bool:
        """Whether something is mounted on ``path`` (a mask, or the top of a bound tree)."""
        if self._points is None:
            self._points = mount_points()
        return path in self._points

    def _mask(self, path: str, *, by_mode: bool = False) -> None:
        """Mount over ``path`` unless something is mounted there already (``by_mode``: an ``/etc``
        entry, masked even while empty)."""
        try:
            info = os.lstat(path)
        except OSError:
            return
        if self._is_masked(path):
            return
        # Nothing to hide yet, and mcp-console's sandbox makes such a name itself for a moment (an empty
        # folder or file to mount over, removed again): watched, masked once it has content (a folder is
        # looked at again after its watch: what landed in between gave no event; a failed watch masks).
        if (
            not by_mode
            and _empty(path, info)
            and (not stat.S_ISDIR(info.st_mode) or (self._watch(path) and _empty(path, info)))
        ):
            return
        if not self.mount:
            self.masked.append(path)
            return
        expected = info  # what the name should hold when a step fails, if the host left it alone
        # Each mount targets a descriptor opened without following a symlink (open_beneath): a cell's
        # symlink at a hidden name is masked itself, never where it points (a file, a folder, /proc/1/root).
        if stat.S_ISDIR(info.st_mode):
            flags = _MS_NOSUID | _MS_NODEV | _MS_RDONLY
            result = mount_on(b"tmpfs", path, b"tmpfs", flags, b"mode=0000,size=4k")
        else:
            result = mount_on(b"/dev/null", path, None, _MS_BIND, None)
            if result == 0:
                expected = os.stat("/dev/null")
                flags = _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV
                result = mount_on(None, path, None, flags, None) if _names(path, expected) else -1
        if result == 0:
            self.masked.append(path)
            if self._points is not None:
                self._points.add(path)
            return
        code = ctypes.get_errno()
        # The host changed the name while it was being masked (a rename racing the mask: the remount
        # finds a new file with no mount on it): that change is an event of its own, masked then.
        if not _names(path, expected):
            return
        self.failed.append(f"{path}: {os.strerror(code)}")

    def _follow(self, name: str) -> None:
        """Watch every existing folder from the nearest existing ancestor down to ``name``'s parent,
        and mask ``name`` if it exists."""
        parts = name.split("/")[1:]
        folder = "/"
        for part in parts[:-1]:
            below = os.path.join(folder, part)
            if not _is_dir(below):
                # Watch first, then look again: a folder made between the look and the watch gives no event
                # (`mkdir -p` makes the whole chain in microseconds), so only a look after the watch is sure.
                self._watch(folder)
                if not _is_dir(below):
                    break
            folder = below
        self._watch(folder)
        if os.path.dirname(name) == folder:
            self._mask(name)
        # The folders above, up to the top of the bound tree (a mount point): a rename of any of
        # them changes the path. Above that is the view's own skeleton, which the host cannot touch.
        up = folder
        while up != "/" and not self._is_masked(up):
            up = os.path.dirname(up)
            self._watch(up)

    def _etc_walk(self, folder: str) -> None:
        """Watch ``folder`` and every folder below that everyone may enter; mask what they may not."""
        if not self._watch(folder):
            return
        try:
            entries = list(os.scandir(folder))
        except OSError:
            return
        for entry in entries:
            self._etc_entry(entry.path)

    def _etc_entry(self, path: str) -> None:
        try:
            info = os.lstat(path)
        except OSError:
            return
        if secret(info):
            self._mask(path, by_mode=True)
        elif stat.S_ISDIR(info.st_mode):
            self._etc_walk(path)

    def scan(self) -> None:
        """Everything again (at start, and after the kernel's event queue overflowed)."""
        self._points = None
        for name in self.names:
            self._follow(name)
        if self.etc is not None and os.path.isdir(self.etc):
            self._etc_walk(self.etc)

    # ----------------------------------------------------------------- events
    def handle(self, data: bytes) -> None:
        """Act on a batch of inotify events."""
        self.act(*self.sort(data))

    def sort(self, data: bytes) -> tuple[bool, set[str], set[str]]:
        """What a batch of events asks for, without touching the tree (the shared remasker forks into a
        session's namespaces only when there is something to do): whether to scan everything again,
        the hidden names to follow again, the ``/etc`` entries to look at. Drops the folders whose
        watch the kernel removed."""
        changed: set[str] = set()
        offset = 0
        rescan = False
        while offset + _EVENT.size <= len(data):
            wd, mask, _, length = _EVENT.unpack_from(data, offset)
            raw = data[offset + _EVENT.size : offset + _EVENT.size + length].rstrip(b"\0")
            offset += _EVENT.size + length
            if mask & _IN_Q_OVERFLOW:
                rescan = True
                continue
            folder = self.folders.get(wd)
            if folder is None:
                continue
            if mask & _IN_IGNORED:
                self.folders.pop(wd, None)
                continue
            if mask & (_IN_DELETE_SELF | _IN_MOVE_SELF):
                rescan = True  # a folder on the way was renamed or removed: its names are other paths now
                continue
            if raw:
                changed.add(os.path.join(folder, os.fsdecode(raw)))
        names: set[str] = set()
        entries: set[str] = set()
        for path in changed:
            for name in self.names:
                # a name on the way to a hidden one, the hidden one, or inside it (an empty folder filled)
                if name == path or name.startswith(path + "/") or path.startswith(name + "/"):
                    names.add(name)
            if self.etc is not None and (path == self.etc or path.startswith(self.etc + "/")):
                entries.add(path)
        return rescan, names, entries

    def act(self, rescan: bool, names: set[str], entries: set[str]) -> None:
        """Do what :meth:`sort` found: scan again, or follow ``names`` and look at ``entries``."""
        self._points = None
        if rescan:
            self.scan()
            return
        for name in sorted(names):
            self._follow(name)
        for path in sorted(entries):
            self._etc_entry(path)

    def step(self) -> None:
        """Wait for the next batch of events and act on it."""
        self.handle(os.read(self.fd, 1 << 16))

    def close(self) -> None:
        if self.owned:
            os.close(self.fd)


def start(config: dict[str, Any] | None, supervisor: int) -> int | None:
    """Fork the remasker (it outlives this process, the server's before ``exec``, as the
    supervisor's child); the pid of the intermediate child reaped here, or None without names."""
    if not isinstance(config, dict):
        return None
    names = [str(name) for name in config.get("names", [])]
    etc = config.get("etc")
    if not names and not etc:
        return None
    # The watch is made here, before the fork: a host out of inotify instances refuses the session (the
    # caller's OSError) rather than running it with hidden names nobody keeps hidden.
    try:
        remasker = Remasker(names, str(etc) if etc else None)
        remasker.scan()
    except OSError as exc:
        raise OSError(
            exc.errno,
            f"the names the view hides cannot be watched ({exc.strerror or exc}); each session needs an inotify "
            "instance for them: raise fs.inotify.max_user_instances (sysctl) or close other sessions",
        ) from None
    middle = os.fork()
    if middle:
        remasker.close()
        os.waitpid(middle, 0)
        return middle
    try:
        if os.fork():
            os._exit(0)
        _run(remasker, supervisor)
    finally:
        os._exit(0)


def _run(remasker: Remasker, supervisor: int) -> None:
    for _ in range(5000):  # until the intermediate child is gone and this one is the supervisor's
        if os.getppid() == supervisor:
            break
        time.sleep(0.001)
    libc = _libc()
    libc.prctl(_PR_SET_PDEATHSIG, _SIGKILL, 0, 0, 0)
    if os.getppid() != supervisor:  # not re-parented to the supervisor: it is gone already
        return
    null = os.open("/dev/null", os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    # none of the session's descriptors (the host's socket, the stdin pipe): only its own watch
    os.closerange(3, remasker.fd)
    os.closerange(remasker.fd + 1, 1 << 16)
    while True:
        try:
            remasker.step()
        except InterruptedError:
            continue
        except OSError as exc:
            os.write(2, f"console-bridge remasker: stopped: {exc}\n".encode())
            return


def namespace_fds() -> list[int]:
    """This process's user and mount namespaces (opened once they are the session's, before the
    view hides ``/proc``'s old name): what the shared remasker enters to mask (``register``)."""
    return [os.open(f"/proc/self/ns/{kind}", os.O_RDONLY | os.O_CLOEXEC) for kind in ("user", "mnt")]


def register(connection: int, config: dict[str, Any] | None, namespaces: list[int]) -> None:
    """Hand this session's watch to the host process's shared remasker (``_remaskd``) over
    ``connection`` (the supervisor's link to it) with ``namespaces`` (``namespace_fds``), and wait
    until it has watched and masked what it names. Raises OSError when it refuses or is gone: the
    session is refused rather than run with hidden names nobody keeps hidden."""
    import _socket
    import marshal

    names = [str(name) for name in (config or {}).get("names", [])]
    etc = (config or {}).get("etc")
    spec = marshal.dumps({"names": names, "etc": str(etc) if etc else None})
    sock = _socket.socket(fileno=os.dup(connection))
    try:
        rights = (_socket.SOL_SOCKET, _socket.SCM_RIGHTS, struct.pack(f"{len(namespaces)}i", *namespaces))
        sock.sendmsg([spec], [rights])
        answer = sock.recv(4096)
    finally:
        sock.close()
        for fd in namespaces:
            os.close(fd)
    if answer != b"ok":
        why = answer.decode(errors="replace") or "it is gone"
        raise OSError(errno.EIO, f"the shared remasker refused the session's hidden names ({why})")
