"""Load the description corpora under tests/data/descriptions/ (see the README there)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

CORPORA = Path(__file__).resolve().parent.parent / "data" / "descriptions"


@dataclass(frozen=True)
class Sample:
    """One corpus entry, turned into a tool definition (wire names) for the scanner."""

    id: str
    description: str | None
    params: dict[str, str] = field(default_factory=dict)
    expect: tuple[str, ...] = ()

    def tool(self) -> dict[str, Any]:
        properties = {name: {"type": "string", "description": text} for name, text in self.params.items()}
        tool: dict[str, Any] = {"name": self.id.replace("/", "_"), "inputSchema": {"type": "object"}}
        if properties:
            tool["inputSchema"]["properties"] = properties
        if self.description is not None:
            tool["description"] = self.description
        return tool


def load(kind: str) -> list[Sample]:
    """Every sample of ``clean`` or ``poisoned``, from ``*.yaml`` lists and ``*.txt`` files."""
    folder = CORPORA / kind
    samples: list[Sample] = []
    for path in sorted(folder.glob("*.yaml")):
        for index, entry in enumerate(yaml.safe_load(path.read_text(encoding="utf-8"))):
            name = entry.get("id") or f"{entry['server']}/{entry['tool']}"
            samples.append(
                Sample(
                    id=f"{path.stem}:{name}" if "id" in entry else name,
                    description=entry.get("description"),
                    params=dict(entry.get("params") or {}),
                    expect=tuple(entry.get("expect") or ()),
                )
            )
            assert samples[-1].description or samples[-1].params, f"{path}[{index}] is empty"
    for path in sorted(folder.glob("*.txt")):
        text = path.read_text(encoding="utf-8")
        expect: tuple[str, ...] = ()
        if text.startswith("# expect:"):
            header, text = text.split("\n", 1)
            expect = tuple(part.strip() for part in header.removeprefix("# expect:").split(","))
        samples.append(Sample(id=path.name, description=text, expect=expect))
    return samples
