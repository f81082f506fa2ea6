"""Output caps: text plus encoded binary stays within max_bytes, and every cut is visible."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from console_bridge._governance._caps import MARKER_RESERVE, block_size, cap_content, cap_result, json_size

SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MARKER = "[console-bridge: output truncated"


def total(blocks: list[dict[str, Any]]) -> int:
    return sum(block_size(block) for block in blocks)


def image(size: int, mime: str = "image/png") -> dict[str, Any]:
    return {"type": "image", "mimeType": mime, "data": "A" * size}


def test_content_under_the_cap_is_returned_untouched() -> None:
    content = [{"type": "text", "text": "hello"}, image(100)]
    capped, truncated = cap_content(content, 1024)
    assert capped is content and not truncated


def test_five_megabytes_of_text_are_cut_with_a_marker() -> None:
    text = "0123456789abcdef" * (5 * 1024 * 1024 // 16)
    capped, truncated = cap_content([{"type": "text", "text": text}], 1_000_000)
    assert truncated
    assert total(capped) <= 1_000_000
    assert text.startswith(capped[0]["text"]) and len(capped[0]["text"]) > 990_000
    assert capped[-1]["text"].startswith(MARKER)
    assert f"{len(text) - len(capped[0]['text'])} bytes of text cut" in capped[-1]["text"]


def test_a_result_that_is_only_an_oversized_image_becomes_a_notice() -> None:
    capped, truncated = cap_content([image(2_000_000)], 1_000_000)
    assert truncated
    assert len(capped) == 1 and capped[0]["type"] == "text"
    assert "image (image/png, 2000000 bytes)" in capped[0]["text"]
    assert capped[0]["text"].startswith(MARKER)


def test_small_blocks_survive_and_order_is_kept_around_a_withheld_one() -> None:
    content = [{"type": "text", "text": "before"}, image(50_000), image(10), {"type": "text", "text": "after"}]
    capped, truncated = cap_content(content, 2048)
    assert truncated
    assert capped[:3] == [content[0], content[2], content[3]]
    assert "withheld 1 block(s): image (image/png, 50000 bytes)" in capped[3]["text"]


def test_multibyte_text_is_never_cut_inside_a_character() -> None:
    capped, _ = cap_content([{"type": "text", "text": "ä€😀" * 1000}], 1024)
    capped[0]["text"].encode("utf-8")  # valid: no half characters
    assert total(capped) <= 1024


def test_many_withheld_blocks_still_fit_with_one_short_marker() -> None:
    capped, truncated = cap_content([image(5000, f"image/x-{i}") for i in range(200)], 1024)
    assert truncated and total(capped) <= 1024
    assert "withheld 200 block(s)" in capped[-1]["text"] and "and 197 more" in capped[-1]["text"]


def test_sizes_count_encoded_bytes() -> None:
    assert block_size({"type": "text", "text": "é"}) == 2
    assert block_size(image(7)) == 7
    assert block_size({"type": "audio", "data": "QUJD"}) == 4
    assert block_size({"type": "resource", "resource": {"uri": "x://", "blob": "QUJD", "text": "hi"}}) == 6
    link = {"type": "resource_link", "uri": "file:///x", "name": "x"}
    assert block_size(link) == json_size(link)


def test_oversized_structured_content_is_withheld_visibly() -> None:
    structured = {"rows": ["x" * 100] * 50}
    result = cap_result([{"type": "text", "text": "ok"}], structured, 1024)
    assert result.structured is None and result.truncated
    assert "structured content" in result.content[-1]["text"]
    assert total(result.content) <= 1024
    small = cap_result([{"type": "text", "text": "ok"}], {"sum": 3}, 1024)
    assert small.structured == {"sum": 3} and not small.truncated


def test_too_small_a_cap_is_refused() -> None:
    with pytest.raises(ValueError):
        cap_content([], 2 * MARKER_RESERVE - 1)


def kept_from(block: dict[str, Any], original: dict[str, Any]) -> bool:
    if block["type"] == "text" == original["type"]:
        return bool(original["text"].startswith(block["text"]))
    return block == original


blocks = st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, st.text(max_size=3000)),
    st.builds(
        lambda n, m: {"type": "image", "mimeType": m, "data": base64.b64encode(b"x" * n).decode()},
        st.integers(0, 4000),
        st.sampled_from(["image/png", "image/jpeg"]),
    ),
    st.builds(lambda n: {"type": "audio", "mimeType": "audio/wav", "data": "A" * n}, st.integers(0, 3000)),
    st.builds(lambda u: {"type": "resource_link", "uri": u, "name": "r"}, st.text(max_size=200)),
)


@SETTINGS
@given(st.lists(blocks, max_size=8), st.integers(min_value=1024, max_value=12_000))
def test_cap_is_never_exceeded_and_every_cut_is_marked(content: list[dict[str, Any]], max_bytes: int) -> None:
    capped, truncated = cap_content(content, max_bytes)
    assert truncated == (total(content) > max_bytes)
    assert total(capped) <= max_bytes
    if truncated:
        assert capped[-1]["type"] == "text" and capped[-1]["text"].startswith(MARKER)
        originals = iter(content)
        for block in capped[:-1]:  # kept blocks are a subsequence of the originals (text possibly cut)
            assert any(kept_from(block, original) for original in originals), block
    else:
        assert capped == content
