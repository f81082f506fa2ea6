"""Who a ``console-bridge serve`` HTTP client is: bearer tokens and the identity each one names.

``--tokens FILE`` holds one ``TOKEN OWNER`` per line (``#`` comments and blank lines are
skipped); the file must not be readable by group or others (0600), every token is at least
16 characters and unique, and an owner is one word. SIGHUP re-reads it: a file that no longer
parses is reported and the tokens in use are kept. Without ``--tokens`` there is one token
(``--token-file``, or one generated at start) and one identity, ``mcp-http``.

The identity is the console's :class:`Owner` (the audit log's owner), the unit of
``--max-per-client``, and what handles and MCP sessions are bound to. Tokens are compared by
their SHA-256 digest, so a lookup takes the same time whichever prefix matches.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from console_bridge import NotAllowed

__all__ = ["DEFAULT_IDENTITY", "MIN_TOKEN", "Identities", "parse_tokens"]

DEFAULT_IDENTITY = "mcp-http"
MIN_TOKEN = 16
_OWNER = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._@:+-]{0,127}\Z")


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


def parse_tokens(text: str, where: str) -> dict[bytes, str]:
    """``TOKEN OWNER`` lines -> {sha256(token): owner}; :class:`NotAllowed` names the bad line."""
    tokens: dict[bytes, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 2:
            raise NotAllowed(f"{where} line {number}: expected `TOKEN OWNER` (two words), got {len(parts)} word(s)")
        token, owner = parts
        if len(token) < MIN_TOKEN:
            raise NotAllowed(f"{where} line {number}: the token is shorter than {MIN_TOKEN} characters")
        if not _OWNER.match(owner):
            raise NotAllowed(
                f"{where} line {number}: owner {owner[:40]!r} must be letters, digits and ._@:+- (at most 128)"
            )
        key = _digest(token)
        if key in tokens:
            raise NotAllowed(
                f"{where} line {number}: this token is already given to {tokens[key]!r}; tokens are unique"
            )
        tokens[key] = owner
    if not tokens:
        raise NotAllowed(f"{where} holds no `TOKEN OWNER` line; add one per client")
    return tokens


def read_private(path: Path, what: str) -> str:
    """The text of ``path``, refused when group or others may read or write it (with the fix)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise NotAllowed(f"cannot read {what} {str(path)!r}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotAllowed(f"{what} {str(path)!r} is not a regular file")
        if info.st_mode & 0o077:
            raise NotAllowed(
                f"{what} {str(path)!r} is readable by others (mode {stat.S_IMODE(info.st_mode):04o}); "
                f"run `chmod 600 {path}`"
            )
        with os.fdopen(fd, "r", encoding="utf-8", closefd=False) as handle:
            return handle.read()
    finally:
        os.close(fd)


@dataclass(eq=False)
class Identities:
    """The tokens a server accepts; :meth:`authenticate` maps an ``Authorization`` header to an owner."""

    tokens: dict[bytes, str]
    path: Path | None = None
    reloads: int = field(default=0)

    @classmethod
    def single(cls, token: str, owner: str = DEFAULT_IDENTITY) -> Identities:
        return cls(tokens={_digest(token): owner})

    @classmethod
    def from_file(cls, path: Path) -> Identities:
        return cls(tokens=parse_tokens(read_private(path, "--tokens file"), f"--tokens {path}"), path=path)

    def authenticate(self, header: str | None) -> str | None:
        """The identity ``Authorization: Bearer TOKEN`` names (the scheme in any case, RFC 7235), or None."""
        scheme, _space, token = (header or "").strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        return self.tokens.get(_digest(token.strip()))

    def reload(self) -> str:
        """Re-read the tokens file; on failure keep the tokens in use. Returns what happened, in words."""
        if self.path is None:
            return "no --tokens file to reload"
        try:
            tokens = parse_tokens(read_private(self.path, "--tokens file"), f"--tokens {self.path}")
        except NotAllowed as exc:
            return f"tokens not reloaded, the previous {len(self.tokens)} stay in use: {exc.message}"
        self.tokens = tokens
        self.reloads += 1
        return f"tokens reloaded from {self.path}: {len(tokens)} token(s), {len(set(tokens.values()))} identity(ies)"
