"""What each part of the `Store` (a module of this package per concern) is
written against: the database its transactions run on, and the clock."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stead.clock import Clock
from stead.store.seam import Database

if TYPE_CHECKING:
    from stead.payloads.references import LargeValues


class StorePart:
    """The attributes every part of the `Store` reads (`Store.__init__` sets
    them)."""

    database: Database
    clock: Clock
    # Where payloads over the inline limit are kept (see `stead.payloads`);
    # None: every payload is stored inline.
    large: LargeValues | None
