"""A real test of the namespaces a session needs, in a throwaway child (for ``doctor``).

The child does what a session's server does before ``exec`` (``_namespaces``): enters its
namespaces, builds a tiny view (a tmpfs root and one folder bound writable, through an
idmapped mount for root), pivots into it and, for root, becomes the session's root. It then
reports its ids, whether it could write a global sysctl and which UTS namespace (host name) it
has, and writes a file through the bind; the parent checks who owns that file on the host.
Nothing it tries changes the host.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from console_bridge._confinement._child import run_child

__all__ = ["NamespaceCheck", "check_namespaces", "try_namespaces"]

_CODE = r"""
import json, os, sys
sys.path.insert(0, sys.argv[1])
import _namespaces
mode, folder, ids = sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
out = {}
try:
    userns = None
    if mode == "mapped":
        base, _lock = _namespaces.claim_ids(ids["locks"], ids["start"], ids["count"], ids["size"])
        userns = _namespaces.make_user_namespace(base, ids["size"])
        out["root_is"] = base
    _namespaces.enter(mode)
    root = folder + "/view"
    plan = {"root": root, "steps": [
        {"op": "bind", "source": folder + "/rw", "path": "/rw", "writable": True, "idmap": True},
        {"op": "proc", "path": "/proc"},
    ]}
    _namespaces.apply_plan(plan, userns, out.get("root_is"))
    if userns is not None:
        _namespaces.become_session_root(userns)
    _namespaces.own_keyring()
    out["uid"] = os.getuid()
    out["uid_map"] = " ".join(open("/proc/self/uid_map").read().split())
    out["sysctl_writable"] = os.access("/proc/sys/kernel/core_pattern", os.W_OK)
    out["uts"] = os.readlink("/proc/self/ns/uts")
    out["keyring"] = _namespaces._syscall("keyctl", 0, -3, 0)  # KEYCTL_GET_KEYRING_ID of the session keyring
    with open("/rw/written", "w") as handle:
        handle.write("x")
except Exception as exc:
    out["error"] = str(exc)
print(json.dumps(out))
"""


@dataclass(frozen=True)
class NamespaceCheck:
    """What the throwaway child found: None ``error`` when a session's namespaces can be built."""

    error: str | None
    mode: str
    facts: dict[str, Any]

    @property
    def isolated(self) -> str | None:
        """Why the child still held a host privilege (None: it held none)."""
        if self.facts.get("sysctl_writable"):
            return "a global sysctl (/proc/sys/kernel/core_pattern) was writable"
        if self.facts.get("uts") == os.readlink("/proc/self/ns/uts"):
            return "it shared the host's UTS namespace (its host name)"
        mine = _session_keyring()
        if mine > 0 and self.facts.get("keyring") == mine:
            return "it kept this process's session keyring"
        if self.mode == "mapped" and self.facts.get("uid_map", "").startswith("0 0 "):
            return "uid 0 inside was uid 0 of the host"
        return None


def _session_keyring() -> int:
    """This process's session keyring (-1 where keyctl is refused or there is none)."""
    import ctypes

    from console_bridge._confinement._namespaces import SetupError, syscall_number

    try:
        return int(ctypes.CDLL(None, use_errno=True).syscall(syscall_number("keyctl"), 0, -3, 0))
    except (OSError, SetupError):
        return -1


def check_namespaces(mode: str, ids: dict[str, Any] | None = None, *, timeout: float = 30.0) -> NamespaceCheck:
    """Build a session's namespaces in a throwaway child (see the module's docstring)."""
    here = str(Path(__file__).parent)
    with tempfile.TemporaryDirectory(prefix="console-bridge-nscheck-") as folder:
        os.mkdir(os.path.join(folder, "rw"), 0o755)
        done = run_child(_CODE, here, mode, folder, json.dumps(ids or {}), timeout=timeout)
        if isinstance(done, str):
            return NamespaceCheck(done, mode, {})
        try:
            facts = json.loads(done.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            text = done.stdout.strip() or done.stderr.strip() or f"exit status {done.returncode}"
            return NamespaceCheck(text[-500:], mode, {})
        if "error" in facts:
            return NamespaceCheck(str(facts["error"])[-500:], mode, facts)
        written = Path(folder, "rw", "written")
        try:
            info = written.stat()
        except OSError as exc:
            return NamespaceCheck(f"the file written through the view is not on the host ({exc})", mode, facts)
        facts["written_by"] = info.st_uid
        if info.st_uid != os.geteuid():
            return NamespaceCheck(
                f"a file written through the view landed owned by uid {info.st_uid}, not {os.geteuid()}", mode, facts
            )
    return NamespaceCheck(None, mode, facts)


def try_namespaces(mode: str, ids: dict[str, Any] | None = None, *, timeout: float = 30.0) -> str | None:
    """None when a child could build a session's namespaces and held no host privilege in them, else why not."""
    result = check_namespaces(mode, ids, timeout=timeout)
    return result.error or result.isolated
