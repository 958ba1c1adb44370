"""Which part of a run's journal a page shows: `Window(start, limit)`, read
from the URL's `start` and `limit`, and the links to the pages around it.

A page is `limit` records from seq `start` on, in seq order, read by the journal's
key, so a page of a 20,000-record run costs what a page of a short one does.
Both values come from outside: a value that is no whole number in its range
is refused with `InvalidInput` (the page answers 400).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from stead import errors

PAGE = 200
MOST = 1000
LAST_SEQ = 10**12


@dataclasses.dataclass(frozen=True)
class Window:
    """`limit` records from seq `start` on (a journal's first seq is 0)."""

    start: int = 0
    limit: int = PAGE

    def older(self) -> Window | None:
        return None if self.start == 0 else Window(max(0, self.start - self.limit), self.limit)

    def newer(self, last_seq: int) -> Window | None:
        start = self.start + self.limit
        return Window(start, self.limit) if start <= last_seq else None

    def last(self, last_seq: int) -> Window:
        return Window(max(0, last_seq + 1 - self.limit), self.limit)

    def holds(self, seq: int) -> bool:
        return self.start <= seq < self.start + self.limit

    def query(self) -> str:
        return f"start={self.start}" + ("" if self.limit == PAGE else f"&limit={self.limit}")


def whole(name: str, text: str, least: int, most: int) -> int:
    """`text` as a whole number from `least` to `most`; `InvalidInput` if it is not one."""
    # str.isdigit() admits '¹' and other digits int() refuses: ASCII only.
    if not (text.isascii() and text.isdigit() and len(text) <= len(str(most))
            and least <= int(text) <= most):
        raise errors.InvalidInput(
            f"{name} must be a whole number from {least} to {most}, not {text[:40]!r}")
    return int(text)


def parse(query: Mapping[str, str]) -> Window:
    start = query.get("start", "")
    limit = query.get("limit", "")
    return Window(whole("start", start, 0, LAST_SEQ) if start else 0,
                  whole("limit", limit, 1, MOST) if limit else PAGE)
