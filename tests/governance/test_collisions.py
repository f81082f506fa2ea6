"""Name collisions: two servers offering the same tool names are told apart by prefixes."""

from __future__ import annotations

from pathlib import Path

import pytest

from console_bridge import NotAllowed, Policy

from .support import calls, connected, methods

pytestmark = pytest.mark.anyio


async def test_prefixes_keep_two_servers_with_the_same_tools_apart(tmp_path: Path) -> None:
    log_a, log_b = tmp_path / "a.log", tmp_path / "b.log"
    policy = Policy(pin_schemas="off")
    async with (
        connected(
            "wellbehaved.py", tools=["echo"], resources=("note://alpha",), policy=policy, log=log_a, name="docs"
        ) as docs,
        connected(
            "wellbehaved.py", tools=["echo"], resources=("note://beta",), policy=policy, log=log_b, name="wiki"
        ) as wiki,
    ):
        assert [h.name for h in docs.tools()] == ["echo"] == [h.name for h in wiki.tools()]  # the collision
        handles = {h.name: h for h in [*docs.tools(prefix="docs"), *wiki.tools(prefix="wiki")]}
        assert set(handles) == {"docs_echo", "wiki_echo"}
        assert (handles["docs_echo"].tool, handles["docs_echo"].server) == ("echo", "docs")
        assert (handles["wiki_echo"].tool, handles["wiki_echo"].server) == ("echo", "wiki")
        assert (await handles["docs_echo"]({"text": "to docs"})).text == "to docs"
        assert (await handles["wiki_echo"]({"text": "to wiki"})).text == "to wiki"
        assert (await handles["wiki_echo"]({"text": "again"})).server == "wiki"

        capabilities = {h.name: h for h in [*docs.capability_tools("docs"), *wiki.capability_tools("wiki")]}
        assert set(capabilities) == {"docs_read_resource", "wiki_read_resource"}
        assert (await capabilities["docs_read_resource"]({"uri": "note://alpha"})).text == "alpha text"
        assert (await capabilities["wiki_read_resource"]({"uri": "note://beta"})).text == "beta text"
        with pytest.raises(NotAllowed):
            await capabilities["docs_read_resource"]({"uri": "note://beta"})
    assert calls(log_a) == ["echo"] and calls(log_b) == ["echo", "echo"], "each handle calls its own server"
    assert "resources/read note://alpha" in methods(log_a) and "resources/read note://beta" in methods(log_b)


@pytest.mark.parametrize("prefix", ["", "has space", "x" * 51, "dot.ted", "sl/ash"])
async def test_bad_prefixes_are_refused(prefix: str) -> None:
    async with connected("poisoned.py", tools=["clean"]) as conn:
        with pytest.raises(NotAllowed, match="prefix"):
            conn.tools(prefix=prefix)
        with pytest.raises(NotAllowed, match="prefix"):
            conn.capability_tools(prefix=prefix)
        assert [h.name for h in conn.tools(prefix="a-1_B")] == ["a-1_B_clean"]
