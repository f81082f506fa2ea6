"""The guest's host-privilege checks (issue 29): no cell holds a privilege of the host, whoever started it.

Run by check.py (``--only privilege``) as alice in each scope and, from guest/scenarios/drive-root.sh,
as root. A workspace-profile session; its cells scan every ``/proc/sys`` entry for write access,
open ``core_pattern``, ``hostname`` and ``/proc/sysrq-trigger`` for writing (the kernel checks at
``open``; nothing is written), try ``sethostname``, read a root-only file planted in ``/opt`` (as
root) and write into the workspace, whose files must land owned by whoever started the session.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
from pathlib import Path
from typing import Any

# Sysctls of the namespace of the one who writes them: the sandbox's own IPC and PID namespaces.
OWN_NAMESPACE = {
    *(
        f"/proc/sys/kernel/{name}"
        for name in (
            *("auto_msgmni", "msgmax", "msgmnb", "msgmni", "msg_next_id", "sem", "sem_next_id"),
            *("shmall", "shmmax", "shmmni", "shm_next_id", "shm_rmid_forced", "ns_last_pid", "pid_max"),
        )
    )
}

SCAN = r"""
import json, os, socket
paths = [os.path.join(d, f) for d, _s, fs in os.walk("/proc/sys") for f in fs]
writable = [p for p in paths if os.access(p, os.W_OK)]
opened = {}
for path in ("/proc/sys/kernel/core_pattern", "/proc/sys/kernel/hostname", "/proc/sysrq-trigger"):
    try:
        os.close(os.open(path, os.O_WRONLY))
        opened[path] = "opened"
    except OSError as exc:
        opened[path] = exc.strerror
try:
    socket.sethostname("pwned-by-a-cell")
    hostname = "changed"
except OSError as exc:
    hostname = exc.strerror
os.makedirs("made", exist_ok=True)
open("made/by-a-cell.txt", "w").write("x")
print("RESULT " + json.dumps({"writable": writable, "opened": opened, "hostname": hostname}))
"""


def _result(text: str) -> dict[str, Any]:
    line = next(line for line in text.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])  # type: ignore[no-any-return]


def check_privilege(report: Any, base: Path) -> None:
    import check as bed  # the bed's helpers (check.py runs this from its own folder)

    from console_bridge import Console

    folder = bed.fresh_dir(base, "privilege")
    workspace = folder / "w"
    workspace.mkdir()
    canary = None
    secret = "ROOTONLY-" + secrets.token_hex(4)
    if os.geteuid() == 0:
        canary = Path("/opt") / f".console-bridge-guest-{secrets.token_hex(4)}"
        fd = os.open(canary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, secret.encode())
        os.close(fd)
    host_name = socket.gethostname()
    console = bed.start_session(
        report,
        "privilege-start",
        lambda: Console(workspace, profile="workspace", limits=bed.limits(), startup_timeout=bed.STARTUP_TIMEOUT),
    )
    try:
        if console is None:
            for check in ("privilege-sysctls", "privilege-ids", "privilege-root-only-file", "privilege-writes-owned"):
                report.record(check, False, 0.0, why="no session (see privilege-start)")
            return
        with report.timed("privilege-sysctls") as d:
            result = console.run(python=SCAN, timeout=300)
            found = _result(result.text)
            foreign = [
                p for p in found["writable"] if p not in OWN_NAMESPACE and not p.startswith("/proc/sys/fs/mqueue/")
            ]
            d["writable"] = len(found["writable"])
            d["foreign"] = foreign[:20]
            d["opened"] = found["opened"]
            d["hostname"] = found["hostname"]
            d["why"] = f"{len(foreign)} host sysctls writable, open for writing: {found['opened']}"
            d["ok"] = (
                not foreign
                and "opened" not in found["opened"].values()
                and found["hostname"] != "changed"
                and socket.gethostname() == host_name
            )
        with report.timed("privilege-ids") as d:
            ids = console.status().extra.get("ids") or {}
            d["ids"] = ids
            root_is = int(str(ids.get("uid", "0 -1 1")).split()[1])
            d["why"] = f"the session's uid 0 is host uid {root_is}"
            d["ok"] = root_is >= 65536 if os.geteuid() == 0 else root_is == os.geteuid()
        with report.timed("privilege-root-only-file") as d:
            if canary is None:
                d["why"] = "as a normal user the cells run as that user (privilege-ids); nothing root-only to plant"
                d["ok"] = True
            else:
                read = console.run(python=f"print(open({str(canary)!r}).read())")
                d["why"] = read.combined.strip().splitlines()[-1][:200] if read.combined.strip() else "no output"
                d["ok"] = secret not in read.combined and "PermissionError" in read.combined
        with report.timed("privilege-writes-owned") as d:
            info = (workspace / "made" / "by-a-cell.txt").stat()
            d["why"] = f"owned by {info.st_uid}:{info.st_gid}, started by {os.geteuid()}:{os.getegid()}"
            d["ok"] = (info.st_uid, info.st_gid) == (os.geteuid(), os.getegid())
    finally:
        if console is not None:
            bed.close_quietly(console)
        if canary is not None:
            canary.unlink(missing_ok=True)
