"""The checks after every cycle: no survivor of a closed session (and no orphan), no leaked folder."""

from __future__ import annotations

import contextlib
import os
import time

import anyio
import psutil

from .bookkeeping import Session, _alive, _describe
from .bounds import BOUNDS
from .planning import KILLED
from .steps import Steps


class Checks(Steps):
    """The checks after every cycle (a part of :class:`Chaos`)."""

    # ------------------------------------------------------------------------ checks
    def owner_of(self, proc: psutil.Process) -> Session | None:
        """The session a process belongs to: by ancestry, else by its TMPDIR."""
        by_pid = {s.pid: s for s in self.every if s.pid is not None}
        try:
            for parent in [proc, *proc.parents()]:
                session = by_pid.get(parent.pid)
                if session is not None and session.procs.get(parent.pid) == parent:
                    return session
            env = proc.environ()
        except psutil.Error:
            return None
        tmpdir = env.get("TMPDIR", "")
        for session in self.every:
            if session.tmpdir is not None and (tmpdir + "/").startswith(str(session.tmpdir) + "/"):
                return session
        return None

    def sweep(self) -> list[psutil.Process]:
        """Processes (of this user) whose cwd or environment refers to the run's root, outside open sessions."""
        root = str(self.root)
        open_pids = {pid for s in self.sessions for pid, p in s.procs.items() if _alive(p)}
        found = []
        uid = os.getuid()
        for proc in psutil.process_iter():
            if proc.pid == os.getpid() or proc.pid in open_pids:
                continue
            try:
                if proc.uids().real != uid or proc.status() == psutil.STATUS_ZOMBIE:
                    continue
                cwd = proc.cwd()
                env = proc.environ()
            except psutil.Error:
                continue
            if not (cwd.startswith(root) or any(root in value for value in env.values())):
                continue
            owner = self.owner_of(proc)
            if owner is not None and not owner.closed:
                owner.procs.setdefault(proc.pid, proc)  # a live process of an open session
                continue
            found.append(proc)
        return found

    async def reap(self) -> None:
        """Every process of the sessions closed this cycle gone within BOUNDS['reap']; no orphan anywhere."""
        closing, self.to_reap = self.to_reap, []
        deadline = time.monotonic() + BOUNDS["reap"]
        while True:
            left = [(s, p) for s in closing for p in s.procs.values() if _alive(p)]
            strays = self.sweep()
            if (not left and not strays) or time.monotonic() >= deadline:
                break
            await anyio.sleep(0.05)
        # Count what is still alive now, describe everything before killing anything (a killed
        # server takes its sandboxed children down with it), then kill: the next cycle starts clean.
        found: list[tuple[Session | None, psutil.Process, bool]] = []
        counted: set[int] = set()
        for session, proc in left:
            if _alive(proc):
                found.append((session, proc, False))
                counted.add(proc.pid)
        for proc in strays:
            try:
                key = (proc.pid, proc.create_time())
            except psutil.Error:
                continue
            if proc.pid in counted or key in self.known_orphans or not _alive(proc):
                continue
            self.known_orphans.add(key)
            found.append((self.owner_of(proc), proc, True))
        entries = [
            {
                "cycle": self.current_cycle,
                "session": session.label() if session else None,
                "exempt": session.exempt if session else None,
                "orphan": orphan,
                **_describe(proc),
            }
            for session, proc, orphan in found
        ]
        for entry in entries:
            self.stats.survivors.append(entry)
            self.log(f"SURVIVOR {entry}")
        for _session, proc, _orphan in found:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        for session in closing:
            self.stats.processes_tracked += len(session.procs)
            if session.exempt in KILLED and session.sent:
                # Not a failure either way: mcp-console 0.0.5 has no end marker, so its Recording.finalized
                # only says "the server is gone" and reads True here too.
                recording = session.console.recording
                if recording is not None:
                    self.stats.killed_recordings["reads finalized" if recording.finalized else "not finalized"] += 1

    def check_leaks(self) -> None:
        owned = {s.tmpdir.name for s in self.sessions if s.tmpdir is not None}
        for name in sorted(os.listdir(self.tmp_root)):
            if name in owned or name in self.reported_leaks:
                continue
            self.reported_leaks.add(name)
            owner = next((s.label() for s in self.every if s.tmpdir is not None and s.tmpdir.name == name), None)
            self.stats.leaks.append({"cycle": self.current_cycle, "entry": name, "session": owner})
            self.log(f"LEAK {name} ({owner})")
