"""Text from a run, made safe to show on a screen.

Names and values come from workflows and from whoever sent an event; shown as
they are, a right-to-left override (U+202E) makes `exe.txt` read as `txt.exe`,
a zero-width space makes two names that differ look the same, and a control
character moves the cursor of a terminal. `neutral` replaces each such
character with its code point in brackets (`[U+202E]`), so what is shown is
what is there. Every face that shows stored text uses it: the dashboard for
every value it renders, the command line for what it prints.
"""

from __future__ import annotations

import re

# Kept, though in those categories: tab and newline (layout a screen draws),
# and the zero-width joiners that scripts and emoji sequences need (they
# reorder nothing).
KEPT = frozenset("\t\n\u200c\u200d")
# Cc: C0 and C1 controls; Cf: formatting (bidi marks, embeddings, overrides and
# isolates, zero-width space, BOM, tags...); Zl, Zp: line and paragraph
# separators; Cs: lone surrogates. Written out rather than derived from
# `unicodedata` at import, which costs half a second over 1.1M code points;
# tests/test_display.py checks them against the categories (0x13439-0x1343F
# are Unicode 15.0's, unassigned before).
_RANGES = (
    (0x0, 0x8), (0xB, 0x1F), (0x7F, 0x9F), (0xAD, 0xAD), (0x600, 0x605), (0x61C, 0x61C),
    (0x6DD, 0x6DD), (0x70F, 0x70F), (0x890, 0x891), (0x8E2, 0x8E2), (0x180E, 0x180E),
    (0x200B, 0x200B), (0x200E, 0x200F), (0x2028, 0x202E), (0x2060, 0x2064),
    (0x2066, 0x206F), (0xD800, 0xDFFF), (0xFEFF, 0xFEFF), (0xFFF9, 0xFFFB),
    (0x110BD, 0x110BD), (0x110CD, 0x110CD), (0x13430, 0x1343F), (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A), (0xE0001, 0xE0001), (0xE0020, 0xE007F),
)
INVISIBLE = ("Cc", "Cf", "Zl", "Zp", "Cs")
_PATTERN = re.compile("[" + "".join(
    f"\\U{a:08x}-\\U{b:08x}" for a, b in _RANGES) + "]")


def _named(match: re.Match[str]) -> str:
    return f"[U+{ord(match.group()):04X}]"


def neutral(text: str) -> str:
    """`text` with every invisible or reordering character replaced by its
    code point in brackets: `"a\\u202eb"` -> `"a[U+202E]b"`."""
    return _PATTERN.sub(_named, text)
