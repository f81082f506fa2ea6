"""The filter that strips terminal escape sequences and C1 controls from text read from a cell's raw
log, as mcp-console's polls strip them (measured on 0.0.5 and 0.0.6: both render the same). Each
expectation below is what a poll of the real server returned for that output."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from console_bridge._console._escapes import EscapeFilter, strip_escapes

#: (what a cell printed, what an uncut poll of mcp-console 0.0.5 and 0.0.6 returned)
MEASURED = [
    ("A\x1b[31mred\x1b[0mB", "AredB"),
    ("C\x1b]0;TITLE\x07D", "CD"),
    ("E\x1b]52;c;SGVsbG8=\x07F", "EF"),
    ("G\x1b]8;;http://x.example\x1b\\link\x1b]8;;\x1b\\H", "GlinkH"),
    ("I\x1b[2AJ", "IJ"),
    ("K\x1bPqDCSDATA\x1b\\L", "KL"),
    ("M\x9b31mN", "MN"),
    ("O\x9d0;T2\x07P", "OP"),
    ("Q\x1bR", "Q"),
    ("S\tT", "S\tT"),
    ("W\x07X", "W\x07X"),
    ("Y\x85Z", "YZ"),
    ("a\x1b(Bb", "ab"),
    ("c\x1b[?25ld", "cd"),
    ("g\x90DCSC1\x9ch", "gh"),
    ("i\x00j\x7fk\x0bl\x0cm", "i\x00j\x7fk\x0bl\x0cm"),
    ("n\x1b_APC\x1b\\o", "no"),
    ("p\x1b^PM\x1b\\q", "pq"),
    ("r\x1bXSOS\x1b\\s", "rs"),
    ("t\x9d8;;u\x9cv", "tv"),
    ("w\x1b[1;2;3xy", "wy"),
    ("y\u200ez", "y\u200ez"),
    ("<y\x1b>END\n", "<yEND\n"),
    ("<z\x1b[12>END\n", "<zND\n"),
    ("q\x1b[12\nafter\n", "q\nafter\n"),
    ("e\x1b\nafter\n", "e\nafter\n"),
    ("m\x9bxyz\n", "myz\n"),
    ("n\x1b[1\x07mZ\n", "n\x07mZ\n"),
    ("o\x1b[1;\x1b[31mZ\n", "oZ\n"),
    ("t\x1b]0;a\x1b[31mb\x07c\n", "tc\n"),
    ("v\x1b[1\x18w\n", "v\x18w\n"),
    ("w\x1b%Gx\n", "wx\n"),
    ("s\x1b#8t\n", "st\n"),
    ("r\x1b7s\x1b8\n", "rs\n"),
    ("k\x1b[>0;1c\n", "k\n"),
    ("l\x1b[1$pm\n", "lm\n"),
    ("bel\x1b]0;t\x07\x07after\n", "bel\x07after\n"),
    ("osc\x1b]0;t\x1b\\x\n", "oscx\n"),
    ("mark\x1b]0;\ufdd0inside\ufdd1\x07z\n", "markz\n"),
    ("dcs\x90abc\x1b\\ok\n", "dcsok\n"),
    ("sub\x1b[1\x1aX\n", "sub\x1aX\n"),
    ("lone\x1b\x1b[31mX\n", "loneX\n"),
    ("csi-utf\x1b[1\u00e9X\n", "csi-utf\u00e9X\n"),
    ("osc-utf\x1b]0;\u00e9t\x07X\n", "osc-utfX\n"),
    ("esc-utf\x1b\u00e9X\n", "esc-utf\u00e9X\n"),
    ("escdel\x1b\x7fX\n", "escdel\x7fX\n"),
    ("escbel\x1b\x07X\n", "escbel\x07X\n"),
    ("esctab\x1b\tX\n", "esctab\tX\n"),
    ("csitab\x1b[1\tmX\n", "csitab\tmX\n"),
    ("csic1\x1b[1\x85mX\n", "csic1mX\n"),
    ("st\x9cX\n", "stX\n"),
    ("oscesc\x1b]0;a\x1b\x1b\\X\n", "oscescX\n"),
    ("csidel\x1b[1\x7fmX\n", "csidel\x7fmX\n"),
    ("inter\x1b(\nX\n", "inter\nX\n"),
    ("oscnl\x1b]0;a\rb\x07X\n", "oscnlX\n"),
    ("p\x1b[1:2mX\n", "pX\n"),
    # strings that never end swallow the rest of the output (DCS, SOS, APC end only at ST, not BEL)
    ("x\x1b]0;never ends\nmore\n", "x"),
    ("p\x1bP1\nafter\n", "p"),
    ("u\x1b]0;a\x18b\n", "u"),
    ("dcs\x1bPq\x07after\n", "dcs"),
    ("sos\x1bXq\x07after\n", "sos"),
    ("apc\x9fq\x07after\n", "apc"),
    ("c1\x80\x81\x9f\xa0end\n", "c1"),
    # a carriage return drops the line's text before it; one before a line feed stays
    ("U\rV\n", "V\n"),
    ("<abc\rX\n", "X\n"),
    ("<abc\r\nnext\n", "<abc\r\nnext\n"),
    ("<ab\rc\rd\n", "d\n"),
    ("<endcr\r>END\n", ">END\n"),
    ("<ab\rc\r\n", "c\r\n"),
    ("<crlfcr\r\r\nX\n", "<crlfcr\r\nX\n"),
    ("CR\x1b[0m\rTAIL\n", "TAIL\n"),
    ("crmid\x1b]0;t\x07\rX\n", "X\n"),
    ("<abc\r", "<abc"),
    ("<x\ny\r\r", "<x\ny"),
    ("<a\rb\x1b[0m\r\x1b[1m\nX", "b\r\nX"),
    ("<q\r\ufdd0err\ufdd1", "\ufdd0err\ufdd1"),
]

_LEAKS = re.compile("[\x1b\x80-\x9f]|\r(?!\n)")


@pytest.mark.parametrize(("printed", "polled"), MEASURED, ids=[repr(p)[:40] for p, _ in MEASURED])
def test_the_filter_renders_as_the_servers_polls_do(printed: str, polled: str) -> None:
    assert strip_escapes(printed) == polled


def test_a_sequence_split_anywhere_between_two_reads_never_leaks() -> None:
    text = "".join(printed for printed, _ in MEASURED if "\r" not in printed and "never" not in printed)
    text += "tail \x1b]8;;http://evil.example\x1b\\link\x1b]8;;\x1b\\ \x9d52;c;QQ==\x9c done\n"
    whole = strip_escapes(text)
    assert not _LEAKS.search(whole)
    for cut in range(len(text) + 1):
        parts = EscapeFilter()
        assert parts.feed(text[:cut]) + parts.feed(text[cut:], final=True) == whole, cut


def test_one_character_at_a_time_is_the_same_as_all_at_once() -> None:
    text = "".join(printed for printed, _ in MEASURED if "\r" not in printed and "never" not in printed)
    one = EscapeFilter()
    assert "".join(one.feed(char) for char in text) + one.feed("", final=True) == strip_escapes(text)


def test_a_carriage_return_across_two_reads_is_never_passed_on_bare() -> None:
    # as a poll ending right after it: the text before it already passed on stays, the \r is dropped
    parts = EscapeFilter()
    assert parts.feed("10%\r") == "10%"
    assert parts.feed("20%\r") == "20%"  # the \r before it dropped, not the 10% passed on
    assert parts.feed("30%\r40%\r50%\n") == "50%\n"  # within one read, as within one poll
    crlf = EscapeFilter()
    assert crlf.feed("line\r") + crlf.feed("\nnext", final=True) == "line\r\nnext"
    end = EscapeFilter()
    assert end.feed("last\r") + end.feed("", final=True) == "last"


def test_a_string_that_never_ends_keeps_nothing_in_memory() -> None:
    parts = EscapeFilter()
    assert parts.feed("before\x1b]0;") == "before"
    for _ in range(100):
        assert parts.feed("x" * 10_000 + "\n") == ""
    assert parts.feed("\x07after\n", final=True) == "after\n"


def test_a_long_run_of_plain_text_is_passed_on_in_bulk() -> None:
    text = ("row " + "y" * 60 + "\n") * 100_000 + "\x1b[31m!\x1b[0m\n"
    assert strip_escapes(text) == ("row " + "y" * 60 + "\n") * 100_000 + "!\n"


@settings(max_examples=300, deadline=None)
@given(
    st.text(alphabet=st.sampled_from(list("ab\n\t\r\x07\x1b[]P\\_^X;0(m\x9b\x9c\x9d\x90\x85\ufdd0é")), max_size=60),
    st.integers(min_value=0, max_value=60),
)
def test_no_escape_c1_or_bare_carriage_return_ever_comes_out(text: str, cut: int) -> None:
    whole = strip_escapes(text)
    assert not _LEAKS.search(whole), repr(whole)
    parts = EscapeFilter()
    split = parts.feed(text[:cut]) + parts.feed(text[cut:], final=True)
    assert not _LEAKS.search(split), repr(split)
    if "\r" not in text:
        assert split == whole
