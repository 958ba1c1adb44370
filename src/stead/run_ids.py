"""Run ids: time-ordered, so a PostgreSQL store keeps each day's runs (their
journal and events) in a partition of its own and drops it whole.

A run id is 40 lowercase hex characters:

    0000000000007 019a2f3c4d5e 8b1f0c2d9e3a4f5
    `-- PREFIX --' `-- ms ---' `-- random ---'

- PREFIX, 13 characters, sets these ids apart from every id stead made
  before (`uuid4().hex` and `uuid5().hex`, whose 13th character is always
  `4` or `5`): no older id sorts between PREFIX and END, so the range of
  each day is known to hold only runs started that day (or imported with a
  dated id), whatever else the database holds.
- ms: when the run was started, in milliseconds since the epoch (UTC), 12
  hex digits: the ids of one day form one range, and ids sort by time.
- random: 60 bits, so two runs started in the same millisecond do not share
  an id (a start that met an existing id would find that run instead).

A child's id is a function of its parent's id and the call's address (a
replay asks for the same child again) and carries its parent's time, so it
lives in its parent's partition. The children of a run with an id of the
old shape keep the old shape (`uuid5`).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import secrets
import uuid

PREFIX = "0000000000007"
END = "0000000000008"  # the first id past every dated one
_MS = 12
_RANDOM = 15
LENGTH = len(PREFIX) + _MS + _RANDOM
TIME_DIGITS = _MS  # the hex digits of a dated id's time, after its prefix
# Children of runs with an id of the old shape: uuid5 of the parent and the
# call address in this namespace.
_NAMESPACE = uuid.UUID("5e1d2c0a-9b7f-4c2e-8d1a-3f6b0c9e7a21")


def new(now: float) -> str:
    """A fresh run id for a run started at `now` (seconds since the epoch)."""
    return _stamp(now) + secrets.token_hex(8)[:_RANDOM]


def child(parent_id: str, addr: str) -> str:
    """The id of the child the call at `addr` of run `parent_id` starts."""
    if not dated(parent_id):
        return uuid.uuid5(_NAMESPACE, f"{parent_id}/{addr}").hex
    tail = hashlib.sha256(f"stead child\x00{parent_id}\x00{addr}".encode()).hexdigest()
    return parent_id[:len(PREFIX) + _MS] + tail[:_RANDOM]


def short(text: str, width: int = 12) -> str:
    """What a screen shows of a run id, or of an id made from one (an
    effect's key): every dated run id begins alike, with its prefix and then
    its time to the millisecond, so for one the random part that follows is
    shown; for any other id its first `width` characters."""
    if len(text) >= LENGTH and text.startswith(PREFIX):
        return text[len(PREFIX) + _MS:][:width]
    return text[:width]


def dated(run_id: str) -> bool:
    """Whether `run_id` has the time-ordered shape."""
    return (len(run_id) == LENGTH and run_id.startswith(PREFIX)
            and all(c in "0123456789abcdef" for c in run_id))


def started(run_id: str) -> float | None:
    """When a dated run id was made (seconds since the epoch); None for others."""
    if not dated(run_id):
        return None
    return int(run_id[len(PREFIX):len(PREFIX) + _MS], 16) / 1000


def day_bounds(day: dt.date) -> tuple[str, str]:
    """The ids of runs started on `day` (UTC): from the first, to before the second."""
    start = dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC).timestamp()
    return _stamp(start), _stamp(start + 86400)


def _stamp(at: float) -> str:
    ms = min(max(0, int(at * 1000)), 16 ** _MS - 1)
    return f"{PREFIX}{ms:0{_MS}x}"
