"""What each part of the `Store` (a module of this package per concern) is
written against: the database its transactions run on, and the clock."""

from __future__ import annotations

from stead.clock import Clock
from stead.store.seam import Database


class StorePart:
    """The attributes every part of the `Store` reads (`Store.__init__` sets
    them)."""

    database: Database
    clock: Clock
