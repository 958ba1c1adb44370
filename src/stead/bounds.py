"""The door's checks: text a store cannot keep, numbers that mean nothing.

Every face (the API, the CLI, the dashboard's queries) checks what it is
given here, before anything is stored, so both stores refuse the same input
with the same typed error (`InvalidValue`, unless the caller names another).

- **Names and ids** (step, effect, wait and workflow names, kinds, tools, run,
  task and event ids, queues, dedup keys) are stored as text: a NUL character
  is refused (PostgreSQL cannot store it in text, SQLite can: the stores would
  differ), and so is a lone surrogate (not Unicode, no driver encodes it).
- **Payloads** (arguments, results, bound values, event bodies, state) are
  JSON text with every non-ASCII character escaped, so a NUL is stored as the
  six characters `\\u0000` and comes back as it was. A lone surrogate is
  refused there too: other JSON readers reject it, and no page or terminal can
  show it.
- **Durations, deadlines, amounts and versions** are finite numbers in range:
  NaN, infinities and negatives are refused, durations are at most a century
  (`MAX_SECONDS`, which every date display can show), counts and amounts at
  most 2**53 (exact as JSON numbers), versions and priorities fit PostgreSQL's
  INTEGER.
"""

from __future__ import annotations

import datetime as dt
import math
import re

from stead import errors

MAX_SECONDS = 100 * 365.25 * 86400.0  # a century
MAX_EXACT = 2**53  # the largest integer every JSON reader holds exactly
MAX_INT32 = 2**31 - 1  # PostgreSQL INTEGER: versions, priorities

_Y2K = 946_684_800.0  # 2000-01-01 as a Unix time

Error = type[errors.SteadError]

# One token per JSON escape, left to right (in JSON text every backslash
# starts an escape): a high surrogate with its low one, a lone high, a lone
# low, or any other escape, consumed so that `\\\\ud800` is not misread.
_ESCAPE = re.compile(r"\\(?:u(d[89ab][0-9a-f]{2})(\\ud[c-f][0-9a-f]{2})?|u(d[c-f][0-9a-f]{2})|.)")


def text(value: str, what: str, error: Error = errors.InvalidValue) -> str:
    """`value` if a store can keep it as text on both backends; else `error`
    saying where the NUL or lone surrogate is."""
    if "\x00" in value:
        raise error(f"{what} {_shown(value)} holds a NUL character (at {value.index(chr(0))}), "
                    "which PostgreSQL cannot store as text; nothing was stored. Remove it: "
                    "names and ids are plain text")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise error(f"{what} {_shown(value)} holds a lone surrogate "
                        f"(U+{ord(value[exc.start]):04X} at {exc.start}), which is not Unicode "
                        "text; nothing was stored. Decode bytes with errors='replace' "
                        "before passing them") from None
    return value


def optional_text(value: str | None, what: str, error: Error = errors.InvalidValue) -> None:
    """`text` for a value that may be absent; anything not a string is left
    to the caller's own type check."""
    if isinstance(value, str):
        text(value, what, error)


def json_text(encoded: str, what: str) -> None:
    """Refuse JSON text (as `json.dumps` writes it, ASCII only) that encodes a
    lone surrogate, with `SerializationError`."""
    if "\\ud" not in encoded:  # no surrogate escape at all: the common case
        return
    for match in _ESCAPE.finditer(encoded):
        high, low, lone = match.groups()
        if (high is not None and low is None) or lone is not None:
            raise errors.SerializationError(
                f"{what} holds a lone surrogate (\\u{high or lone}), which is not Unicode "
                "text and cannot be stored; nothing was stored. Decode bytes with "
                "errors='replace' before returning or passing them")


def seconds(value: dt.timedelta | float, what: str, *, zero: bool = False,
            error: Error = errors.InvalidValue) -> float:
    """A duration as seconds: finite, positive (or zero, with `zero`), at most
    `MAX_SECONDS`; a timedelta is converted."""
    number = value.total_seconds() if isinstance(value, dt.timedelta) else value
    if isinstance(number, bool) or not isinstance(number, int | float):
        raise error(f"{what} is a number of seconds (or a timedelta), not {_shown(value)}")
    number = float(number)
    low_ok = number >= 0 if zero else number > 0
    if not (math.isfinite(number) and low_ok and number <= MAX_SECONDS):
        least = "a number of seconds >= 0" if zero else "a positive number of seconds"
        raise error(f"{what} is {_shown(value)}: give {least}, at most {MAX_SECONDS:.0f} "
                    "(a century); nothing was stored")
    return number


def instant(value: float, what: str, error: Error = errors.InvalidValue) -> float:
    """A Unix time from 1970 to 2100 (year 2000 plus `MAX_SECONDS`)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise error(f"{what} is a Unix time in seconds, not {_shown(value)}")
    if not (math.isfinite(value) and 0 <= value <= _Y2K + MAX_SECONDS):
        raise error(f"{what} is {_shown(value)}: give a Unix time in seconds between 1970 and "
                    "2100; nothing was stored")
    return float(value)


def amount(value: float, what: str, error: Error = errors.InvalidValue) -> float:
    """An amount (a cost, a spend limit): finite, >= 0, at most `MAX_EXACT`."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise error(f"{what} is a number >= 0, not {_shown(value)}")
    if not (math.isfinite(value) and 0 <= value <= MAX_EXACT):
        raise error(f"{what} is {_shown(value)}: give a finite number >= 0, at most 2**53; "
                    "nothing was stored")
    return float(value)


def integer(value: object, what: str, *, least: int = 0, most: int = MAX_EXACT,
            error: Error = errors.InvalidValue) -> int:
    """An integer (a count, a version, a priority) from `least` to `most`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise error(f"{what} is a whole number, not {_shown(value)}")
    if not least <= value <= most:
        raise error(f"{what} is {_shown(value)}: give a whole number from {least} to {most}; "
                    "nothing was stored")
    return value


def version(value: int, what: str = "a workflow version",
            error: Error = errors.InvalidValue) -> int:
    return integer(value, what, least=1, most=MAX_INT32, error=error)


def _shown(value: object) -> str:
    """A value for a message: escaped (no NUL, surrogate or control character
    reaches a terminal) and cut to 60 characters."""
    shown = ascii(value)
    return shown if len(shown) <= 60 else shown[:59] + "…"
