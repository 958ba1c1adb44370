"""Large values the store keeps in its blob store (`stead.payloads`):
reading one back, and collecting the blobs no run owns (`stead blobs gc`)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from stead import errors
from stead.payloads import envelope, references
from stead.payloads.envelope import What, Where
from stead.payloads.references import Reference
from stead.store import _large, _sealing
from stead.store.base.part import StorePart

if TYPE_CHECKING:
    from stead.payloads.references import LargeValues
    from stead.payloads.sealer import DataKey
    from stead.records import Record, RunRow

# A blob younger than this is never collected: the write that made it may not
# have committed its reference yet.
GRACE = 3600.0


class LargeBlobs(StorePart):
    """The `Store`'s operations on large values' blobs."""

    def _referenced(self, text: str) -> tuple[Reference, LargeValues] | None:
        ref = Reference.of(text)
        if ref is None:
            return None
        if self.large is None:
            raise errors.StoreError(
                f"a value is kept in a blob store ({ref.sha256}, {ref.size} bytes) and this "
                "store was opened without one: open it with blobs=URL (STEAD_BLOBS) naming "
                "the blob store it was written to")
        return ref, self.large

    def _opened(self, ref: Reference, text: str, where: Where, key: DataKey | None) -> str:
        if ref.codec != references.SEALED:
            return text
        sealer = self.database.sealer
        if sealer is None:
            raise errors.StoreError(
                f"the large value {ref.sha256} of {where.scope} is sealed and this store "
                "does not seal payloads: open it with payloads=True (STEAD_ENCRYPT=1)")
        if key is None:
            return envelope.FORGOTTEN
        return sealer.unseal(text, where, key)

    async def resolve(self, text: str, run_id: str, what: What = What.RESULT) -> str:
        """`text`, or the large value it references, read (and opened, if it
        is sealed) on a thread: the `what` of run `run_id`."""
        found = self._referenced(text)
        if found is None:
            return text
        ref, large = found
        needed, key = self._key_at_hand(ref, run_id)
        sealer = self.database.sealer
        if needed and key is None and sealer is not None:
            key = await self.database.read(lambda: _sealing.key_of(sealer, run_id, None))
        held = key

        def read() -> str:
            return self._opened(ref, large.get(ref), Where(run_id, what), held)

        return await asyncio.to_thread(read)

    def resolve_now(self, text: str, run_id: str, what: What = What.JOURNAL) -> str:
        """`text`, or the large value it references, read here (blocking);
        a sealed one only with its run's data key at hand (a takeover that
        read the run's journal opened it)."""
        found = self._referenced(text)
        if found is None:
            return text
        ref, large = found
        needed, key = self._key_at_hand(ref, run_id)
        if needed and key is None:
            raise errors.PayloadUnreadable(
                f"the data key of {run_id} is not at hand to open its large value "
                f"{ref.sha256}")
        return self._opened(ref, large.get(ref), Where(run_id, what), key)

    def _key_at_hand(self, ref: Reference, run_id: str) -> tuple[bool, DataKey | None]:
        """Whether opening `ref` takes run `run_id`'s data key (it is sealed
        and this store seals), and that key if the sealer holds it already."""
        sealer = self.database.sealer
        if ref.codec != references.SEALED or sealer is None:
            return False, None
        return True, sealer.known(run_id)

    async def inlined(self, run: RunRow, journal: Sequence[Record]
                      ) -> tuple[RunRow, tuple[Record, ...]]:
        """`run` and its `journal` with each large value read back in place
        of its reference: what an export carries, so that it stands alone
        (another database, or this one once the run is pruned)."""
        out = []
        for r in journal:
            text = await self.resolve(r.payload, run.run_id, What.JOURNAL)
            out.append(r if text is r.payload else r.evolve(payload=text))
        if run.result is not None:
            result = await self.resolve(run.result, run.run_id)
            if result is not run.result:
                run = dataclasses.replace(run, result=result)
        return run, tuple(out)

    async def collect_blobs(self, *, grace: float = GRACE,
                            dry_run: bool = False) -> _large.Collected:
        """Find the blobs no run owns that are older than `grace` seconds (a
        write that crashed before its reference committed left them) and,
        unless `dry_run`, delete them."""
        large = self.large
        if large is None:
            return _large.Collected([], 0, 0)
        old, young = await asyncio.to_thread(_large.orphan_candidates, large, grace)
        names = [h for h, _ in old]
        owners = await self.database.read(lambda: _large.owned(names))
        orphans = [(h, size) for h, size in old if h not in owners]
        gone: list[str] = []
        for sha256, _size in orphans:
            # Written again since it was listed: a reference may be on its way.
            if not await asyncio.to_thread(_large.still_orphan, large, sha256, grace):
                continue
            gone.append(sha256)
        if not dry_run and gone:
            # Asked again just before deleting: a run may have come to own one.
            owners = await self.database.read(lambda: _large.owned(gone))
            gone = [h for h in gone if h not in owners]
            for sha256 in gone:
                await asyncio.to_thread(large.blobs.delete, sha256)
        sizes = dict(orphans)
        return _large.Collected(gone, sum(sizes[h] for h in gone),
                                young + len(old) - len(gone))
