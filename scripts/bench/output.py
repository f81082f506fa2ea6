"""The table of figures and the targets' verdicts."""

from __future__ import annotations

from typing import Any

from .settings import TARGETS


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    if unit == "count" or unit == "calls":
        return f"{value:g}"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def table(metrics: dict[str, dict[str, Any]]) -> str:
    rows = [("metric", "raw", "bridge", "ratio bridge/raw")]
    for m in metrics.values():
        ratio = "n/a" if m["ratio"] is None else f"{m['ratio']:.3f}"
        rows.append((f"{m['label']} [{m['unit']}]", fmt(m["raw"], m["unit"]), fmt(m["bridge"], m["unit"]), ratio))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = []
    for index, row in enumerate(rows):
        lines.append(
            "| "
            + " | ".join(cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(row))
            + " |"
        )
        if index == 0:
            lines.append("|" + "|".join("-" * (w + 1) + (":" if i else "-") for i, w in enumerate(widths)) + "|")
    return "\n".join(lines)


def evaluate_targets(metrics: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {}
    for key, (description, where, threshold) in TARGETS.items():
        metric, _, column = where.partition(":")
        value = metrics.get(metric, {}).get(column)
        out[key] = {
            "description": description,
            "metric": metric,
            "column": column,
            "threshold": threshold,
            "value": value,
            "met": None if value is None else value <= threshold,
        }
    return out
