"""Workspace snapshots and the blobs of their files, saved under a run's
fence."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from stead.store import _rows
from stead.store.seam import (
    NOT_LANDED,
    FencedWrite,
    Flow,
    Journal,
    NotLanded,
    OffLoop,
    execute,
    fence_params,
    one,
    rows,
    stale,
)

if TYPE_CHECKING:  # annotations only: a store that lists runs need not build them
    from stead.records import SnapshotRow

# The content of a blob, by its sha256 (read when the save needs it: only the
# blobs the store does not hold yet are read and sent).
BlobReader = Callable[[str], bytes]


# Blobs read from files in one go off the loop: few hops, bounded memory.
BLOBS_PER_READ = 64


def save_snapshot(
    write: FencedWrite, snapshot: SnapshotRow, hashes: Sequence[str], read: BlobReader,
    more: Sequence[SnapshotRow] = (),
) -> Flow[int]:
    """Store `snapshot` with the blobs of `hashes` it lacks, and journal
    `write`, under the fence: a stale worker stores nothing. Returns the bytes
    of blobs it added."""
    if (yield one("fence", fence_params(write.fence))) is None:
        raise stale(write.fence)
    wanted = list(dict.fromkeys(hashes))
    present = {r["sha256"] for r in (yield rows("blobs_present", {"hashes": wanted}))} \
        if wanted else set()
    missing = [h for h in wanted if h not in present]
    stored = 0
    for start in range(0, len(missing), BLOBS_PER_READ):
        batch = missing[start:start + BLOBS_PER_READ]
        found = yield OffLoop(functools.partial(_read_all, read, batch))
        for sha256, data in zip(batch, found, strict=True):
            yield execute("insert_blob", {"sha256": sha256, "size": len(data), "data": data})
            stored += len(data)
    for other in more:
        yield execute("insert_snapshot", _rows.snapshot_params(other))
    yield execute("insert_snapshot", _rows.snapshot_params(snapshot.evolve(stored_bytes=stored)))
    yield Journal(write, checked=True)
    return stored


def _read_all(read: BlobReader, hashes: Sequence[str]) -> list[bytes]:
    return [read(h) for h in hashes]


def snapshot_saved(write: FencedWrite, seq: int, attempted: int | None) -> Flow[int | NotLanded]:
    found = yield one("get_snapshot", {"run_id": write.fence.run_id, "seq": seq})
    return NOT_LANDED if found is None else int(found["stored_bytes"])


def read_blobs(hashes: Sequence[str]) -> Flow[dict[str, bytes]]:
    found = yield rows("get_blobs", {"hashes": list(hashes)})
    return {str(r["sha256"]): bytes(r["data"]) for r in found}
