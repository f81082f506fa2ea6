"""Strict parser for the sandbox policy that MCP Console advertises.

The last paragraph of the ``send`` tool description states the sandbox (same wording in
mcp-console 0.0.5 and 0.0.6; the captured texts and their launch arguments are in
``tests/data/sandbox_descriptions/``). Three shapes exist:

Sandboxed (exactly three sentences)::

    Evaluated code can read host files subject to configured restrictions and <NET>.
    Writable locations: <LIST>; subject to more specific read/deny rules.
    Package preparation may execute installation or build code with separate filesystem and
    network permissions; use only trusted dependencies.

    <NET>  = "cannot directly access the network"                               -> restricted
           | "can directly access the network"                                  -> enabled
           | "can access the network subject to the launcher's proxy settings"  -> proxy
    <LIST> = "none"
           | [TEMP] [", workspace"] {", " PATH}   (at least one item; ", " only between items)
    TEMP   = "private `TMPDIR`"              -> "tmpdir"    (tempdir managed, the default)
           | "host temporary directories"    -> "host_tmp"  (0.0.6 tempdir read_write)
    "workspace"                              -> "workspace" (0.0.6 profile workspace)
    PATH   = backtick, Rust Debug string literal of an absolute path, backtick
             (filesystem.read_write entries, then --writable-root paths, as given)

``--no-sandbox`` (two fixed sentences) and 0.0.6 ``sandbox.profile=inherit_codex`` (six fixed
sentences, which say nothing about the effective permissions) are recognised too.

Parsing fails closed: every sentence must be known, in the known order, separated by exactly one
space, with nothing before, after or in between. Anything else raises :class:`SandboxTextError`
(a ``ValueError``) naming the offending sentence. This module does no I/O.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Final, Literal

__all__ = [
    "HOST_TMP",
    "TMPDIR",
    "WORKSPACE",
    "Network",
    "SandboxPolicy",
    "SandboxTextError",
    "last_paragraph",
    "parse_sandbox_description",
    "split_sentences",
]

Network = Literal["restricted", "enabled", "proxy"]

TMPDIR: Final = "tmpdir"
"""Writable token: the server's private per-session ``TMPDIR`` (0.0.6 ``sandbox.tempdir=managed``)."""
HOST_TMP: Final = "host_tmp"
"""Writable token: the host's temporary directories (0.0.6 ``sandbox.tempdir=read_write``)."""
WORKSPACE: Final = "workspace"
"""Writable token: the launch directory, via 0.0.6 ``sandbox.profile=workspace``."""

_TOKEN_ORDER: Final[dict[str, int]] = {TMPDIR: 0, HOST_TMP: 1, WORKSPACE: 2}
_TOKEN_TEXT: Final[dict[str, str]] = {
    TMPDIR: "private TMPDIR",
    HOST_TMP: "host temporary directories",
    WORKSPACE: "workspace",
}
_NETWORKS: Final[tuple[Network, ...]] = ("restricted", "enabled", "proxy")


class SandboxTextError(ValueError):
    """The sandbox paragraph is not exactly one of the known texts.

    ``sentence`` is the offending sentence (``None`` when one is missing).
    """

    def __init__(self, message: str, *, sentence: str | None = None) -> None:
        super().__init__(message)
        self.sentence = sentence


@dataclass(frozen=True, slots=True)
class SandboxPolicy:
    """The sandbox as advertised by the server.

    ``writable`` holds the tokens ``"tmpdir"``, ``"host_tmp"``, ``"workspace"`` and absolute paths
    exactly as advertised (decoded from their quoting, never resolved or normalised).

    Not sandboxed (``--no-sandbox``): code runs with the server's own permissions; the policy is
    always ``network="enabled"`` and an empty ``writable`` (which here does NOT mean "nothing").

    ``inherit_codex``: the base sandbox comes from Codex metadata at the first call and the text
    states nothing verifiable; the policy is always ``network="enabled"`` (worst case, so it never
    reads as restricted) and an empty ``writable`` (which here means "unknown", not "nothing").
    """

    sandboxed: bool
    network: Network
    writable: frozenset[str]
    inherit_codex: bool = False

    def __post_init__(self) -> None:
        if self.network not in _NETWORKS:
            raise ValueError(f"network must be one of {_NETWORKS}, not {self.network!r}")
        if not isinstance(self.writable, frozenset):
            raise TypeError(f"writable must be a frozenset, not {type(self.writable).__name__}")
        for item in self.writable:
            if not isinstance(item, str) or (item not in _TOKEN_ORDER and not item.startswith("/")):
                raise ValueError(
                    f"writable item {item!r} is neither 'tmpdir', 'host_tmp', 'workspace' nor an absolute path"
                )
        if (not self.sandboxed or self.inherit_codex) and (self.network != "enabled" or self.writable):
            raise ValueError(
                "a policy without a sandbox, or inherited from Codex, has network='enabled' and no writable items"
            )
        if not self.sandboxed and self.inherit_codex:
            raise ValueError("inherit_codex requires sandboxed=True")

    @classmethod
    def no_sandbox(cls) -> SandboxPolicy:
        """The policy of the ``--no-sandbox`` text."""
        return cls(sandboxed=False, network="enabled", writable=frozenset())

    @classmethod
    def codex_inherited(cls) -> SandboxPolicy:
        """The policy of the 0.0.6 ``sandbox.profile=inherit_codex`` text."""
        return cls(sandboxed=True, network="enabled", writable=frozenset(), inherit_codex=True)

    def sorted_writable(self) -> list[str]:
        """``writable`` in a stable order: tmpdir, host_tmp, workspace, then paths sorted."""
        return sorted(self.writable, key=lambda item: (_TOKEN_ORDER.get(item, 3), item))

    def describe(self) -> str:
        """One human-readable line (paths JSON-quoted, so never a line break)."""
        if not self.sandboxed:
            return "no sandbox: code runs with the server's own filesystem and network permissions"
        if self.inherit_codex:
            return (
                "sandbox inherited from Codex metadata at the first call (fallback read_only); "
                "network and writable locations are not advertised"
            )
        network = {
            "restricted": "no network access",
            "enabled": "direct network access",
            "proxy": "network access through the launcher's proxy",
        }[self.network]
        items = [_TOKEN_TEXT.get(item) or json.dumps(item, ensure_ascii=False) for item in self.sorted_writable()]
        return f"sandboxed, {network}, writable: {', '.join(items) if items else 'none'}"

    def as_dict(self) -> dict[str, object]:
        """JSON-ready form; ``writable`` as a list in :meth:`sorted_writable` order."""
        return {
            "sandboxed": self.sandboxed,
            "network": self.network,
            "writable": self.sorted_writable(),
            "inherit_codex": self.inherit_codex,
        }


# --- the known sentences ----------------------------------------------------------------------

_READ_PREFIX: Final = "Evaluated code can read host files subject to configured restrictions and "
_READ_NETWORK: Final[dict[str, Network]] = {
    "cannot directly access the network.": "restricted",
    "can directly access the network.": "enabled",
    "can access the network subject to the launcher's proxy settings.": "proxy",
}
_WRITABLE_PREFIX: Final = "Writable locations: "
_WRITABLE_SUFFIX: Final = "; subject to more specific read/deny rules."
_PACKAGE: Final = (
    "Package preparation may execute installation or build code with separate filesystem and network "
    "permissions; use only trusted dependencies."
)
_NO_SANDBOX: Final[tuple[str, ...]] = (
    "Evaluated code runs without a sandbox, with the server's permissions, including filesystem and network access.",
    "Package preparation may execute installation or build code; use only trusted dependencies.",
)
_INHERIT_CODEX: Final[tuple[str, ...]] = (
    "The sandbox base comes from Codex metadata on the first send, or the configured fallback (default: read_only).",
    "Missing metadata is silent; malformed metadata warns on server stderr.",
    "Explicit Console permissions apply to the selected base.",
    "Full access disables Console's sandbox.",
    "Reconnect to change client permissions.",
    "Package preparation has separate permissions unless sandboxing is disabled; use only trusted dependencies.",
)

# One writable-list item. A path is a Rust ``Debug`` string literal between backticks: inside it
# only the escapes Rust emits for ``str`` are allowed and raw control characters are not.
_ESCAPE: Final = r"""\\(?:[\\"nrt0]|u\{[0-9a-fA-F]{1,6}\})"""
_ITEM_RE: Final = re.compile(
    r"(?P<tmpdir>private `TMPDIR`)"
    r"|(?P<host_tmp>host temporary directories)"
    r"|(?P<workspace>workspace)"
    rf"""|`"(?P<path>(?:[^"\\\x00-\x1f\x7f]|{_ESCAPE})*)"`"""
)
_ESCAPE_RE: Final = re.compile(_ESCAPE)
_SIMPLE_ESCAPES: Final[dict[str, str]] = {"\\": "\\", '"': '"', "n": "\n", "r": "\r", "t": "\t", "0": "\0"}
_GROUP_TOKEN: Final[dict[str, str]] = {"tmpdir": TMPDIR, "host_tmp": HOST_TMP, "workspace": WORKSPACE}
_GROUP_RANK: Final[dict[str, int]] = {"tmpdir": 0, "host_tmp": 0, "workspace": 1, "path": 2}


def last_paragraph(description: str) -> str:
    """The text after the last blank line (``"\\n\\n"``); the whole text if there is none.

    Nothing is stripped: trailing whitespace stays and is rejected by the parser.
    """
    return description.rsplit("\n\n", 1)[-1]


def split_sentences(paragraph: str) -> list[str]:
    """Split at ``". "`` and at a final ``"."``, but never inside a double-quoted path.

    Inside double quotes a backslash escapes the next character. Sentences keep their final
    period. Text after the last period is returned as a last (unterminated) sentence, and a
    trailing separator yields a last empty sentence, so that ``" ".join(result) == paragraph``.
    """
    sentences: list[str] = []
    start = 0
    in_quote = False
    index = 0
    length = len(paragraph)
    while index < length:
        char = paragraph[index]
        if in_quote:
            if char == "\\":
                index += 1
            elif char == '"':
                in_quote = False
        elif char == '"':
            in_quote = True
        elif char == "." and (index + 1 == length or paragraph[index + 1] == " "):
            sentences.append(paragraph[start : index + 1])
            start = index + 2
            if start == length:
                sentences.append("")
            index += 1
        index += 1
    if start < length:
        sentences.append(paragraph[start:])
    return sentences


def _decode_path(body: str, sentence: str) -> str:
    def replace(match: re.Match[str]) -> str:
        escape = match.group(0)
        if escape[1] != "u":
            return _SIMPLE_ESCAPES[escape[1]]
        code = int(escape[3:-1], 16)
        if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
            raise SandboxTextError(
                f"invalid escape {escape!r} in a writable path in sandbox sentence {sentence!r}",
                sentence=sentence,
            )
        return chr(code)

    path = _ESCAPE_RE.sub(replace, body)
    if not path.startswith("/"):
        raise SandboxTextError(
            f"writable path {path!r} is not absolute in sandbox sentence {sentence!r}", sentence=sentence
        )
    return path


def _parse_writable(sentence: str) -> frozenset[str]:
    if not (sentence.startswith(_WRITABLE_PREFIX) and sentence.endswith(_WRITABLE_SUFFIX)):
        raise SandboxTextError(f"expected the writable-locations sentence, got {sentence!r}", sentence=sentence)
    listing = sentence[len(_WRITABLE_PREFIX) : len(sentence) - len(_WRITABLE_SUFFIX)]
    if listing == "none":
        return frozenset()
    items: set[str] = set()
    position = 0
    last_rank = -1
    while True:
        match = _ITEM_RE.match(listing, position)
        if match is None:
            raise SandboxTextError(
                f"unknown writable location {listing[position:]!r} in sandbox sentence {sentence!r}",
                sentence=sentence,
            )
        group = match.lastgroup
        if group is None:  # pragma: no cover - every alternative is a named group
            raise SandboxTextError(f"unparsable writable location in {sentence!r}", sentence=sentence)
        rank = _GROUP_RANK[group]
        # Order is fixed: one temp item, then workspace, then paths (paths may repeat).
        if rank < last_rank or (rank == last_rank and rank < 2):
            raise SandboxTextError(
                f"writable location {match.group(0)!r} out of order in sandbox sentence {sentence!r}",
                sentence=sentence,
            )
        last_rank = rank
        if group == "path":
            items.add(_decode_path(match.group("path"), sentence))
        else:
            items.add(_GROUP_TOKEN[group])
        position = match.end()
        if position == len(listing):
            return frozenset(items)
        if not listing.startswith(", ", position):
            raise SandboxTextError(
                f"unexpected text {listing[position:]!r} after writable location {match.group(0)!r} "
                f"in sandbox sentence {sentence!r}",
                sentence=sentence,
            )
        position += 2


def _expect_fixed(sentences: list[str], expected: tuple[str, ...], what: str) -> None:
    for got, want in zip(sentences, expected, strict=False):
        if got != want:
            raise SandboxTextError(
                f"unknown sentence {got!r} in the {what} sandbox paragraph (expected {want!r})", sentence=got
            )
    _expect_count(sentences, expected, what)


def _expect_count(sentences: list[str], expected: tuple[str, ...], what: str) -> None:
    count = len(expected)
    if len(sentences) > count:
        extra = sentences[count]
        raise SandboxTextError(f"extra sentence {extra!r} in the {what} sandbox paragraph", sentence=extra)
    if len(sentences) < count:
        raise SandboxTextError(
            f"missing sentence in the {what} sandbox paragraph: expected {expected[len(sentences)]!r} "
            f"after {sentences[-1]!r}"
        )


def parse_sandbox_description(description: str) -> SandboxPolicy:
    """Parse the sandbox policy from a whole ``send`` description (or just its last paragraph).

    Raises :class:`SandboxTextError` (a ``ValueError``) unless the last paragraph is exactly one of
    the known texts.
    """
    paragraph = last_paragraph(description)
    sentences = split_sentences(paragraph)
    if not sentences:
        raise SandboxTextError("the sandbox paragraph (last paragraph of the description) is empty", sentence="")
    first = sentences[0]

    if first == _NO_SANDBOX[0]:
        _expect_fixed(sentences, _NO_SANDBOX, "--no-sandbox")
        return SandboxPolicy.no_sandbox()
    if first == _INHERIT_CODEX[0]:
        _expect_fixed(sentences, _INHERIT_CODEX, "inherit_codex")
        return SandboxPolicy.codex_inherited()

    network = _READ_NETWORK.get(first[len(_READ_PREFIX) :]) if first.startswith(_READ_PREFIX) else None
    if network is None:
        raise SandboxTextError(f"unknown sandbox sentence {first!r}", sentence=first)
    shape = (first, _WRITABLE_PREFIX + "...; subject to more specific read/deny rules.", _PACKAGE)
    if len(sentences) < 2:
        _expect_count(sentences, shape, "sandboxed")
    writable = _parse_writable(sentences[1])
    if len(sentences) < 3:
        _expect_count(sentences, shape, "sandboxed")
    if sentences[2] != _PACKAGE:
        raise SandboxTextError(
            f"unknown sentence {sentences[2]!r} in the sandboxed sandbox paragraph (expected {_PACKAGE!r})",
            sentence=sentences[2],
        )
    _expect_count(sentences, shape, "sandboxed")
    return SandboxPolicy(sandboxed=True, network=network, writable=writable)
