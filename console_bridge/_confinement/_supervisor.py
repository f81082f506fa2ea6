"""The session supervisor: a small stdlib-only process between the host and a server.

Started as ``python -I -S _supervisor.py CONFIG_JSON`` (no site, no user paths: it
imports nothing but the standard library and starts in a few milliseconds). It
owns the server's process tree exactly:

* it is the **child subreaper** (``PR_SET_CHILD_SUBREAPER``), so every descendant,
  ``setsid`` or double-forked, stays in its tree until it is reaped here;
* it applies rlimits and puts the server into the session's cgroups **before** the
  server runs, so everything the server starts inherits them (the supervisor itself
  stays in its own group, so it can remove the session's groups at the end);
* with a ``view`` setting, the server's process (between fork and exec) enters
  namespaces of its own and builds the session's read view there (``_namespaces.py``:
  a user namespace, for root's sessions one whose ids are a block of unprivileged host ids
  the supervisor claims and maps (given back at the end); mount, UTS and IPC namespaces; the
  size-capped tmpfs TMPDIR; ``pivot_root``), then takes its ``child_rlimits`` (``RLIMIT_NPROC``
  counted over that user namespace) and a seccomp filter against set-user-ID files
  (``_setid.py``); the supervisor itself stays in the host's view,
  so it can remove the session's folders at the end;
* with a shared remasker (the view's ``watch["helper"]``, ``_remaskd``), it connects to it and
  the server's process hands it the session's hidden names once the view is built; the
  supervisor watches that link for the hang-up only and ends the whole tree on it (the helper
  died, or a remask failed: fail closed);
* it asks for a parent-death signal (``PR_SET_PDEATHSIG``): when the host dies it
  closes the server's stdin (the recording is finalized), kills the rest of the
  tree and removes the session's private folders.

The server's stdout and stderr are the supervisor's own (no copy in between). Its
stdin is the supervisor's own too when that is a socket (the host passes one end of
a ``socketpair`` and writes to the other, ``open_stdio``): the host's requests go
straight to the server, and the supervisor is not woken per message (it watches
the socket only for the host's hang-up, ``EPOLLRDHUP``, which data never raises).
It can still close the server's stdin: ``shutdown(SHUT_RD)`` on that socket ends
every reader's input after what was already sent, exactly like the host's own
EOF. Any other stdin (a pipe) is relayed through a pipe of its own, as before. It
closes the server's stdin on EOF from the host, on ``SIGTERM`` (a clean close
requested from outside, e.g. ``console-bridge kill``) and on the host's death.
``SIGUSR1`` kills the tree at once. When the server has exited, every descendant left is killed,
the private folders and cgroups are removed, and the supervisor exits with the
server's status.

A setup failure is reported on stderr as one line starting with
``console-bridge supervisor:`` and exit status 71, before the server starts.
"""

from __future__ import annotations

import ctypes
import errno
import gc
import os
import resource
import select
import stat
import sys
import time

# Startup time and memory matter (every session has a supervisor, and its remasker is a fork of
# it): no typing, contextlib or shutil at import, and neither json nor signal, whose imports bring
# re and enum (1.1 MiB of the 4.2 MiB a `python -I -S` with this module's imports holds privately);
# the C modules below them do the same work. mypy still sees the annotations and signal's stubs.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal
    from typing import Any
else:
    import _signal as signal  # signal's functions and constants, without its enums

SETUP_FAILED = 71
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_SHUT_RD = 0
_RLIMITS = {
    "as": resource.RLIMIT_AS,
    "fsize": resource.RLIMIT_FSIZE,
    "cpu": resource.RLIMIT_CPU,
    "nproc": resource.RLIMIT_NPROC,
}


def _fail(message: str) -> None:
    os.write(2, f"console-bridge supervisor: {message}\n".encode())
    os._exit(SETUP_FAILED)


def loads(text: str) -> Any:
    """``json.loads(text)`` for the configuration the host wrote with ``json.dumps``, by the C scanner
    json itself uses (``_json``), without importing json (see the imports above). Whatever that
    scanner does not read as exactly one value (and where there is none) is json's own to read or
    to refuse: raises ValueError (``json.JSONDecodeError``) for anything but one JSON value."""
    scanner_of: Any = None  # _json.make_scanner (its stub wants a JSONDecoder; any object with these settings does)
    try:
        from _json import make_scanner as scanner_of
    except ImportError:
        pass

    class Context:  # what json.decoder.JSONDecoder gives its scanner, by default
        strict = True
        object_hook = object_pairs_hook = None
        parse_float, parse_int, parse_constant = float, int, float  # float("NaN"), float("-Infinity")

    if scanner_of is not None:
        start = len(text) - len(text.lstrip(" \t\n\r"))
        try:
            value, end = scanner_of(Context())(text, start)
        except (StopIteration, ValueError, SystemError):  # (its errors need json.decoder imported)
            pass
        else:
            if not text[end:].strip(" \t\n\r"):
                return value
    import json

    return json.loads(text)


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        _fail(f"{what} failed: {os.strerror(code)} (errno {code})")


def _is_socket(fd: int) -> bool:
    try:
        return stat.S_ISSOCK(os.fstat(fd).st_mode)
    except OSError:
        return False


def _sibling(name: str) -> Any:
    """A stdlib-only module beside this file (``python -I -S`` puts no folder of ours on the path)."""
    folder = os.path.dirname(os.path.abspath(__file__))
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return __import__(name)


def _descendants() -> list[int]:
    """Every descendant of this process (all are ours: orphans reparent to a subreaper)."""
    return list(_PROCTREE.descendant_pids(os.getpid()))


_PROCTREE = _sibling("_proctree")  # loaded at start: the kill path must not depend on an import


class Supervisor:
    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.argv = [str(part) for part in config["argv"]]
        self.grace = float(config.get("grace", 3.0))
        self.cleanup = [str(path) for path in config.get("cleanup", [])]
        self.cgroups = [str(path) for path in config.get("cgroups", [])]
        self.nested = [str(path) for path in config.get("nested_cgroups", [])]
        self.server_pid = 0
        self.supervisor_pid = os.getpid()
        self.server_status: int | None = None
        self.stdin_w: int | None = None  # relayed stdin: the write end of the server's pipe
        # Direct stdin: the server reads the host's socket (fd 0) itself; True until it is shut.
        self.direct = _is_socket(0)
        self.direct_open = self.direct
        self.libc: ctypes.CDLL | None = None
        self.closing_at: float | None = None
        self.killing = False
        self.parent = os.getppid()
        self.userns_fd: int | None = None  # root's sessions: the user namespace of the session's ids
        self.session_ids: int | None = None  # the host id of the session's root (uid and gid)
        self.ids_lock: int | None = None  # held while the session lives: no other session gets its ids
        self.holds: list[int] = []  # shared holds on the writable folders (``_shared_roots``), until exit
        self.remasker: int | None = None  # the link to the host process's shared remasker (``_remaskd``)

    # ------------------------------------------------------------------ setup
    def setup(self) -> None:
        libc = self.libc = _libc()
        parent = self.parent = os.getppid()
        _check(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "prctl(PR_SET_CHILD_SUBREAPER)")
        _check(libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")
        if os.getppid() != parent:  # the host died before the death signal was armed
            os._exit(SETUP_FAILED)
        for name, value in dict(self.config.get("rlimits", {})).items():
            soft = int(value)
            _, hard = resource.getrlimit(_RLIMITS[name])
            if hard != resource.RLIM_INFINITY and hard < soft:
                soft = hard
            try:
                # The soft limit only: a worker may raise its own again (the bridge's startup
                # cell does for RLIMIT_FSIZE), the server keeps it.
                resource.setrlimit(_RLIMITS[name], (soft, hard))
            except (OSError, ValueError) as exc:
                _fail(f"cannot set RLIMIT_{name.upper()}={soft}: {exc}")
        if "fsize" in dict(self.config.get("rlimits", {})):
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past the cap fail with EFBIG instead
        self.hold_roots([str(path) for path in self.config.get("holds", [])])
        cells = self.config.get("scope_cells")
        if isinstance(cells, dict):
            self.split_scope(int(cells["processes"]))
        view = self.config.get("view")
        ids = view.get("ids") if isinstance(view, dict) else None
        if isinstance(ids, dict):
            self.make_ids(ids)
        watch = view.get("watch") if isinstance(view, dict) else None
        if isinstance(watch, dict) and watch.get("helper"):
            self.connect_remasker(str(watch["helper"]))

    def connect_remasker(self, path: str) -> None:
        """The session's link to the shared remasker: the server registers its watch over it, and its
        hang-up (the helper died, or ended this session after a failed remask) ends the session."""
        import _socket

        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
        try:
            sock.connect(path)
        except OSError as exc:
            sock.close()
            _fail(f"cannot reach the shared remasker at {path}: {exc}")
            return
        self.remasker = sock.detach()
        os.set_inheritable(self.remasker, False)  # (the server's process closes its copy before exec)

    def hold_roots(self, folders: list[str]) -> None:
        """Lock each writable folder shared until this process ends, after every process of the
        session (see ``_shared_roots``): a host that dies first does not free the folder's names
        while its cells live. The host holds them already, so none waits."""
        if not folders:
            return
        import fcntl

        for folder in folders:
            try:
                fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                fcntl.flock(fd, fcntl.LOCK_SH)
            except OSError as exc:
                _fail(f"locking the writable folder {folder} failed: {exc}")
                return
            self.holds.append(fd)

    def make_ids(self, ids: dict[str, Any]) -> None:
        """Root's session: claim a block of unprivileged host ids and make the user namespace that
        maps the session's ids 0.. to it (the server joins it once its view is built)."""
        _namespaces = _sibling("_namespaces")
        try:
            base, self.ids_lock = _namespaces.claim_ids(
                str(ids["locks"]), int(ids["start"]), int(ids["count"]), int(ids["size"])
            )
            self.userns_fd = _namespaces.make_user_namespace(base, int(ids["size"]))
        except (_namespaces.SetupError, OSError) as exc:
            _fail(f"making the session's user namespace failed: {exc}")
            return
        self.session_ids = base

    def split_scope(self, processes: int) -> None:
        """In a delegated systemd scope of its own: move this process (and so the server it starts)
        into a leaf ``host`` group and make a ``cells`` group capped at ``processes`` tasks, which the
        host moves the worker into. cgroup v2 allows controllers below a group only when the group
        holds no process itself; the scope's own limit keeps the server headroom above the cells'."""
        try:
            with open("/proc/self/cgroup", encoding="ascii") as handle:
                line = next(line for line in handle.read().splitlines() if line.startswith("0::"))
        except (OSError, StopIteration):
            _fail("cannot read this process's cgroup (v2) in its systemd scope")
            return
        base = os.path.join(os.environ.get("CONSOLE_BRIDGE_CGROUP_ROOT") or "/sys/fs/cgroup", line[3:].strip("/"))
        try:
            os.mkdir(os.path.join(base, "host"))
            with open(os.path.join(base, "host", "cgroup.procs"), "w", encoding="ascii") as handle:
                handle.write(str(os.getpid()))
            with open(os.path.join(base, "cgroup.subtree_control"), "w", encoding="ascii") as handle:
                handle.write("+pids")
            os.mkdir(os.path.join(base, "cells"))
            with open(os.path.join(base, "cells", "pids.max"), "w", encoding="ascii") as handle:
                handle.write(str(processes))
        except OSError as exc:
            _fail(f"cannot split the session's systemd scope {base} into host and cells groups: {exc}")

    def start_server(self) -> None:
        read_end: int | None = None
        if not self.direct:
            read_end, self.stdin_w = os.pipe()
        cwd = self.config.get("cwd")
        if isinstance(self.config.get("view"), dict) and self.remasker is None:
            for name in ("_namespaces", "_setid", "_remask"):  # imported once, here: shared with the remasker
                _sibling(name)
        # Without the shared remasker (``_remaskd``), the session's own is a fork of the server's process, and
        # so of this one: the pages they share stay shared only while neither writes them. No collection walks
        # (and writes) what exists now. With it, the view's modules are the server's process's to import (its
        # pages go at exec), not this process's to hold for the session's life.
        gc.collect()
        gc.freeze()
        pid = os.fork()
        if pid == 0:  # the server
            # Only the server joins the session's groups (and so everything it starts): the
            # supervisor stays where it was born, so it can remove the groups at the end.
            for group in self.cgroups:
                try:
                    with open(os.path.join(group, "cgroup.procs"), "w", encoding="ascii") as handle:
                        handle.write(str(os.getpid()))
                except OSError as exc:
                    _fail(f"cannot join cgroup {group}: {exc.strerror}")
            for name in self.config.get("drop_env", []):
                os.environ.pop(str(name), None)
            view = self.config.get("view")
            if isinstance(view, dict):
                self.enter_view(view)
            for name, value in dict(self.config.get("child_rlimits", {})).items():
                try:
                    resource.setrlimit(_RLIMITS[name], (int(value), int(value)))
                except (OSError, ValueError) as exc:
                    _fail(f"cannot set RLIMIT_{name.upper()}={value}: {exc}")
            try:
                if read_end is not None and self.stdin_w is not None:
                    os.dup2(read_end, 0)
                    os.close(read_end)
                    os.close(self.stdin_w)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                signal.signal(signal.SIGUSR1, signal.SIG_DFL)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                signal.pthread_sigmask(signal.SIG_SETMASK, [])
                if isinstance(cwd, str):
                    os.chdir(cwd)
                os.execv(self.argv[0], self.argv)
            except OSError as exc:
                os.write(2, f"console-bridge supervisor: cannot start {self.argv[0]}: {exc.strerror}\n".encode())
            os._exit(127)
        if read_end is not None:
            os.close(read_end)
        self.server_pid = pid

    def enter_view(self, view: dict[str, Any]) -> None:
        """In the server's process, before exec: its namespaces and its view of the host."""
        _namespaces = _sibling("_namespaces")
        _setid = _sibling("_setid")  # (imported before the view: its file has no name inside)
        _remask = _sibling("_remask")
        try:
            if self.userns_fd is not None:
                _namespaces.enter("mapped")
                namespaces = _remask.namespace_fds() if self.remasker is not None else []
                _namespaces.apply_plan(view, self.userns_fd, self.session_ids)
                self.remask(view, namespaces)  # (as the host's root, in the view)
                _namespaces.become_session_root(self.userns_fd)
            else:
                _namespaces.enter("user")
                namespaces = _remask.namespace_fds() if self.remasker is not None else []
                _namespaces.apply_plan(view)
                self.remask(view, namespaces)
            _namespaces.own_keyring()
            _namespaces.die_with_parent()
        except (_namespaces.SetupError, OSError) as exc:
            _fail(f"building the session's view failed: {exc}")
        try:
            _setid.install()  # no cell makes a set-user-ID file (what cells write lands as the host's user)
        except _setid.SetidError as exc:
            _fail(f"{exc}; console-bridge refuses to start a session that could plant set-user-ID files")

    def remask(self, view: dict[str, Any], namespaces: list[int]) -> None:
        """In the server's process, its view built: the hidden names handed to the host process's shared
        remasker (and this process's copy of the link closed), or, without one, a remasker of its own."""
        _remask = _sibling("_remask")
        if self.remasker is None:
            _remask.start(view.get("watch"), self.supervisor_pid)
            return
        try:
            _remask.register(self.remasker, view.get("watch"), namespaces)
        finally:
            os.close(self.remasker)
            self.remasker = None

    # ------------------------------------------------------------------- run
    @property
    def stdin_open(self) -> bool:
        return self.direct_open or self.stdin_w is not None

    def close_stdin(self) -> None:
        if self.direct_open:
            # The socket itself, not this descriptor: every reader of it (the server) gets EOF once
            # it has read what the host sent, and the host's further writes fail (EPIPE).
            self.direct_open = False
            if self.libc is not None:
                self.libc.shutdown(0, _SHUT_RD)
            if self.closing_at is None:
                self.closing_at = time.monotonic()
        if self.stdin_w is not None:
            try:
                os.close(self.stdin_w)
            except OSError:
                pass
            self.stdin_w = None
            if self.closing_at is None:
                self.closing_at = time.monotonic()

    def kill_all(self) -> None:
        self.killing = True
        self.close_stdin()
        for _ in range(200):
            pids = _descendants()
            for group in self.nested + self.cgroups:
                try:
                    with open(os.path.join(group, "cgroup.procs")) as handle:
                        pids.extend(int(line) for line in handle.read().split() if int(line) != os.getpid())
                except (OSError, ValueError):
                    pass
            if not pids:
                return
            for pid in set(pids):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            self.reap()
            time.sleep(0.002)

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.server_pid:
                self.server_status = os.waitstatus_to_exitcode(status)

    def run(self) -> int:
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        pending: list[int] = []
        for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGCHLD, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, lambda signum, _frame: pending.append(signum))
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        self.setup()
        self.start_server()
        # poll(2), not select(2): a waiter asking only for POLLRDHUP is not even woken when data
        # arrives (the kernel filters wake-ups by the events asked for), so with a direct stdin
        # only the host's hang-up (or our own shutdown) wakes the supervisor, never a request.
        poller = select.poll()
        poller.register(wake_r, select.POLLIN)
        poller.register(0, select.POLLRDHUP if self.direct else select.POLLIN)
        if self.remasker is not None:  # (data never wakes it: only the hang-up)
            poller.register(self.remasker, select.POLLRDHUP)
        host_in: int | None = 0
        while self.server_status is None:
            timeout = None
            if self.closing_at is not None:
                timeout = max(0.0, self.closing_at + self.grace - time.monotonic())
                if timeout == 0.0:
                    self.kill_all()
                    continue
            try:
                ready = {fd for fd, _ in poller.poll(None if timeout is None else timeout * 1000)}
            except InterruptedError:
                ready = set()
            if wake_r in ready:
                try:
                    os.read(wake_r, 512)
                except BlockingIOError:
                    pass
            if self.remasker is not None and self.remasker in ready and not self.killing:
                # Fail closed: nobody keeps the hidden names hidden any more.
                why = "it stopped"
                try:
                    why = os.read(self.remasker, 4096).decode(errors="replace") or why
                except OSError:
                    pass
                message = f"console-bridge supervisor: the shared remasker failed ({why}); session ended\n"
                try:  # (the host may be gone with the pipe's other end: the session's tree still ends, cleaned up)
                    os.write(2, message.encode())
                except OSError:
                    pass
                poller.unregister(self.remasker)
                self.kill_all()
            while pending:
                signum = pending.pop()
                if signum == signal.SIGUSR1:
                    self.kill_all()
                elif signum != signal.SIGCHLD:  # TERM, INT, HUP, the parent's death: close cleanly
                    if signum == signal.SIGTERM and os.getppid() == self.parent and self.stdin_open:
                        os.write(2, b"console-bridge supervisor: asked to close from outside (console-bridge kill)\n")
                    self.close_stdin()
            self.reap()
            if host_in is not None and host_in in ready:
                if self.direct:  # the host closed its end (or we shut the socket): the server sees EOF
                    poller.unregister(host_in)
                    host_in = None
                    self.close_stdin()
                    continue
                try:
                    data = os.read(host_in, 1 << 16)
                except OSError:
                    data = b""
                if not data:
                    poller.unregister(host_in)
                    host_in = None
                    self.close_stdin()
                elif self.stdin_w is not None:
                    try:
                        view = memoryview(data)
                        while view:
                            view = view[os.write(self.stdin_w, view) :]
                    except OSError as exc:
                        if exc.errno != errno.EPIPE:
                            raise
                        self.close_stdin()
        self.kill_all()
        self.finish()
        status = self.server_status
        if status < 0:  # the server died of a signal: die of the same one, so the host sees it as is
            try:
                signal.signal(-status, signal.SIG_DFL)
            except (OSError, ValueError):  # SIGKILL/SIGSTOP cannot be reset
                pass
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [-status])
            os.kill(os.getpid(), -status)
        return status if status >= 0 else 128 - status

    def finish(self) -> None:
        import shutil

        ids = dict(self.config.get("view") or {}).get("ids")
        if self.ids_lock is not None and self.session_ids is not None and isinstance(ids, dict):
            # every process of the session is gone (kill_all ran): its ids are free again
            _sibling("_namespaces").release_ids(str(ids["locks"]), self.session_ids, self.ids_lock)
            self.ids_lock = None

        for path in self.cleanup:
            for _ in range(3):
                shutil.rmtree(path, ignore_errors=True)
                if not os.path.lexists(path):
                    break
                time.sleep(0.01)
        for group in self.nested + self.cgroups:
            for _ in range(100):
                try:
                    os.rmdir(group)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)


def main() -> None:
    try:
        config = loads(sys.argv[1])
    except (IndexError, ValueError) as exc:
        _fail(f"bad configuration ({exc})")
        return
    sys.exit(Supervisor(config).run())


if __name__ == "__main__":
    main()
