"""Poisoned-description defence: scan untrusted tool text against a pattern set kept as data.

The pattern set lives in ``patterns.yaml`` beside this module (one file, readable
regular expressions, each with a line saying what it catches). Everything here is
pure: no I/O beyond reading that file once, and no exceptions for any input text.
"""

from __future__ import annotations

import copy
import functools
import html
import re
import unicodedata
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

__all__ = [
    "SCHEMA_TEXT_KEYS",
    "Pattern",
    "load_patterns",
    "neutral_description",
    "normalize",
    "sanitize_schema",
    "scan_text",
    "scan_tool",
]

#: Pattern name reported for text longer than the policy's ``max_description_chars``.
TOO_LONG = "too_long"
#: Pattern name reported for a description that is not a string at all.
NOT_TEXT = "not_text"
#: At most this many characters of one text are matched (bounds the CPU a hostile server can cost);
#: longer text is flagged ``too_long`` anyway.
SCAN_LIMIT = 16_384
#: Schema keys whose string values are shown to models and therefore scanned.
SCHEMA_TEXT_KEYS = ("description", "title", "enum", "const", "default", "examples")
#: What a flagged description or title inside a schema is replaced by.
WITHHELD = "(withheld by console-bridge: this text matched prompt-injection patterns)"

_HSPACE = re.compile(r"[^\S\n]+")
_BREAKS = re.compile(r"\s*\n\s*")
_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201b": "'", "\u201c": '"', "\u201d": '"', "\u00b4": "'"})


@dataclass(frozen=True, slots=True)
class Pattern:
    """One named entry of ``patterns.yaml``."""

    name: str
    about: str
    regexes: tuple[re.Pattern[str], ...]
    raw: bool = False

    def search(self, raw: str, normalized: str) -> bool:
        text = raw if self.raw else normalized
        return any(regex.search(text) for regex in self.regexes)


_FRAGMENT = re.compile(r"\{\{(\w+)\}\}")


def parse_patterns(text: str) -> tuple[Pattern, ...]:
    """Parse the YAML pattern set; raises ``ValueError`` naming the bad entry.

    The optional ``fragments`` entry maps names to regex pieces that the patterns
    reuse as ``{{name}}``.
    """
    data = yaml.safe_load(text)
    if not isinstance(data, Mapping) or not data:
        raise ValueError("the pattern set must be a non-empty mapping of name -> {about, match}")
    data = dict(data)
    fragments = data.pop("fragments", None) or {}
    if not isinstance(fragments, Mapping):
        raise ValueError("'fragments' must map names to regular-expression pieces")

    def expand(name: object, regex: object) -> str:
        def piece(match: re.Match[str]) -> str:
            if match.group(1) not in fragments:
                raise ValueError(f"pattern {name!r} uses the unknown fragment {{{{{match.group(1)}}}}}")
            return str(fragments[match.group(1)])

        return _FRAGMENT.sub(piece, str(regex))

    patterns = []
    for name, entry in data.items():
        if not isinstance(entry, Mapping) or not isinstance(entry.get("match"), list) or not entry["match"]:
            raise ValueError(f"pattern {name!r} needs a non-empty 'match' list of regular expressions")
        try:
            regexes = tuple(re.compile(expand(name, rx), re.IGNORECASE) for rx in entry["match"])
        except re.error as exc:
            raise ValueError(f"pattern {name!r} has an invalid regular expression: {exc}") from None
        patterns.append(Pattern(str(name), str(entry.get("about", "")), regexes, bool(entry.get("raw", False))))
    return tuple(patterns)


@functools.cache
def load_patterns() -> tuple[Pattern, ...]:
    """The compiled pattern set from ``patterns.yaml`` (read once)."""
    text = resources.files("console_bridge._governance").joinpath("patterns.yaml").read_text(encoding="utf-8")
    return parse_patterns(text)


def normalize(text: str) -> str:
    """What the non-raw patterns see: NFKC, entities decoded, format characters gone, spaces folded."""
    text = unicodedata.normalize("NFKC", html.unescape(text))
    text = "".join(ch for ch in text if unicodedata.category(ch) != "Cf").translate(_QUOTES)
    return _BREAKS.sub("\n", _HSPACE.sub(" ", text)).strip()


def scan_text(text: object, *, max_chars: int) -> list[str]:
    """Names of the patterns ``text`` matches, in pattern-file order.

    ``too_long`` is added when the text is longer than ``max_chars``; ``not_text`` when
    it is not a string. Never raises for any string.
    """
    if not isinstance(text, str):
        return [NOT_TEXT]
    raw = text[:SCAN_LIMIT]
    normalized = normalize(raw)
    hits = [pattern.name for pattern in load_patterns() if pattern.search(raw, normalized)]
    if len(text) > max_chars:
        hits.append(TOO_LONG)
    return hits


def _schema_texts(schema: Any, path: str) -> Iterator[tuple[str, str]]:
    """Every model-facing string inside a JSON schema, with where it sits."""
    if isinstance(schema, Mapping):
        for key, value in schema.items():
            where = f"{path}.{key}"
            if key in SCHEMA_TEXT_KEYS and isinstance(value, str):
                yield where, value
            elif key in SCHEMA_TEXT_KEYS and isinstance(value, list) and all(isinstance(v, str) for v in value):
                for index, item in enumerate(value):
                    yield f"{where}[{index}]", item
            else:
                yield from _schema_texts(value, where)
    elif isinstance(schema, list):
        for index, value in enumerate(schema):
            yield from _schema_texts(value, f"{path}[{index}]")


def _tool_texts(tool: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    for key in ("description", "title"):
        value = tool.get(key)
        if value is not None:
            yield key, value
    annotations = tool.get("annotations")
    if isinstance(annotations, Mapping) and isinstance(annotations.get("title"), str):
        yield "annotations.title", annotations["title"]
    yield from _schema_texts(tool.get("inputSchema"), "inputSchema")
    yield from _schema_texts(tool.get("outputSchema"), "outputSchema")


def scan_tool(tool: Mapping[str, Any], *, max_chars: int) -> list[str]:
    """Flags for a tool definition (wire names), as ``"<where>: <pattern>"`` strings.

    ``where`` is ``description``, ``title``, ``annotations.title`` or a path into a
    schema such as ``inputSchema.properties.notes.description``.
    """
    flags: list[str] = []
    for where, text in _tool_texts(tool):
        flags.extend(f"{where}: {hit}" for hit in scan_text(text, max_chars=max_chars))
    return flags


def sanitize_schema(schema: Any, *, max_chars: int) -> Any:
    """A copy of ``schema`` whose flagged ``description``/``title`` strings are withheld.

    Validation keywords are never touched, so the schema accepts exactly what it did.
    """

    def clean(node: Any) -> Any:
        if isinstance(node, dict):
            out = {}
            for key, value in node.items():
                if key in ("description", "title") and isinstance(value, str):
                    out[key] = WITHHELD if scan_text(value, max_chars=max_chars) else value
                else:
                    out[key] = clean(value)
            return out
        if isinstance(node, list):
            return [clean(item) for item in node]
        return copy.copy(node)

    return clean(schema)


def neutral_description(name: str, server: str) -> str:
    """What a model sees instead of a flagged description."""
    return (
        f"Tool '{name}' of server '{server}'. Its original description was withheld because it "
        "matched prompt-injection patterns; calls need host approval."
    )
