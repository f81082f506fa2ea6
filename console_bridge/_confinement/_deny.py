"""What every session's cells may not read (pure), and the probe that proves it at start.

**A deny list, not a narrower read view.** mcp-console's sandbox reads the whole host
filesystem unless told otherwise, and the worker's Python environment (often a venv
under the home folder), R's library, the data a user analyses and the system's shared
libraries must stay readable, wherever they live. A read allowlist would have to
enumerate all of them for every host and break whenever one moves; a deny list names
the few places that hold secrets, which are well known and stable. So every session
denies, whatever its profile:

* the home folder's credential stores (:data:`HOME_SECRETS`),
* ``/etc/shadow`` and ``/etc/gshadow``,
* console-bridge's own state (every session's private folder) and recordings roots,
  and mcp-console's default recordings folder,
* the workspace's ``.git`` (a CI checkout's ``.git/config`` often holds a token),

plus the profile's ``deny_read`` entries (``~`` and ``{workspace}`` expanded).

The advertised sandbox text cannot show deny rules, so :func:`probe_code` builds a cell
that tries to read each denied place that exists (and canaries the bridge planted in its
own denied folders) and to write outside the writable set; the session refuses to run
(``SandboxMismatch``) when any attempt succeeds.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from console_bridge._errors import LaunchRefused
from console_bridge._worker._ipython import BRIDGE_CELL

__all__ = [
    "HOME_SECRETS",
    "HOME_SECRET_FILES",
    "ProbeResult",
    "deny_paths",
    "expand_deny",
    "parse_probe",
    "probe_code",
    "probe_code_for",
    "secret_folders",
    "secret_names",
]

#: Credential stores under the home folder every session denies.
HOME_SECRETS = (
    ".ssh",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".kube",
    ".docker",
    ".gnupg",
    ".netrc",
    ".git-credentials",
    ".npmrc",
    ".pypirc",
    ".config/gh",
    ".config/hub",
    ".local/share/keyrings",
    ".password-store",
    ".pgpass",
    ".my.cnf",
    ".vault-token",
    ".terraform.d",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".config/containers/auth.json",
    ".agents/console",
)
#: The credential stores above that are files; the rest are folders (a store missing in a writable
#: home is held by an empty one of its kind: ``_shared_roots.placeholders``).
HOME_SECRET_FILES = frozenset(
    {
        ".netrc",
        ".git-credentials",
        ".npmrc",
        ".pypirc",
        ".pgpass",
        ".my.cnf",
        ".vault-token",
        ".cargo/credentials",
        ".cargo/credentials.toml",
        ".config/containers/auth.json",
    }
)
SYSTEM_SECRETS = ("/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-")
PROBE_MARK = "console-bridge-probe:"


def expand_deny(item: str, workspace: Path, *, source: str = "deny_read") -> str:
    """``~/x`` and ``{workspace}/x`` -> an absolute path; anything else must be absolute."""
    if not isinstance(item, str) or not item or "\x00" in item or "\n" in item:
        raise LaunchRefused(f"{source} entry {item!r} must be a non-empty path without NUL or line breaks")
    text = item.replace("{workspace}", str(workspace))
    path = Path(text).expanduser()
    if not path.is_absolute():
        raise LaunchRefused(
            f"{source} entry {item!r} is relative; write it as an absolute path, '~/...' or '{{workspace}}/...'"
        )
    if ".." in path.parts:
        raise LaunchRefused(f"{source} entry {item!r} contains '..'; give a plain path")
    if path == Path("/"):
        raise LaunchRefused(f"{source} entry {item!r} denies the whole filesystem; the worker could not start")
    return os.path.normpath(str(path))


def secret_names(workspace: Path, extra: Sequence[str] = ()) -> list[str]:
    """The names a session hides wherever they are shown, existing or not: the credential stores,
    the system's shadow files, the workspace's ``.git``, the profile's ``deny_read``."""
    home = Path.home()
    paths = [str(home / item) for item in HOME_SECRETS]
    paths += [*SYSTEM_SECRETS, str(workspace / ".git")]
    paths += [expand_deny(item, workspace) for item in extra]
    return list(dict.fromkeys(os.path.normpath(p) for p in paths))


def secret_folders() -> list[str]:
    """The credential stores that are folders, as absolute paths under the home folder."""
    home = Path.home()
    return [os.path.normpath(str(home / item)) for item in HOME_SECRETS if item not in HOME_SECRET_FILES]


def deny_paths(
    *, workspace: Path, state_dir: Path, recording_roots: Iterable[Path], extra: Sequence[str] = ()
) -> list[str]:
    """The full deny list of a session (absolute, de-duplicated, in a stable order)."""
    paths = secret_names(workspace, extra)
    paths += [str(state_dir), *(str(root) for root in recording_roots)]
    # Only what exists: mcp-console's sandbox creates a mount point for each entry and fails on a
    # missing parent. A secret created after the session started is the remasker's (``_remask``).
    # And no entry inside another (the sandbox cannot make a mount point inside a denied folder).
    existing = [p for p in dict.fromkeys(os.path.normpath(p) for p in paths) if os.path.lexists(p)]
    return [p for p in existing if not any(p.startswith(other + os.sep) for other in existing)]


@dataclass(frozen=True, slots=True)
class ProbeResult:
    readable: list[str]
    writable: list[str]
    checked: int


def probe_code(read_paths: Sequence[str], write_paths: Sequence[str]) -> str:
    """A Python cell that tries every read and write and prints one JSON line of what succeeded.

    Reads: open + read one byte for files, listdir for folders. Writes: exclusive create
    (removed again at once if it worked, so a broken sandbox is not left with junk).
    """
    spec = json.dumps({"read": list(read_paths), "write": list(write_paths)})
    return BRIDGE_CELL + (
        "def _cb_probe(spec):\n"
        "    import json as _j, os as _o\n"
        "    got = {'readable': [], 'writable': [], 'checked': 0}\n"
        "    for p in spec['read']:\n"
        "        got['checked'] += 1\n"
        "        try:\n"
        "            if _o.path.isdir(p):\n"
        "                _o.listdir(p)\n"
        "            else:\n"
        "                with open(p, 'rb') as f: f.read(1)\n"
        "            got['readable'].append(p)\n"
        "        except OSError:\n"
        "            pass\n"
        "    for p in spec['write']:\n"
        "        got['checked'] += 1\n"
        "        try:\n"
        "            fd = _o.open(p, _o.O_WRONLY | _o.O_CREAT | _o.O_EXCL, 0o600)\n"
        "            _o.close(fd); _o.unlink(p)\n"
        "            got['writable'].append(p)\n"
        "        except OSError:\n"
        "            pass\n"
        f"    print({PROBE_MARK!r} + _j.dumps(got))\n"
        f"_cb_probe({spec})\n"
        "del _cb_probe\n"
    )


def probe_code_for(language: str, read_paths: Sequence[str], write_paths: Sequence[str]) -> str:
    """The probe in ``language``. Python tries every read and write; SQL and R (for sessions
    without Python) try to read every file and report how many reads worked."""
    if language == "python":
        return probe_code(read_paths, write_paths)
    files = [p for p in read_paths if not os.path.isdir(p)]
    if language == "sql":
        listed = ", ".join("'" + p.replace("'", "''") + "'" for p in files) or "'/nonexistent'"
        return (
            f"select '{PROBE_MARK}' || json_object('readable', count(*), 'writable', [], 'checked', {len(files)}) "
            f"as probe from read_text([{listed}])"
        )
    quoted = ", ".join('"' + p.replace("\\", "\\\\").replace('"', '\\"') + '"' for p in files)
    return (
        f"local({{ n <- 0; for (p in c({quoted})) n <- n + isTRUE(tryCatch({{ con <- file(p, 'rb'); "
        "on.exit(close(con)); length(readBin(con, 'raw', 1)) >= 0 }, error = function(e) FALSE, "
        f'warning = function(w) FALSE)); cat(\'{PROBE_MARK}{{"readable": \', n, \', "writable": [], '
        f"\"checked\": {len(files)}}}\\n', sep = '') }})"
    )


def parse_probe(text: str) -> ProbeResult | None:
    for line in text.splitlines():
        line = line.strip().strip("|").strip()
        if line.startswith(PROBE_MARK):
            try:
                data = json.loads(line[len(PROBE_MARK) :])
                readable = data["readable"]
                if isinstance(readable, int):  # SQL and R report a count
                    readable = [f"{readable} denied file(s)"] if readable else []
                return ProbeResult(
                    readable=[str(p) for p in readable],
                    writable=[str(p) for p in data["writable"]],
                    checked=int(data["checked"]),
                )
            except (ValueError, KeyError, TypeError):
                return None
    return None
