"""A fork's large values: a fork copies its parent's journal prefix,
references included, and owns their blobs in the transaction that creates
it (`Store.fork_run`), so pruning the parent leaves the fork able to replay
them. A blob sealed under the parent's data key is bound to the parent: its
value is opened and sealed again under the fork's key, into a blob of its
own, before that transaction."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

from stead.payloads import references
from stead.payloads.envelope import What, Where
from stead.store import _large, _sealing
from stead.store.seam import Database

if TYPE_CHECKING:
    from stead.payloads.references import LargeValues, Reference
    from stead.payloads.sealer import DataKey, Sealer
    from stead.records import Record


async def adopted(database: Database, large: LargeValues, records: Sequence[Record],
                  from_run: str, seal: _large.Seal | None) -> tuple[list[Record], list[Reference]]:
    """`records` copied from run `from_run` (a fork's prefix), for a run that
    will own their blobs: each reference kept, except a sealed one (bound to
    `from_run`'s key), whose value is opened and sealed again with `seal`
    into a blob of its own; and the references."""
    out: list[Record] = []
    refs: list[Reference] = []
    sealer = database.sealer
    key: DataKey | None = None
    for r in records:
        ref = references.Reference.of(r.payload)
        if ref is None:
            out.append(r)
            continue
        if ref.codec == references.SEALED and sealer is not None and seal is not None:
            if key is None:
                key = await database.read(lambda: _sealing.key_of(sealer, from_run, None))
                if key is None:
                    raise _sealing.forgotten(from_run)
            ref = await asyncio.to_thread(_sealed_again, large, sealer, ref, from_run, key,
                                          seal)
            r = r.evolve(payload=ref.text())
        out.append(r)
        refs.append(ref)
    return out, refs


def _sealed_again(large: LargeValues, sealer: Sealer, ref: Reference, from_run: str,
                  key: DataKey, seal: _large.Seal) -> Reference:
    """The journal value `ref` names, sealed for `from_run` with `key`, sealed
    again with `seal` into a blob of its own (blocking)."""
    text = sealer.unseal(large.get(ref), Where(from_run, What.JOURNAL), key)
    return _large.put(large, text, What.JOURNAL, seal)
