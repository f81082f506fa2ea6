"""Terminal escape sequences and C1 controls stripped from a cell's output read from its raw log, as
mcp-console's polls strip them.

A poll's text has them rendered away; the raw log in the recording keeps what the cell wrote. Text
read from the raw log (:mod:`_whole_output`, :mod:`_live_output`) goes through :class:`EscapeFilter`,
so a cell's output is the same whichever path it came by, and a cell that prints past a poll's window
cannot reach the user's terminal, ``output.txt`` or a notebook with a window title (OSC 0), a
clipboard write (OSC 52), a hyperlink (OSC 8), cursor moves (CSI), DCS strings or C1 controls.

What the polls do, measured with mcp-console 0.0.5 and 0.0.6 (the two render the same; the cases are
in ``tests/console/test_escapes_logic.py``):

- ESC starts a sequence, as do the C1 introducers CSI (U+009B), OSC (U+009D), DCS (U+0090), SOS
  (U+0098), PM (U+009E) and APC (U+009F); every other C1 control (U+0080-U+009F) is dropped.
- After ESC: ``[`` opens a CSI, ``]`` an OSC, ``P``, ``X``, ``^``, ``_`` a DCS, SOS, PM, APC string;
  intermediates (0x20-0x2F) and then a final (0x30-0x7E) end it. CSI takes parameters and
  intermediates (0x20-0x3F) up to a final (0x40-0x7E). Any other character (a C0 control such as
  ``\\n``, ``\\t`` or BEL, DEL, a non-ASCII letter) ends the sequence and is kept; ESC starts a new one.
- OSC ends at BEL or ST (ESC ``\\`` or U+009C); DCS, SOS, PM and APC at ST only. Everything inside is
  dropped, line feeds and markers included; one never ended drops the rest of the output.
- Everything else passes: ``\\n``, ``\\t``, BEL, NUL, DEL, VT, FF, bidi controls.
- A carriage return drops the line's text before it (from the last line feed); one right before a
  line feed stays (``\\r\\n``); one at the end of the output is dropped.

The server renders each poll on its own: a sequence cut by a poll's end loses its escape and its rest
shows as text. The filter carries its state from one ``feed`` to the next instead, so a sequence split
between two reads never leaks; it keeps the state only, never text (memory stays small whatever a
cell prints). A carriage return drops the text before it only within one ``feed`` (what was passed
on already stays, as a poll's does); a bare ``\\r`` is never passed on.
"""

from __future__ import annotations

import re

__all__ = ["EscapeFilter", "strip_escapes"]

_GROUND, _ESC, _INTER, _CSI, _STRING, _STRING_ESC = range(6)
#: where plain text stops: ESC, a C1 control
_GROUND_STOP = re.compile("[\x1b\x80-\x9f]")
#: inside a string, the characters that may end it
_STRING_STOP = re.compile("[\x07\x1b\x9c]")
_CSI_BODY = re.compile("[\x20-\x3f]*")
#: the common whole sequences, skipped in one step: a CSI, an OSC ended by BEL or ST, an ESC sequence
_WHOLE = re.compile(
    "\x1b\\[[\x20-\x3f]*[\x40-\x7e]"
    "|\x1b\\][^\x07\x1b\x9c]*(?:\x07|\x1b\\\\|\x9c)"
    "|\x1b[\x20-\x2f]+[\x30-\x7e]"
    "|\x1b[\x30-\x4f\x51-\x57\x59\x5a\x5c\x60-\x7e]"
)
#: C1 introducers of a string: DCS, SOS, OSC, PM, APC
_STRINGS = {"\x90": False, "\x98": False, "\x9d": True, "\x9e": False, "\x9f": False}
#: after ESC, the letters that open a string (True: an OSC, which BEL also ends)
_ESC_STRINGS = {"]": True, "P": False, "X": False, "^": False, "_": False}


class EscapeFilter:
    """Text with escape sequences and C1 controls stripped, fed a piece at a time (see the module).

    ``feed(text)`` returns what ``text`` renders to; ``final=True`` on the last piece drops a
    sequence or a carriage return still open. Example::

        f = EscapeFilter()
        f.feed("a\\x1b]0;ti") + f.feed("tle\\x07b\\n", final=True)  # "ab\\n"
    """

    def __init__(self) -> None:
        self._state = _GROUND
        self._osc = False  # the open string is an OSC (BEL ends it)
        self._cr = False  # a carriage return seen, not yet known to be a line end
        self._done: list[str] = []  # this feed's text up to the last line feed
        self._line: list[str] = []  # and after it

    def feed(self, text: str, *, final: bool = False) -> str:
        index, size = 0, len(text)
        while index < size:
            state = self._state
            if state == _GROUND:
                found = _GROUND_STOP.search(text, index)
                stop = found.start() if found is not None else size
                if stop > index:
                    self._emit(text[index:stop])
                if found is None:
                    break
                index = stop
                whole = _WHOLE.match(text, index)
                if whole is not None:
                    index = whole.end()
                    continue
            elif state == _STRING:
                found = _STRING_STOP.search(text, index)
                if found is None:
                    break
                index = found.start()
            elif state == _CSI:
                body = _CSI_BODY.match(text, index)  # parameters and intermediates
                index = body.end() if body is not None else index
                if index == size:
                    break
            self._step(text[index])
            index += 1
        if final:
            self._state, self._cr = _GROUND, False
        out = "".join(self._done) + "".join(self._line)
        self._done, self._line = [], []
        return out

    def _step(self, char: str) -> None:
        """One character that may start, go on with or end a sequence."""
        state, code = self._state, ord(char)
        if state in (_STRING, _STRING_ESC):
            if char == "\x9c" or (char == "\x07" and self._osc) or (char == "\\" and state == _STRING_ESC):
                self._state = _GROUND
            else:
                self._state = _STRING_ESC if char == "\x1b" else _STRING
            return
        if char == "\x1b":
            self._state = _ESC
        elif 0x80 <= code <= 0x9F:
            self._c1(char)
        elif state == _ESC and char == "[":
            self._state = _CSI
        elif state == _ESC and char in _ESC_STRINGS:
            self._state, self._osc = _STRING, _ESC_STRINGS[char]
        elif state in (_ESC, _INTER) and 0x20 <= code <= 0x2F:
            self._state = _INTER
        elif (state in (_ESC, _INTER) and 0x30 <= code <= 0x7E) or (state == _CSI and 0x40 <= code <= 0x7E):
            self._state = _GROUND  # the sequence's final character
        else:  # a control, DEL or a non-ASCII character: the sequence ends, the character stays
            self._state = _GROUND
            self._emit(char)

    def _c1(self, char: str) -> None:
        if char == "\x9b":
            self._state = _CSI
        elif char in _STRINGS:
            self._state, self._osc = _STRING, _STRINGS[char]
        else:
            self._state = _GROUND

    def _emit(self, text: str) -> None:
        """Pass ``text`` on, a carriage return dropping the line's text before it."""
        if self._cr:  # the last one of the text before: now known to end a line or not
            text, self._cr = "\r" + text, False
        if "\r" not in text:
            cut = text.rfind("\n")
            if cut < 0:
                self._line.append(text)
                return
            self._done.extend(self._line)
            self._done.append(text[: cut + 1])
            self._line = [text[cut + 1 :]] if cut + 1 < len(text) else []
            return
        pieces = text.split("\n")
        for index, piece in enumerate(pieces):
            body = piece.rstrip("\r")
            ended = len(body) < len(piece)  # carriage returns at the piece's end
            _, bare, after = body.rpartition("\r")
            if bare:  # one followed by text: the line's text before it is dropped
                self._line, body = [], after
            if body:
                self._line.append(body)
            if index < len(pieces) - 1:
                self._done.extend(self._line)
                self._done.append("\r\n" if ended else "\n")
                self._line = []
            elif ended:  # the next character says whether it ends the line
                self._cr = True


def strip_escapes(text: str) -> str:
    """``text`` (a whole output) with escape sequences and C1 controls stripped, as a poll renders it."""
    return EscapeFilter().feed(text, final=True)
