"""The shared remasker: one process per host process, one inotify instance for all its sessions.

Stdlib only, single-threaded: started by the host (``_remask_host``) as ``python -I -S _remaskd.py
SOCKET`` at the first session whose view hides names inside a tree it shows. It does the
remasker's job (``_remask``'s docstring: watch every folder on the way to each hidden name, mask
what appears) for every session of that host process, with **one** inotify instance: the kernel
allows a user 128 by default (``fs.inotify.max_user_instances``), and one per session stopped a
user at about 127 sessions (issue 35). Inotify watches are by inode, and a view binds the host's
own folders, so a folder two sessions watch is one kernel watch here.

Each session's supervisor connects to ``SOCKET`` (a ``SOCK_SEQPACKET`` socket in a folder only the
host's user may enter; a peer of another uid is refused). The session's server process, once its
view is built, sends its watch list with its user and mount namespaces (``SCM_RIGHTS``,
``_remask.register``); the first scan runs before the answer, so the session starts only once
its names are watched. Events that touch no hidden name cost nothing more. For the others, and for
that first scan, ``_remask.Remasker`` runs inside the session's namespaces, on the shared instance:
for root's sessions in the helper itself, which enters the session's mount namespace (the host's
user namespace owns it) and returns to its own; for a normal user's, in a spare child forked ahead
of time that ``setns``es into the session's user namespace (the user owns it, so the child holds
every capability there) and mount namespace, and reports the folders it watches back over its
socket (a child forked per event waited behind the running tasks: 4 ms p50 on a busy 2-core
host, against 0.3 ms). The masking code is ``_remask``'s, the one implementation.

**Fail closed.** A remask that fails (the child fails, or a mount is refused) closes that session's
connection; the helper's death (killed, crashed) closes them all. A supervisor watches its
connection for the hang-up and ends its session's tree (``_supervisor``): no session runs on with
names nobody keeps hidden. A session's end (its supervisor's connection closed) drops its watches
(those no other session holds) and its namespaces; the helper exits once the host has closed its
stdin (its last session ended, or it died and the kernel closed its end) and no session is left: a
dead host's sessions close as usual (their recordings finalized), their names watched to the end.
"""

from __future__ import annotations

import marshal
import os
import select
import socket as _socket
import struct
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_CLONE_NEWNS = 0x00020000
_CLONE_NEWUSER = 0x10000000
_PR_SET_PDEATHSIG = 1
_SIGKILL = 9
_SO_PEERCRED = 17
_EVENT = struct.Struct("iIII")
_IN_Q_OVERFLOW = 0x4000
_MAX_FDS = 4


def _sibling(name: str) -> Any:
    folder = os.path.dirname(os.path.abspath(__file__))
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return __import__(name)


_remask = _sibling("_remask")


class Session:
    """One session's watch: its connection, its remasker's state, its namespaces."""

    def __init__(self, connection: _socket.socket, remasker: Any, namespaces: list[int]) -> None:
        self.connection = connection
        self.remasker = remasker
        self.namespaces = namespaces
        #: Its user namespace is this process's (root's sessions, which register before they join theirs):
        #: the helper may enter its mount namespace and come back, with no child (``Helper.run_here``).
        self.here = len(namespaces) == 2 and _same(os.fstat(namespaces[0]), os.stat("/proc/self/ns/user"))


def _same(one: os.stat_result, other: os.stat_result) -> bool:
    return (one.st_dev, one.st_ino) == (other.st_dev, other.st_ino)


def _enter(namespaces: list[int]) -> None:
    """In the forked child: the session's user namespace (unless it is this process's own: root's
    sessions register before they join theirs), then its mount namespace (root and cwd become the
    view's root)."""
    libc = _remask._libc()
    user, mount = namespaces
    if not _same(os.fstat(user), os.stat("/proc/self/ns/user")) and libc.setns(user, _CLONE_NEWUSER) != 0:
        raise OSError(_remask.ctypes.get_errno(), "setns into the session's user namespace")
    if libc.setns(mount, _CLONE_NEWNS) != 0:
        raise OSError(_remask.ctypes.get_errno(), "setns into the session's mount namespace")


class Helper:
    def __init__(self, path: str) -> None:
        self.libc = _remask._libc()
        self.fd = self.libc.inotify_init1(os.O_CLOEXEC | os.O_NONBLOCK)
        if self.fd < 0:
            code = _remask.ctypes.get_errno()
            raise OSError(code, f"inotify_init1: {os.strerror(code)}")
        self.listener = _socket.socket(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
        self.listener.bind(path)
        self.listener.listen(128)
        self.listener.setblocking(False)
        self.poller = select.poll()
        self.poller.register(0, select.POLLIN)  # the host's pipe: EOF is the end
        self.poller.register(self.listener.fileno(), select.POLLIN)
        self.poller.register(self.fd, select.POLLIN)
        self.connections: dict[int, _socket.socket] = {}  # connected, not yet registered
        self.sessions: dict[int, Session] = {}
        self.spare: tuple[int, _socket.socket] | None = None  # (``fork_spare``)
        self.own_mount = os.open("/proc/self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)  # (``run_here``)

    def run(self) -> None:
        ending = False  # the host closed its end: no new session, and the last one's end is this one's
        while not (ending and not self.sessions and not self.connections):
            try:
                ready = self.poller.poll()
            except InterruptedError:
                continue
            for fd, _ in ready:
                if fd == 0:
                    if not os.read(0, 512):
                        # The host's last session ended, or the host died: then its sessions are closing
                        # (their supervisors' parent-death signal: the server finalizes its recording),
                        # and their names stay watched until each has ended (never an end that kills them).
                        ending = True
                        self.poller.unregister(0)
                        self.poller.unregister(self.listener.fileno())
                        self.listener.close()
                elif ending and fd == self.listener.fileno():
                    continue
                elif fd == self.listener.fileno():
                    self.accept()
                elif fd == self.fd:
                    self.events()
                elif fd in self.connections or fd in self.sessions:
                    self.message(fd)

    def accept(self) -> None:
        try:
            connection, _ = self.listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        _, uid, _ = struct.unpack("3i", connection.getsockopt(_socket.SOL_SOCKET, _SO_PEERCRED, 12))
        if uid != os.geteuid():
            connection.close()
            return
        self.connections[connection.fileno()] = connection
        self.poller.register(connection.fileno(), select.POLLIN)

    def message(self, fd: int) -> None:
        session = self.sessions.get(fd)
        connection = session.connection if session is not None else self.connections[fd]
        try:  # (never waits: a poll result may be stale, its descriptor closed and reused by then)
            data, ancillary, _, _ = connection.recvmsg(1 << 20, _socket.CMSG_SPACE(_MAX_FDS * 4), _socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data, ancillary = b"", []
        fds: list[int] = []
        for level, kind, payload in ancillary:
            if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
                fds.extend(struct.unpack(f"{len(payload) // 4}i", payload[: len(payload) - len(payload) % 4]))
        if session is not None or not data or len(fds) != 2:  # the end, or not the one registration
            for extra in fds:
                os.close(extra)
            self.drop(fd)
            return
        del self.connections[fd]
        try:
            spec = marshal.loads(data)
            remasker = _remask.Remasker(list(spec["names"]), spec["etc"], fd=self.fd)
        except (ValueError, KeyError, TypeError, EOFError, OSError) as exc:
            self.sessions[fd] = Session(connection, None, fds)
            self.refuse(fd, f"a bad registration: {exc}")
            return
        self.sessions[fd] = Session(connection, remasker, fds)
        why = self.run_in(self.sessions[fd], None)
        if why is not None:
            self.refuse(fd, why)
            return
        try:
            connection.send(b"ok")
        except OSError:
            self.drop(fd)

    def refuse(self, fd: int, why: str) -> None:
        try:  # noqa: SIM105 (stdlib only and light: no contextlib)
            self.sessions[fd].connection.send(why.encode(errors="replace")[:4000])
        except OSError:
            pass
        self.drop(fd)

    def drop(self, fd: int) -> None:
        """The session ended (or is ended here, failing closed): its connection closed, its namespaces
        let go, the kernel watches no other session holds removed."""
        self.poller.unregister(fd)
        connection = self.connections.pop(fd, None)
        session = self.sessions.pop(fd, None)
        if session is not None:
            connection = session.connection
            for ns in session.namespaces:
                os.close(ns)
            if session.remasker is not None:
                held = {wd for other in self.sessions.values() if other.remasker for wd in other.remasker.folders}
                for wd in set(session.remasker.folders) - held:
                    self.libc.inotify_rm_watch(self.fd, wd)
        if connection is not None:
            connection.close()

    def events(self) -> None:
        try:
            data = os.read(self.fd, 1 << 16)
        except (BlockingIOError, InterruptedError):
            return
        batches: dict[int, list[bytes]] = {}
        offset = 0
        while offset + _EVENT.size <= len(data):
            wd, mask, _, length = _EVENT.unpack_from(data, offset)
            event = data[offset : offset + _EVENT.size + length]
            offset += _EVENT.size + length
            for fd, session in self.sessions.items():
                if session.remasker is not None and (mask & _IN_Q_OVERFLOW or wd in session.remasker.folders):
                    batches.setdefault(fd, []).append(event)
        for fd, events in batches.items():
            found = self.sessions.get(fd)
            if found is None:
                continue
            work = found.remasker.sort(b"".join(events))
            if not any(work):  # nothing this session hides changed (a file beside a hidden name, say)
                continue
            why = self.run_in(found, work)
            if why is not None:  # fail closed: the reason to the session's supervisor, which ends the session
                self.refuse(fd, why)

    def run_in(self, session: Session, work: tuple[bool, set[str], set[str]] | None) -> str | None:
        """Scan (``work`` None) or do ``work`` (``Remasker.sort``'s) in the spare child, inside the
        session's namespaces; what went wrong, or None. The session's remasker takes the folders the
        child watches. A new spare is forked after the answer, off the path of the next event."""
        if session.here:
            return self.run_here(session, work)
        spare = self.spare if self.spare is not None else self.fork_spare()
        self.spare = None
        pid, sock = spare
        remasker = session.remasker
        job = marshal.dumps((remasker.names, remasker.etc, remasker.folders, work))
        answer = b""
        try:
            rights = (_socket.SOL_SOCKET, _socket.SCM_RIGHTS, struct.pack("2i", *session.namespaces))
            sock.sendmsg([job], [rights])
            answer = sock.recv(1 << 22)
        except OSError:
            pass
        sock.close()
        _, status = os.waitpid(pid, 0)
        self.spare = self.fork_spare()
        try:
            result = marshal.loads(answer)
        except (ValueError, EOFError, TypeError):
            return f"the remasker's child ended with status {os.waitstatus_to_exitcode(status)}"
        if isinstance(result, str):
            return result
        folders, failed = result
        remasker.folders = folders
        if failed:
            return "masking failed: " + "; ".join(failed)
        return None

    def run_here(self, session: Session, work: tuple[bool, set[str], set[str]] | None) -> str | None:
        """``run_in`` for a session whose mount namespace this process may leave again (root's): entered
        here, no child to wake (the remask window of the session's own remasker). A return that fails
        leaves this process in a session's view: it exits, and every session with it (fail closed)."""
        remasker = session.remasker
        if self.libc.setns(session.namespaces[1], _CLONE_NEWNS) != 0:
            return f"setns into the session's mount namespace: {os.strerror(_remask.ctypes.get_errno())}"
        why: str | None = None
        try:
            remasker.failed = []
            if work is None:
                remasker.scan()
            else:
                remasker.act(*work)
            if remasker.failed:
                why = "masking failed: " + "; ".join(remasker.failed)
        except Exception as exc:  # (reported: the session is ended)
            why = f"{type(exc).__name__}: {exc}"
        finally:
            if self.libc.setns(self.own_mount, _CLONE_NEWNS) != 0:
                os.write(2, b"console-bridge remasker: cannot return to the host's mount namespace\n")
                os._exit(1)
        remasker.masked.clear()
        return why

    def fork_spare(self) -> tuple[int, _socket.socket]:
        """A child waiting for one job (``run_in``): forked ahead, it is a sleeper the kernel wakes at
        once, where a child forked per event waited for the scheduler (a new task queues behind the
        running ones: measured 4 ms p50 on a busy 2-core host, against 0.3 ms for a waiting one)."""
        mine, theirs = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                mine.close()
                code = _spare(theirs, self.fd)
            finally:
                os._exit(code)
        theirs.close()
        return pid, mine


def _spare(sock: _socket.socket, inotify: int) -> int:
    """The spare child: holds nothing of the helper's but the inotify instance and its socket, dies
    with the helper, does one job in the session's namespaces, answers, exits."""
    _remask._libc().prctl(_PR_SET_PDEATHSIG, _SIGKILL, 0, 0, 0)
    keep = sorted({0, 1, 2, inotify, sock.fileno()})
    for low, high in zip(keep, [*keep[1:], 1 << 16], strict=True):
        os.closerange(low + 1, high)
    data, ancillary, _, _ = sock.recvmsg(1 << 22, _socket.CMSG_SPACE(_MAX_FDS * 4))
    if not data:
        return 0
    fds: list[int] = []
    for level, kind, payload in ancillary:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            fds.extend(struct.unpack(f"{len(payload) // 4}i", payload[: len(payload) - len(payload) % 4]))
    try:
        names, etc, folders, work = marshal.loads(data)
        remasker = _remask.Remasker(names, etc, fd=inotify)
        remasker.folders = folders
        _enter(fds)
        if work is None:
            remasker.scan()
        else:
            remasker.act(*work)
        answer = marshal.dumps((remasker.folders, remasker.failed))
    except BaseException as exc:  # (reported to the helper, which fails closed)
        answer = marshal.dumps(f"{type(exc).__name__}: {exc}")
    sock.send(answer)
    return 0


def main() -> None:
    # No parent-death signal: it is sent when the *thread* that forked this process ends, and the host
    # starts it from a worker thread that ends when idle. Its stdin's EOF is the host's end.
    path = sys.argv[1]
    try:
        helper = Helper(path)
    except OSError as exc:
        os.write(1, f"{exc}\n".encode())
        sys.exit(1)
    os.write(1, b"ready\n")
    null = os.open(os.devnull, os.O_RDWR)  # the host's pipe let go; fd 1 stays taken (a spare keeps 0-2:
    os.dup2(null, 1)  # a session's connection landing on a free fd 1 outlived its drop there)
    os.close(null)
    try:
        helper.run()
    finally:
        try:  # its socket and the folder the host made for it (left here when the host died first)
            os.unlink(path)
            os.rmdir(os.path.dirname(path))
        except OSError:
            pass


if __name__ == "__main__":
    main()
