"""Large values the store keeps in its blob store (`stead.payloads`):
reading one back, and collecting the blobs no run owns (`stead blobs gc`)."""

from __future__ import annotations

import asyncio

from stead import errors
from stead.payloads.references import Reference
from stead.store import _large
from stead.store.base.part import StorePart

# A blob younger than this is never collected: the write that made it may not
# have committed its reference yet.
GRACE = 3600.0


class LargeBlobs(StorePart):
    """The `Store`'s operations on large values' blobs."""

    async def resolve(self, text: str) -> str:
        """`text`, or the large value it references (read on a thread)."""
        ref = Reference.of(text)
        if ref is None:
            return text
        if self.large is None:
            raise errors.StoreError(
                f"a value is kept in a blob store ({ref.sha256}, {ref.size} bytes) and this "
                "store was opened without one: open it with blobs=URL (STEAD_BLOBS) naming "
                "the blob store it was written to")
        return await asyncio.to_thread(self.large.get, ref)

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
