"""The strict parser of the sandbox paragraph of MCP Console's ``send`` description.

The texts under ``tests/data/sandbox_descriptions/`` were captured from the real binaries
(0.0.5 and 0.0.6); ``INDEX.md`` there records the launch arguments of each file.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from console_bridge._vetting._sandbox import (
    Network,
    SandboxPolicy,
    SandboxTextError,
    last_paragraph,
    parse_sandbox_description,
    split_sentences,
)

DATA = Path(__file__).parent / "data" / "sandbox_descriptions"
R = "/tmp/cb-sbx-capture"  # the capture tree: launch dir R/ws, HOME R/home, roots under R/roots
A = f"{R}/roots/a"
BC = f"{R}/roots/b c"
WS = f"{R}/ws"

SETTINGS = settings(database=None, deadline=None, max_examples=300, suppress_health_check=[HealthCheck.too_slow])


def sb(network: Network, *writable: str) -> SandboxPolicy:
    return SandboxPolicy(sandboxed=True, network=network, writable=frozenset(writable))


NO_SANDBOX = SandboxPolicy(sandboxed=False, network="enabled", writable=frozenset())
INHERIT = SandboxPolicy(sandboxed=True, network="enabled", writable=frozenset(), inherit_codex=True)
WEIRD = (
    f"{R}/roots/back`tick",
    f"{R}/roots/back\\slash",
    f"{R}/roots/ünï côde",
    f"{R}/roots/new\nline",
    f"{R}/roots/a. Evaluated code runs",
    f'{R}/roots/x", "/etc',
    f"{R}/roots/y`; subject to more specific read/deny rules. Package",
)

# Written by hand from the launch arguments in INDEX.md, not derived from the parser.
EXPECTED: dict[str, SandboxPolicy] = {}
for _version in ("0.0.5", "0.0.6"):
    EXPECTED.update(
        {
            f"{_version}__default.txt": sb("restricted", "tmpdir"),
            f"{_version}__default_norequirements.txt": sb("restricted", "tmpdir"),
            f"{_version}__python_only.txt": sb("restricted", "tmpdir"),
            f"{_version}__network_restricted_explicit.txt": sb("restricted", "tmpdir"),
            f"{_version}__network_enabled.txt": sb("enabled", "tmpdir"),
            f"{_version}__network_proxy.txt": sb("proxy", "tmpdir"),
            f"{_version}__network_proxy_dotted.txt": sb("proxy", "tmpdir"),
            f"{_version}__network_proxy_limited.txt": sb("proxy", "tmpdir"),
            f"{_version}__network_proxy_empty_allow.txt": sb("proxy", "tmpdir"),
            f"{_version}__writable_root_one.txt": sb("restricted", "tmpdir", A),
            f"{_version}__writable_root_two.txt": sb("restricted", "tmpdir", A, BC),
            f"{_version}__writable_root_quotes.txt": sb("restricted", "tmpdir", f"{R}/roots/q\"uo'te"),
            f"{_version}__writable_root_duplicate.txt": sb("restricted", "tmpdir", A),
            # As given, not resolved: `..`, trailing `/` and `//` stay; `./` goes; relative -> launch dir.
            f"{_version}__writable_root_unnormalised.txt": sb(
                "restricted",
                "tmpdir",
                f"{R}/roots/a/../b c",
                f"{R}/roots/a/",
                f"/{R}/roots/a",
                A,
                f"{WS}/rel",
                WS,
            ),
            f"{_version}__writable_root_weird.txt": sb("restricted", "tmpdir", *WEIRD),
            f"{_version}__fs_read_write_one.txt": sb("restricted", "tmpdir", WS),
            f"{_version}__fs_read_write_dot.txt": sb("restricted", "tmpdir", WS),
            f"{_version}__fs_read_write_two.txt": sb("restricted", "tmpdir", A, BC),
            f"{_version}__fs_read_only_deny.txt": sb("restricted", "tmpdir"),
            f"{_version}__fs_read_write_and_root.txt": sb("restricted", "tmpdir", A, BC),
            f"{_version}__fs_read_write_deny_same.txt": sb("restricted", "tmpdir", A),
            f"{_version}__no_sandbox.txt": NO_SANDBOX,
            # Launched with --no-sandbox but tool.description replaced the whole text: the parser
            # cannot see through that; only controlling every config layer can.
            f"{_version}__spoofed_description_no_sandbox.txt": sb("restricted", "tmpdir"),
        }
    )
EXPECTED.update(
    {
        "0.0.5__fs_read_write_tilde.txt": sb("restricted", "tmpdir", f"{WS}/~/x"),
        "0.0.6__fs_read_write_tilde.txt": sb("restricted", "tmpdir", f"{R}/home/x"),
        "0.0.6__profile_read_only.txt": sb("restricted", "tmpdir"),
        "0.0.6__profile_workspace.txt": sb("restricted", "tmpdir", "workspace"),
        "0.0.6__profile_workspace_in_home.txt": sb("restricted", "tmpdir"),  # refused, fell back to read_only
        "0.0.6__profile_workspace_network_enabled.txt": sb("enabled", "tmpdir", "workspace"),
        "0.0.6__profile_workspace_roots.txt": sb("restricted", "tmpdir", "workspace", A, BC),
        "0.0.6__profile_inherit_codex.txt": INHERIT,
        "0.0.6__profile_inherit_codex_fallback_workspace.txt": INHERIT,
        "0.0.6__profile_inherit_codex_extras.txt": INHERIT,
        "0.0.6__tempdir_managed.txt": sb("restricted", "tmpdir"),
        "0.0.6__tempdir_read_write.txt": sb("restricted", "host_tmp"),
        "0.0.6__tempdir_read_only.txt": sb("restricted"),
        "0.0.6__tempdir_read_only_root.txt": sb("restricted", A),
        "0.0.6__profile_workspace_tempdir_read_only.txt": sb("restricted", "workspace"),
        "0.0.6__profile_workspace_tempdir_read_write.txt": sb("restricted", "host_tmp", "workspace"),
    }
)

FILES = sorted(p.name for p in DATA.glob("*.txt"))


def read(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


DESCRIPTIONS = {name: read(name) for name in FILES}
PARAGRAPHS = {name: last_paragraph(text) for name, text in DESCRIPTIONS.items()}


# --- the captured texts -------------------------------------------------------------------------


def test_every_captured_file_has_an_expectation() -> None:
    assert FILES, f"no captured descriptions in {DATA}"
    assert set(FILES) == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_captured_description_parses_to_the_expected_policy(name: str) -> None:
    assert parse_sandbox_description(read(name)) == EXPECTED[name]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_last_paragraph_alone_parses_the_same(name: str) -> None:
    text = read(name)
    paragraph = last_paragraph(text)
    assert "\n\n" not in paragraph
    assert text.endswith(paragraph) and paragraph != text
    assert parse_sandbox_description(paragraph) == EXPECTED[name]


def test_wording_is_identical_across_versions() -> None:
    for name in FILES:
        # Only `~` differs: 0.0.6 expands it to $HOME, 0.0.5 joins "~/x" to the launch dir.
        if name.startswith("0.0.5__") and name != "0.0.5__fs_read_write_tilde.txt":
            assert PARAGRAPHS[name] == PARAGRAPHS["0.0.6__" + name.removeprefix("0.0.5__")], name


def test_default_paragraph_verbatim() -> None:
    assert PARAGRAPHS["0.0.6__default.txt"] == (
        "Evaluated code can read host files subject to configured restrictions and cannot directly "
        "access the network. Writable locations: private `TMPDIR`; subject to more specific read/deny "
        "rules. Package preparation may execute installation or build code with separate filesystem "
        "and network permissions; use only trusted dependencies."
    )


# --- explicit rejections ------------------------------------------------------------------------

DEFAULT = PARAGRAPHS["0.0.6__default.txt"]
READ = "Evaluated code can read host files subject to configured restrictions and cannot directly access the network."
WRITABLE = "Writable locations: private `TMPDIR`; subject to more specific read/deny rules."
PACKAGE = (
    "Package preparation may execute installation or build code with separate filesystem and network "
    "permissions; use only trusted dependencies."
)


def expect_error(text: str, offending: str | None) -> SandboxTextError:
    with pytest.raises(SandboxTextError) as info:
        parse_sandbox_description(text)
    if offending is not None:
        assert repr(offending) in str(info.value)
        assert info.value.sentence == offending
    return info.value


def test_error_is_a_value_error() -> None:
    assert issubclass(SandboxTextError, ValueError)


@pytest.mark.parametrize(
    ("text", "offending"),
    [
        ("", None),
        ("Hello.", "Hello."),
        (f"{READ} {WRITABLE} {PACKAGE} Also evaluated code may do more.", "Also evaluated code may do more."),
        (f"{READ} {WRITABLE} {PACKAGE} ", ""),
        (f"{READ} {WRITABLE} {PACKAGE}\n", PACKAGE + "\n"),
        (f" {READ} {WRITABLE} {PACKAGE}", " " + READ),
        (f"{READ}  {WRITABLE} {PACKAGE}", " " + WRITABLE),
        (f"{READ} {PACKAGE}", PACKAGE),
        (f"{READ} {WRITABLE} {WRITABLE} {PACKAGE}", WRITABLE),
        (f"{WRITABLE} {READ} {PACKAGE}", WRITABLE),
        (f"{READ} {WRITABLE} {PACKAGE} {PACKAGE}", PACKAGE),
        (
            DEFAULT.replace("cannot directly", "can not directly"),
            READ.replace("cannot directly", "can not directly"),
        ),
        (DEFAULT.replace("TMPDIR", "TMP"), WRITABLE.replace("TMPDIR", "TMP")),
        (DEFAULT.replace("`TMPDIR`", "`TMPDIR`, /home"), WRITABLE.replace("`TMPDIR`", "`TMPDIR`, /home")),
        (DEFAULT.replace("`TMPDIR`", '`TMPDIR`, "/home"'), WRITABLE.replace("`TMPDIR`", '`TMPDIR`, "/home"')),
        (
            DEFAULT.replace("`TMPDIR`", '`TMPDIR`, `"home"`'),
            WRITABLE.replace("`TMPDIR`", '`TMPDIR`, `"home"`'),
        ),
        (DEFAULT.replace("`TMPDIR`", '`TMPDIR`, `""`'), WRITABLE.replace("`TMPDIR`", '`TMPDIR`, `""`')),
        (
            DEFAULT.replace("`TMPDIR`", '`TMPDIR`, `"/a\\x"`'),
            WRITABLE.replace("`TMPDIR`", '`TMPDIR`, `"/a\\x"`'),
        ),
        (DEFAULT.replace("`TMPDIR`", '`TMPDIR`, `"/a\nb"`'), None),
        (DEFAULT.replace("`TMPDIR`", '`TMPDIR`, `"/a\\u{d800}"`'), None),
        (DEFAULT.replace("`TMPDIR`", "`TMPDIR`,  workspace"), None),
        (DEFAULT.replace("private `TMPDIR`", "workspace, private `TMPDIR`"), None),
        (DEFAULT.replace("private `TMPDIR`", "private `TMPDIR`, host temporary directories"), None),
        (DEFAULT.replace("private `TMPDIR`", "workspace, workspace"), None),
        (DEFAULT.replace("private `TMPDIR`", '`"/a"`, workspace'), None),
        (DEFAULT.replace("private `TMPDIR`", "none, workspace"), None),
        (DEFAULT.replace("private `TMPDIR`", ""), None),
        (DEFAULT.replace("private `TMPDIR`", "private `TMPDIR`,"), None),
        (DEFAULT.replace("; subject", " subject"), None),
        (DEFAULT.replace("private `TMPDIR`", "everything"), None),
        (PARAGRAPHS["0.0.6__no_sandbox.txt"] + " Nothing else.", "Nothing else."),
        (
            PARAGRAPHS["0.0.6__profile_inherit_codex.txt"].replace(" Reconnect to change client permissions.", ""),
            "Package preparation has separate permissions unless sandboxing is disabled; use only trusted "
            "dependencies.",
        ),
    ],
)
def test_rejects_and_quotes_the_offending_sentence(text: str, offending: str | None) -> None:
    expect_error(text, offending)


def test_missing_sentence_is_reported() -> None:
    error = expect_error(f"{READ} {WRITABLE}", None)
    assert "missing sentence" in str(error) and repr(PACKAGE) in str(error)
    error = expect_error(READ, None)
    assert "missing sentence" in str(error)
    error = expect_error(PARAGRAPHS["0.0.6__no_sandbox.txt"].rsplit(". ", 1)[0] + ".", None)
    assert "missing sentence" in str(error)


def test_only_the_last_paragraph_counts() -> None:
    assert parse_sandbox_description(f"{DEFAULT}\n\n{PARAGRAPHS['0.0.6__network_enabled.txt']}") == sb(
        "enabled", "tmpdir"
    )
    expect_error(f"{DEFAULT}\n\nSomething else.", "Something else.")
    assert last_paragraph("a\n\nb\n\nc") == "c"
    assert last_paragraph("just one") == "just one"


def test_split_sentences_respects_quoted_paths() -> None:
    paragraph = PARAGRAPHS["0.0.6__writable_root_weird.txt"]
    sentences = split_sentences(paragraph)
    assert len(sentences) == 3
    assert " ".join(sentences) == paragraph
    assert split_sentences("A. B.") == ["A.", "B."]
    assert split_sentences("A. ") == ["A.", ""]
    assert split_sentences("A.  B") == ["A.", " B"]
    assert split_sentences("") == []


# --- the policy object --------------------------------------------------------------------------


def test_policy_validation() -> None:
    with pytest.raises(ValueError):
        SandboxPolicy(sandboxed=True, network="open", writable=frozenset())  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        sb("restricted", "relative/path")
    with pytest.raises(TypeError):
        SandboxPolicy(sandboxed=True, network="restricted", writable={"tmpdir"})  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        SandboxPolicy(sandboxed=False, network="restricted", writable=frozenset())
    with pytest.raises(ValueError):
        SandboxPolicy(sandboxed=True, network="enabled", writable=frozenset({"tmpdir"}), inherit_codex=True)
    with pytest.raises(ValueError):
        SandboxPolicy(sandboxed=False, network="enabled", writable=frozenset(), inherit_codex=True)
    assert SandboxPolicy.no_sandbox() == NO_SANDBOX
    assert SandboxPolicy.codex_inherited() == INHERIT


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_describe_is_one_line_and_as_dict_round_trips(name: str) -> None:
    policy = EXPECTED[name]
    line = policy.describe()
    assert line and "\n" not in line
    data = policy.as_dict()
    assert set(data) == {"sandboxed", "network", "writable", "inherit_codex"}
    writable = data["writable"]
    assert isinstance(writable, list)
    rebuilt = SandboxPolicy(
        sandboxed=bool(data["sandboxed"]),
        network=policy.network,
        writable=frozenset(str(item) for item in writable),
        inherit_codex=bool(data["inherit_codex"]),
    )
    assert rebuilt == policy and data["network"] == policy.network


def test_describe_examples() -> None:
    assert sb("restricted", "tmpdir", "workspace", "/a b").describe() == (
        'sandboxed, no network access, writable: private TMPDIR, workspace, "/a b"'
    )
    assert sb("proxy").describe() == "sandboxed, network access through the launcher's proxy, writable: none"
    assert "no sandbox" in NO_SANDBOX.describe()
    assert "Codex" in INHERIT.describe()
    assert sb("enabled", "host_tmp").as_dict() == {
        "sandboxed": True,
        "network": "enabled",
        "writable": ["host_tmp"],
        "inherit_codex": False,
    }


# --- property tests -----------------------------------------------------------------------------

# A path item as the binary prints it: backtick, Rust Debug string literal, backtick.
ITEM_RE = re.compile(r'`"(?:[^"\\]|\\.)*"`')
KNOWN_SENTENCES = sorted({s for p in PARAGRAPHS.values() for s in split_sentences(p)})
VOCABULARY = {w.lower() for p in PARAGRAPHS.values() for w in re.findall(r"[A-Za-z]+", ITEM_RE.sub(" ", p))}


def mask(paragraph: str) -> tuple[str, list[str]]:
    """Replace quoted path items by placeholders without spaces or periods."""
    items: list[str] = []

    def keep(match: re.Match[str]) -> str:
        items.append(match.group(0))
        return f"\ue000{len(items) - 1}\ue001"

    return ITEM_RE.sub(keep, paragraph), items


def unmask(text: str, items: list[str]) -> str:
    return re.sub("\ue000(\\d+)\ue001", lambda m: items[int(m.group(1))], text)


def sentences_of(paragraph: str) -> tuple[list[str], list[str]]:
    masked, items = mask(paragraph)
    return re.split(r"(?<=\.) ", masked), items


def with_paragraph(name: str, paragraph: str) -> str:
    description = DESCRIPTIONS[name]
    return description[: len(description) - len(PARAGRAPHS[name])] + paragraph


names = st.sampled_from(sorted(EXPECTED))
fresh_words = st.from_regex(r"[A-Za-z]{1,12}", fullmatch=True).filter(lambda w: w.lower() not in VOCABULARY)
random_sentences = st.one_of(
    st.sampled_from(KNOWN_SENTENCES),
    st.just(""),
    st.lists(fresh_words, min_size=1, max_size=6).map(lambda ws: " ".join(ws) + "."),
    st.lists(st.sampled_from(sorted(VOCABULARY)), min_size=1, max_size=8).map(lambda ws: " ".join(ws) + "."),
)


def test_test_helpers_split_the_corpus_like_the_binary_prints_it() -> None:
    for name, paragraph in PARAGRAPHS.items():
        parts, items = sentences_of(paragraph)
        assert unmask(" ".join(parts), items) == paragraph
        policy = EXPECTED[name]
        assert len(parts) == (6 if policy.inherit_codex else 3 if policy.sandboxed else 2)


@SETTINGS
@given(name=names, data=st.data())
def test_inserting_a_sentence_is_rejected(name: str, data: st.DataObject) -> None:
    parts, items = sentences_of(PARAGRAPHS[name])
    index = data.draw(st.integers(0, len(parts)), label="index")
    sentence = data.draw(random_sentences, label="sentence")
    mutated = unmask(" ".join([*parts[:index], sentence, *parts[index:]]), items)
    with pytest.raises(ValueError):
        parse_sandbox_description(with_paragraph(name, mutated))


@SETTINGS
@given(name=names, data=st.data())
def test_deleting_a_sentence_is_rejected(name: str, data: st.DataObject) -> None:
    parts, items = sentences_of(PARAGRAPHS[name])
    index = data.draw(st.integers(0, len(parts) - 1), label="index")
    mutated = unmask(" ".join(parts[:index] + parts[index + 1 :]), items)
    with pytest.raises(ValueError):
        parse_sandbox_description(with_paragraph(name, mutated))


@SETTINGS
@given(name=names, data=st.data())
def test_changing_a_word_is_rejected(name: str, data: st.DataObject) -> None:
    masked, items = mask(PARAGRAPHS[name])
    words = masked.split(" ")
    candidates = [i for i, word in enumerate(words) if "\ue000" not in word]
    index = data.draw(st.sampled_from(candidates), label="index")
    replacement = data.draw(fresh_words, label="replacement")
    words[index] = replacement
    mutated = unmask(" ".join(words), items)
    with pytest.raises(ValueError):
        parse_sandbox_description(with_paragraph(name, mutated))


def fixed_word_indices(words: list[str]) -> list[int]:
    """Indices of words outside the writable list (dropping or reordering list items is meaningful)."""
    if "locations:" not in words:
        return list(range(len(words)))
    start = words.index("locations:") + 1
    end = next(i for i in range(start, len(words)) if words[i].endswith(";"))
    return [i for i in range(len(words)) if not start <= i <= end]


@SETTINGS
@given(name=names, data=st.data())
def test_dropping_or_swapping_a_word_is_rejected(name: str, data: st.DataObject) -> None:
    masked, items = mask(PARAGRAPHS[name])
    words = masked.split(" ")
    candidates = fixed_word_indices(words)
    index = data.draw(st.sampled_from(candidates), label="index")
    if data.draw(st.booleans(), label="drop"):
        del words[index]
    else:
        others = [j for j in candidates if words[j] != words[index]]
        other = data.draw(st.sampled_from(others), label="other")
        words[index], words[other] = words[other], words[index]
    mutated = unmask(" ".join(words), items)
    with pytest.raises(ValueError):
        parse_sandbox_description(with_paragraph(name, mutated))


@SETTINGS
@given(name=names, suffix=st.text(min_size=1).filter(lambda s: "\n\n" not in s))
def test_appending_text_is_rejected(name: str, suffix: str) -> None:
    with pytest.raises(ValueError):
        parse_sandbox_description(DESCRIPTIONS[name] + suffix)


@SETTINGS
@given(name=names, prefix=st.text(min_size=1).filter(lambda s: "\n\n" not in s and not s.startswith("\n")))
def test_prefixing_the_paragraph_is_rejected(name: str, prefix: str) -> None:
    with pytest.raises(ValueError):
        parse_sandbox_description(with_paragraph(name, prefix + PARAGRAPHS[name]))


@SETTINGS
@given(name=names, data=st.data())
def test_changing_one_character_outside_paths_is_rejected(name: str, data: st.DataObject) -> None:
    masked, items = mask(PARAGRAPHS[name])
    positions = [i for i, c in enumerate(masked) if c not in "\ue000\ue001" and not c.isdigit()]
    index = data.draw(st.sampled_from(positions), label="index")
    replacement = data.draw(st.characters(codec="utf-8").filter(lambda c: c != masked[index]), label="char")
    if replacement in "\ue000\ue001":
        return
    mutated = unmask(masked[:index] + replacement + masked[index + 1 :], items)
    with pytest.raises(ValueError):
        parse_sandbox_description(with_paragraph(name, mutated))


fragments = st.one_of(
    st.text(max_size=20),
    st.sampled_from(KNOWN_SENTENCES),
    st.sampled_from(
        [
            " ",
            ". ",
            ", ",
            "; ",
            "`",
            '"',
            "\\",
            "\n\n",
            "none",
            "workspace",
            "private `TMPDIR`",
            "host temporary directories",
            '`"/a"`',
            '`"/a\\"b"`',
            "can directly access the network",
            "cannot directly access the network",
            "can access the network subject to the launcher's proxy settings",
            "Writable locations: ",
            "; subject to more specific read/deny rules.",
            "Evaluated code can read host files subject to configured restrictions and ",
        ]
    ),
)
READ_SENTENCES = [s for s in KNOWN_SENTENCES if s.startswith("Evaluated code can read")]
WRITABLE_SENTENCES = [s for s in KNOWN_SENTENCES if s.startswith("Writable")]
FIXED_TEXTS = [PARAGRAPHS["0.0.6__no_sandbox.txt"], PARAGRAPHS["0.0.6__profile_inherit_codex.txt"]]


@st.composite
def shaped(draw: st.DrawFn) -> str:
    """Mostly valid paragraphs, sometimes with a fragment spliced in at a random place."""
    if draw(st.booleans()):
        paragraph = " ".join(
            [draw(st.sampled_from(READ_SENTENCES)), draw(st.sampled_from(WRITABLE_SENTENCES)), PACKAGE]
        )
    else:
        paragraph = draw(st.sampled_from(FIXED_TEXTS))
    if draw(st.booleans()):
        at = draw(st.integers(0, len(paragraph)))
        paragraph = paragraph[:at] + draw(fragments) + paragraph[at:]
    return paragraph


texts = st.one_of(
    st.text(),
    st.lists(fragments, max_size=12).map("".join),
    st.lists(st.sampled_from(KNOWN_SENTENCES), min_size=1, max_size=7).map(" ".join),
    shaped(),
)


@SETTINGS
@given(text=texts)
def test_arbitrary_text_raises_only_value_error(text: str) -> None:
    try:
        policy = parse_sandbox_description(text)
    except ValueError:
        return
    assert isinstance(policy, SandboxPolicy)
    if policy.network == "restricted":
        outside_paths = ITEM_RE.sub("", last_paragraph(text))
        assert "cannot directly access the network" in outside_paths
        assert "can directly access the network" not in outside_paths
        assert "can access the network" not in outside_paths
        assert "network access" not in outside_paths


def rust_debug(path: str) -> str:
    """Quote like Rust's ``{:?}`` for str, as the binary prints writable paths."""
    out = []
    for char in path:
        if char in '\\"':
            out.append("\\" + char)
        elif char in "\n\r\t\0":
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t", "\0": "\\0"}[char])
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{{{ord(char):x}}}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


NETWORK_TEXT: dict[Network, str] = {
    "restricted": "cannot directly access the network",
    "enabled": "can directly access the network",
    "proxy": "can access the network subject to the launcher's proxy settings",
}


@SETTINGS
@given(
    network=st.sampled_from(sorted(NETWORK_TEXT)),
    temp=st.sampled_from([None, "tmpdir", "host_tmp"]),
    workspace=st.booleans(),
    paths=st.lists(st.text(max_size=30).map(lambda s: "/" + s), max_size=5),
)
def test_generated_paragraphs_round_trip(network: Network, temp: str | None, workspace: bool, paths: list[str]) -> None:
    items = []
    if temp is not None:
        items.append({"tmpdir": "private `TMPDIR`", "host_tmp": "host temporary directories"}[temp])
    if workspace:
        items.append("workspace")
    items += [f"`{rust_debug(p)}`" for p in paths]
    paragraph = (
        f"Evaluated code can read host files subject to configured restrictions and {NETWORK_TEXT[network]}. "
        f"Writable locations: {', '.join(items) or 'none'}; "
        f"subject to more specific read/deny rules. {PACKAGE}"
    )
    expected = {*paths, *([temp] if temp else []), *(["workspace"] if workspace else [])}
    policy = parse_sandbox_description("Intro.\n\n" + paragraph)
    assert policy == sb(network, *expected)
    if network != "restricted":
        assert policy.network != "restricted"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_never_restricted_when_the_text_allows_network(name: str) -> None:
    outside_paths = ITEM_RE.sub("", PARAGRAPHS[name])
    allows = any(
        phrase in outside_paths
        for phrase in ("can directly access", "can access the network", "network access", "Full access")
    )
    policy = parse_sandbox_description(DESCRIPTIONS[name])
    assert (policy.network != "restricted") == allows
