"""What each part of the `Store` (a module of this package per concern) is
written against: the database its transactions run on, and the clock."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stead.clock import Clock
from stead.payloads.envelope import What, Where
from stead.store import _large, _sealing
from stead.store.seam import Database, Writing

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

    async def _large_seal(self, run_id: str) -> _large.Seal | None:
        """How a large value of `run_id` is sealed before it goes to the blob
        store; None when payloads are not sealed."""
        sealer = self.database.sealer
        if sealer is None:
            return None
        key = sealer.known(run_id)
        if key is None:
            key = await self.database.write(lambda: _sealing.run_key(sealer, run_id), Writing())
            if key is None:
                raise _sealing.forgotten(run_id)
            sealer.learn(key)
        held = key

        def seal(text: str, what: What) -> str:
            return sealer.seal(text, Where(run_id, what), held)

        return seal
