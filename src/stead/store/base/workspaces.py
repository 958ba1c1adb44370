"""Workspace snapshots and the blobs of their files."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from stead.store import _rows
from stead.store.base.part import StorePart
from stead.store.seam import FencedWrite, Writing
from stead.store.transactions import common
from stead.store.transactions import workspaces as tx

if TYPE_CHECKING:  # annotations only: a store that lists runs need not build them
    from stead.records import Fence, Record, ResumeRecord, SnapshotRow


class Workspaces(StorePart):
    """The `Store`'s operations on workspace snapshots and the blobs of their files."""

    async def save_snapshot(
        self, fence: Fence, records: Sequence[Record], resume: ResumeRecord | None,
        snapshot: SnapshotRow, hashes: Sequence[str], read: tx.BlobReader, *,
        more: Sequence[SnapshotRow] = (),
    ) -> int:
        """Store a workspace snapshot (and the snapshots `more` of other
        workspaces), the blobs of `hashes` not stored yet (`read` gives a
        blob's content by its sha256) and `records`, in one fenced
        transaction. Returns the bytes of blobs added (`snapshot` counts them)."""
        write = FencedWrite(fence, records, resume)
        seq = records[-1].seq
        return await self.database.write(
            lambda: tx.save_snapshot(write, snapshot, hashes, read, more),
            Writing(landed=lambda attempted: tx.snapshot_saved(write, seq, attempted),
                    reads_files=bool(hashes)),
        )

    async def list_snapshots(self, run_id: str) -> list[SnapshotRow]:
        """Every snapshot of the run's workspaces, in journal order."""
        return await self.database.read(lambda: common.read_all(
            "list_snapshots", {"run_id": run_id}, _rows.snapshot))

    async def read_blobs(self, hashes: Sequence[str]) -> dict[str, bytes]:
        """The stored blobs of `hashes` (those the database holds)."""
        if not hashes:
            return {}
        return await self.database.read(lambda: tx.read_blobs(hashes))
