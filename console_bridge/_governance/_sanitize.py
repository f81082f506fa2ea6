"""Poisoned-description defence: scan untrusted tool text against a pattern set kept as data."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping
from importlib import resources
from typing import Any

import yaml

__all__ = ["load_patterns", "neutral_description", "scan_text", "scan_tool"]

_WHITESPACE = re.compile(r"\s+")


@functools.cache
def load_patterns() -> dict[str, re.Pattern[str]]:
    """The compiled pattern set from ``patterns.yaml``."""
    text = resources.files("console_bridge._governance").joinpath("patterns.yaml").read_text(encoding="utf-8")
    raw = yaml.safe_load(text)
    return {str(name): re.compile(str(rx), re.IGNORECASE) for name, rx in raw.items()}


def scan_text(text: str, *, max_chars: int) -> list[str]:
    """Names of the patterns ``text`` matches (``too_long`` when over ``max_chars``)."""
    if not isinstance(text, str):
        return ["not_text"]
    hits = []
    folded = _WHITESPACE.sub(" ", text)
    for name, pattern in load_patterns().items():
        if pattern.search(folded if name != "invisible_characters" else text):
            hits.append(name)
    if len(text) > max_chars:
        hits.append("too_long")
    return hits


def _schema_texts(schema: Any, path: str) -> Iterator[tuple[str, str]]:
    """Every description/title string inside a JSON schema, with where it sits."""
    if isinstance(schema, Mapping):
        for key, value in schema.items():
            where = f"{path}.{key}"
            if key in ("description", "title") and isinstance(value, str):
                yield where, value
            else:
                yield from _schema_texts(value, where)
    elif isinstance(schema, list):
        for index, value in enumerate(schema):
            yield from _schema_texts(value, f"{path}[{index}]")


def scan_tool(tool: Mapping[str, Any], *, max_chars: int) -> list[str]:
    """Flags for a tool definition (wire names), as ``"<field>: <pattern>"`` strings."""
    texts: list[tuple[str, str]] = []
    for key in ("description", "title"):
        value = tool.get(key)
        if isinstance(value, str):
            texts.append((key, value))
    texts.extend(_schema_texts(tool.get("inputSchema"), "inputSchema"))
    texts.extend(_schema_texts(tool.get("outputSchema"), "outputSchema"))
    flags: list[str] = []
    for where, text in texts:
        flags.extend(f"{where}: {hit}" for hit in scan_text(text, max_chars=max_chars))
    return flags


def neutral_description(name: str, server: str) -> str:
    """What a model sees instead of a flagged description."""
    return (
        f"Tool '{name}' of server '{server}'. Its original description was withheld because it "
        "matched prompt-injection patterns; calls need host approval."
    )
