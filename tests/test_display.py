"""`stead.display.neutral`: what a screen shows of stored text is what is there."""

from __future__ import annotations

import sys
import unicodedata

from hypothesis import given
from hypothesis import strategies as st

from stead import display


def test_each_invisible_or_reordering_character_is_shown_by_its_code_point() -> None:
    assert display.neutral("invoice\u202egpj.exe") == "invoice[U+202E]gpj.exe"
    assert display.neutral("a\u2066b\u2069c\u200e\u200f") == "a[U+2066]b[U+2069]c[U+200E][U+200F]"
    assert display.neutral("ad\u200bmin") == "ad[U+200B]min"
    assert display.neutral("\x1b[2Jcleared") == "[U+001B][2Jcleared"
    assert display.neutral("\ud800") == "[U+D800]"
    # what a screen draws or a script needs stays
    assert display.neutral("line 1\n\tline 2 👩\u200d💻 née") == "line 1\n\tline 2 👩\u200d💻 née"


def test_the_ranges_are_exactly_the_invisible_categories() -> None:
    """Every character of those categories is replaced (but the kept ones),
    and nothing else is, save code points this Python's Unicode leaves
    unassigned that a later Unicode puts in them."""
    for code in range(sys.maxunicode + 1):
        char = chr(code)
        category = unicodedata.category(char)
        replaced = display.neutral(char) != char
        if category in display.INVISIBLE and char not in display.KEPT:
            assert replaced, f"U+{code:04X} ({category}) is shown as it is"
        elif replaced:
            assert category == "Cn", f"U+{code:04X} ({category}) is replaced"


@given(st.text())
def test_what_is_shown_has_no_invisible_character_left(text: str) -> None:
    shown = display.neutral(text)
    assert all(unicodedata.category(c) not in display.INVISIBLE or c in display.KEPT
               for c in shown)
