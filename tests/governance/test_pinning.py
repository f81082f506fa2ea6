"""Schema pinning fingerprints: canonical (key order never matters), and sensitive to every pinned field."""

from __future__ import annotations

import hashlib
import json
import random
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from console_bridge._governance._pinning import PINNED_FIELDS, canonical_json, tool_fingerprint

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=8,
)
tools = st.fixed_dictionaries(
    {
        "name": st.text(min_size=1, max_size=20),
        "inputSchema": st.dictionaries(st.text(max_size=8), json_values, max_size=3),
    },
    optional={
        "title": st.text(),
        "description": st.text(),
        "outputSchema": st.dictionaries(st.text(max_size=8), json_values),
        "annotations": st.dictionaries(st.text(max_size=12), json_scalars),
    },
)


def shuffled(value: Any, rng: random.Random) -> Any:
    """The same JSON value with every object's keys in another order."""
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {key: shuffled(item, rng) for key, item in items}
    if isinstance(value, list):
        return [shuffled(item, rng) for item in value]
    return value


@SETTINGS
@given(tools, st.randoms(use_true_random=False))
def test_key_order_never_changes_the_fingerprint(tool: dict[str, Any], rng: random.Random) -> None:
    assert tool_fingerprint(shuffled(tool, rng)) == tool_fingerprint(tool)


@SETTINGS
@given(tools, st.sampled_from(PINNED_FIELDS), json_values)
def test_any_change_to_a_pinned_field_changes_the_fingerprint(tool: dict[str, Any], key: str, new: Any) -> None:
    changed = {**tool, key: new}
    if canonical_json(changed.get(key)) == canonical_json(tool.get(key)):
        return  # not a change (the same value, or null for an absent field)
    assert tool_fingerprint(changed) != tool_fingerprint(tool)


@SETTINGS
@given(tools, st.sampled_from(PINNED_FIELDS), st.text(min_size=1, max_size=8), json_values)
def test_a_change_deep_inside_a_pinned_field_changes_the_fingerprint(
    tool: dict[str, Any], key: str, inner_key: str, new: Any
) -> None:
    base = {"type": "object", "properties": {"p": {"description": "a parameter"}}}
    tool = {**tool, key: base}
    changed = {**tool, key: {**base, "properties": {"p": {"description": "a parameter", inner_key: new}}}}
    assert tool_fingerprint(changed) != tool_fingerprint(tool)


@SETTINGS
@given(tools, st.sampled_from(["_meta", "icons", "execution", "x-vendor"]), json_values)
def test_fields_that_are_not_pinned_are_ignored(tool: dict[str, Any], key: str, value: Any) -> None:
    assert tool_fingerprint({**tool, key: value}) == tool_fingerprint(tool)


def test_pinned_fields_are_the_full_definition() -> None:
    assert set(PINNED_FIELDS) == {"name", "title", "description", "inputSchema", "outputSchema", "annotations"}


def test_fingerprint_is_sha256_of_canonical_json() -> None:
    tool = {"name": "t", "description": "Tëst", "inputSchema": {"type": "object", "properties": {}}}
    expected = json.dumps(
        {
            "annotations": None,
            "description": "Tëst",
            "inputSchema": {"properties": {}, "type": "object"},
            "name": "t",
            "outputSchema": None,
            "title": None,
        },
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    assert tool_fingerprint(tool) == hashlib.sha256(expected.encode()).hexdigest()
    assert canonical_json({"b": 1, "a": [1, {"d": 2, "c": 3}]}) == '{"a":[1,{"c":3,"d":2}],"b":1}'


def test_an_absent_field_pins_like_null() -> None:
    assert tool_fingerprint({"name": "t"}) == tool_fingerprint({"name": "t", "title": None, "annotations": None})


def test_subtle_changes_are_changes() -> None:
    tool = {"name": "t", "description": "Read a file.", "inputSchema": {"type": "object"}, "annotations": {}}
    for variant in (
        {**tool, "description": "Read a file. "},
        {**tool, "description": "Read a file\u200b."},
        {**tool, "annotations": {"readOnlyHint": True}},
        {**tool, "inputSchema": {"type": "object", "additionalProperties": False}},
        {**tool, "title": "Read"},
    ):
        assert tool_fingerprint(variant) != tool_fingerprint(tool), variant


@SETTINGS
@given(st.recursive(json_scalars | st.floats(), lambda i: st.lists(i) | st.dictionaries(st.text(), i), max_leaves=10))
def test_fingerprint_never_raises(value: Any) -> None:
    assert len(tool_fingerprint({"name": "t", "inputSchema": value})) == 64
