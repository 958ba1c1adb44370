"""The store's side of large values (`stead.payloads.references`): a fenced
journal write whose payloads are over the inline limit has them written to
the blob store first, durably, and commits their references together with a
`run_blobs` row per blob (which run owns it), in one transaction. Pruning
deletes the rows of the runs it deletes and then the blobs no run owns any
more; the collector (`collect`) deletes blobs no row names, once older than
its grace (a write in flight has not committed its reference yet). A task
state's blobs are owned the same way by `task:<task key>`
(`store._large_state`); a fork owns the blobs of the records it copies
(`store._large_forks`)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from stead.payloads import references
from stead.payloads.envelope import What
from stead.store.seam import FencedWrite, Flow, Journal, execute, rows

if TYPE_CHECKING:
    from stead.payloads.references import LargeValues, Reference

log = logging.getLogger("stead.store")
# Hashes asked about per query.
BATCH = 500


def outside(large: LargeValues, write: FencedWrite) -> bool:
    """Whether `write` holds a payload that goes to the blob store."""
    end = write.finish
    return (any(large.outside(r.payload) for r in write.records)
            or (end is not None and large.outside(end.result)))


# Seals a value's text as the kind of payload it is (None: values are not sealed).
Seal = Callable[[str, What], str]


def put(large: LargeValues, text: str, what: What, seal: Seal | None) -> Reference:
    """Store `text` (sealed with `seal`, if given) as a `what`; its reference
    (blocking: call in a thread)."""
    if seal is None:
        return large.put(text)
    return large.put(seal(text, what), references.SEALED)


async def referenced(large: LargeValues, write: FencedWrite, seal: Seal | None
                     ) -> tuple[FencedWrite, list[Reference]]:
    """`write` with each payload over the inline limit replaced by its
    reference, the blobs durable (written, and sealed with `seal`, on a
    thread), and the references."""
    refs: list[Reference] = []
    records = list(write.records)
    for i, r in enumerate(records):
        if large.outside(r.payload):
            ref = await asyncio.to_thread(put, large, r.payload, What.JOURNAL, seal)
            records[i] = r.evolve(payload=ref.text())
            refs.append(ref)
    end = write.finish
    if end is not None and end.result is not None and large.outside(end.result):
        ref = await asyncio.to_thread(put, large, end.result, What.RESULT, seal)
        end = dataclasses.replace(end, result=ref.text())
        refs.append(ref)
    return dataclasses.replace(write, records=records, finish=end), refs


def own(run_id: str, refs: Sequence[Reference], now: float) -> Flow[None]:
    """Run `run_id` owns `refs`' blobs."""
    for ref in refs:
        yield execute("own_blob", {"run_id": run_id, "sha256": ref.sha256, "size": ref.size,
                                   "at": now})


def journal_owning(write: FencedWrite, refs: Sequence[Reference], now: float) -> Flow[None]:
    """Commit `write` and its run's ownership of `refs`' blobs."""
    yield Journal(write)
    yield from own(write.fence.run_id, refs, now)


def blobs_of(run_ids: Sequence[str]) -> Flow[list[str]]:
    found = yield rows("blobs_of_runs", {"run_ids": list(run_ids)})
    return [str(r["sha256"]) for r in found]


def disowned(run_ids: Sequence[str]) -> Flow[list[str]]:
    """Delete the rows of `run_ids`' blobs; the blobs they named."""
    held = yield from blobs_of(run_ids)
    yield execute("delete_run_blobs", {"run_ids": list(run_ids)})
    return held


def owned(hashes: Sequence[str]) -> Flow[set[str]]:
    """Which of `hashes` some run owns."""
    found: set[str] = set()
    for start in range(0, len(hashes), BATCH):
        batch = list(hashes[start:start + BATCH])
        found.update(str(r["sha256"]) for r in (yield rows("owned_blobs", {"hashes": batch})))
    return found


@dataclasses.dataclass(frozen=True, slots=True)
class Collected:
    """What a collection found: orphans (deleted unless a dry run), their
    bytes, and the blobs it kept (owned, or younger than the grace)."""

    orphans: list[str]
    orphan_bytes: int
    kept: int


async def delete_unowned(large: LargeValues, hashes: Iterable[str], owners: set[str]) -> int:
    """Delete those of `hashes` not in `owners` (their runs were pruned)."""
    gone = [h for h in hashes if h not in owners]
    for sha256 in gone:
        await asyncio.to_thread(large.blobs.delete, sha256)
    return len(gone)


def orphan_candidates(large: LargeValues, grace: float) -> tuple[list[tuple[str, int]], int]:
    """Blobs older than `grace` seconds (name, size), and how many are younger
    (blocking: call in a thread)."""
    cutoff = time.time() - grace
    old: list[tuple[str, int]] = []
    young = 0
    for stored in large.blobs.listing():
        if stored.at <= cutoff:
            old.append((stored.sha256, stored.size))
        else:
            young += 1
    return old, young


def still_orphan(large: LargeValues, sha256: str, grace: float) -> bool:
    """Whether blob `sha256` was not written again since it was listed
    (blocking)."""
    at = large.blobs.write_time(sha256)
    return at is not None and at <= time.time() - grace

