"""Medians and percentiles."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile, ``q`` in (0, 1]."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def p95(values: list[float]) -> float | None:
    return percentile(values, 0.95)


def to_ms(values: Iterable[float]) -> list[float]:
    return [round(v * 1000.0, 4) for v in values]
