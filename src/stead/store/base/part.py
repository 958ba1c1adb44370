"""What each part of the `Store` (a module of this package per concern) is
written against: the database its transactions run on, and the clock."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from stead.clock import Clock
from stead.payloads.envelope import What, Where
from stead.store import _large, _large_state, _sealing, schema_versions
from stead.store.seam import Database, Writing
from stead.store.transactions import common

log = logging.getLogger("stead.store")

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

    async def _states_outside(self) -> bool:
        """Whether a task state over the inline limit may be kept by reference
        now: not while a worker of a release that cannot read one is live on
        the database (see `_large_state.READ_FROM_SCHEMA`). Asked only for a
        state that is large, so the common write pays nothing for it."""
        now = self.clock.now()
        live = await self.database.read(lambda: common.read_all(
            "live_worker_versions", {"now": now}, schema_versions.live_worker))
        older = [w.worker_id for w in live if w.older_than(_large_state.READ_FROM_SCHEMA)]
        if older:
            log.warning(
                "a task state over the inline limit is kept inline: %d live worker(s) of an "
                "older release cannot read one kept by reference (%s%s); it goes to the blob "
                "store once they are gone", len(older), ", ".join(older[:3]),
                " ..." if len(older) > 3 else "")
        return not older
