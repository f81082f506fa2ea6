"""``serve``'s bearer tokens from the command line: ``--tokens``, ``--token-file`` (vetted: yours,
0600, where no cell can read or rewrite it), or one made at start in a 0600 file of its own.

Who each token names and how they are looked up is ``_serve/_identity``'s; this module only reads
what the operator named and refuses it with the exit status a usage mistake gets.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shlex
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from console_bridge._errors import BridgeError
from console_bridge._serve._identity import Identities
from console_bridge._vetting._profiles import load_profile
from console_bridge._vetting._workspace import Evidence, vet_evidence
from console_bridge.cli._common import ExitCode, error_text, fail

__all__ = ["serving_identities", "vet_token_file"]


def vet_token_file(token_file: Path, workspace: Path, console_options: dict[str, Any]) -> None:
    """Refuse a --token-file others can read, or one inside the workspace or a writable root (a cell could
    read it, or rewrite it to a token of its choosing)."""
    path = token_file.expanduser().absolute()
    try:
        vet_evidence(
            [Evidence("bearer token file", path)],
            workspace,
            load_profile(console_options.get("profile", "read-only")),
            [Path(root) for root in console_options.get("writable_roots", ())],
        )
    except BridgeError as exc:
        fail(f"--token-file: {error_text(exc)}", ExitCode.LAUNCH)
    try:
        info = path.stat()
    except OSError as exc:
        fail(f"cannot read --token-file {str(path)!r}: {exc.strerror or exc}", ExitCode.USAGE)
    if info.st_uid != os.geteuid():
        fail(
            f"--token-file {str(path)!r} belongs to uid {info.st_uid}, not to you: its owner can read and change "
            "it. Use a token file of your own, mode 0600.",
            ExitCode.USAGE,
        )
    if info.st_mode & 0o077:
        fail(
            f"--token-file {str(path)!r} can be read or changed by others (mode {stat.S_IMODE(info.st_mode):04o}); "
            f"run `chmod 600 {shlex.quote(str(path))}` and start again",
            ExitCode.USAGE,
        )


@contextlib.contextmanager
def serving_identities(
    tokens: Path | None,
    token_file: Path | None,
    workspace: Path,
    console_options: dict[str, Any],
    info: Callable[[str], None],
) -> Iterator[Identities]:
    """The identities a server accepts while it runs: --tokens, --token-file, or one token made now in a
    0600 file of its own (removed when the server stops)."""
    if tokens is not None:
        yield Identities.from_file(tokens)
        return
    if token_file is not None:
        vet_token_file(token_file, workspace, console_options)
        try:
            token = token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            fail(f"cannot read --token-file {str(token_file)!r}: {exc.strerror or exc}", ExitCode.USAGE)
        if len(token) < 16:
            fail(f"the token in {str(token_file)!r} is shorter than 16 characters", ExitCode.USAGE)
        yield Identities.single(token)
        return
    token = secrets.token_urlsafe(32)
    fd, name = tempfile.mkstemp(prefix="console-bridge-serve-", suffix=".token")  # 0600, fresh name
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(token + "\n")
        info(f"bearer token written to {name} (mode 0600; removed when the server stops)")
        yield Identities.single(token)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(name)
