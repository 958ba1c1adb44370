"""The store's side of a task state kept by reference (`stead.payloads.references`):
a new state whose JSON is over the inline limit is written to the blob store,
durably, before the transaction that locks the task commits its reference in
the state row and its history.

Why before, and how it stays right: the new state is a function of the state
in force, which only the locking transaction sees for sure. So the store reads
the state first (unlocked), makes the new one and writes its blob, and the
transaction commits the reference only if the state it locks is still the one
read (same version, same stored text); else nothing is written and the store
starts over. A conflict, a crash or a lost race leaves an orphan blob, which
`stead blobs gc` removes; never a reference without its blob.

Who owns the blob: `run_blobs` rows, as every other large value. The row's
`run_id` is `task:<task key>` (the scope the state is sealed under), so the
state and each version of its history that names the blob keep it: pruning
runs never deletes that row (a task's state outlives its runs), forgetting the
task does. A run's change also adds a row for the run that wrote it, which is
what the tenant's stored-bytes quota counts (the `run_blobs` trigger of
schema 36) and pruning that run drops. One table, and not a table of the
task's own: a `stead blobs gc` of an older release, beside this one, asks
`run_blobs` alone which blobs are owned, and would take a task's for orphans.

Sealed (payloads=True): the blob is the state's JSON sealed under the task's
data key (`task:<key>`, `What.STATE`), as the inline state is; the key is made
in a transaction of its own first, and the committing transaction checks it
is still the task's (forgetting the task drops it meanwhile: start over)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from stead import errors
from stead.payloads import references
from stead.payloads.envelope import What, Where
from stead.payloads.references import Reference
from stead.store import _large, _sealing
from stead.store.seam import Database, Flow, Writing, one

if TYPE_CHECKING:
    from stead.payloads.references import LargeValues
    from stead.payloads.sealer import DataKey, Sealer
    from stead.records import StateRow

# How many times a large change starts over when the state moved between its
# read and its transaction, before it gives up (each costs a blob write).
ATTEMPTS = 8

# The first schema whose code reads a task state kept by reference. A process
# of an older release (0.3.0 needs schema 38) would take the reference for the
# state itself, and a worker of one would merge its change into it: while one
# is live on the database, a large state stays inline, as those releases kept
# it (up to the hard cap), and goes by reference once the fleet has moved on.
READ_FROM_SCHEMA = 39


def owner(task_key: str) -> str:
    """The `run_blobs.run_id` that says a task's state names a blob."""
    return f"task:{task_key}"


class Moved:
    """A transaction's answer: the state (or the task's data key) is not the
    one the blob was made from; nothing was written."""


MOVED = Moved()


@dataclasses.dataclass(frozen=True, slots=True)
class Sealing:
    """The task's data key a blob was sealed with, and its stored wrapping
    (what the committing transaction checks is still there)."""

    key: DataKey
    wrapped: str


def task_key_flow(sealer: Sealer, scope: str) -> Flow[Sealing]:
    """The task's data key (made if it has none) and its stored wrapping."""
    made: dict[str, DataKey] = {}
    key = yield from _sealing.key_of(sealer, scope, made, create=True)
    row = yield one("get_payload_key", {"scope": scope})
    if key is None or row is None or row["wrapped"] is None:
        raise _sealing.forgotten(scope)  # a task's key is dropped, not kept forgotten
    return Sealing(key, str(row["wrapped"]))


def key_unchanged(sealing: Sealing | None, scope: str) -> Flow[bool]:
    """Whether the task's data key is still the one the blob was sealed with."""
    if sealing is None:
        return True
    row = yield one("get_payload_key", {"scope": scope})
    return row is not None and row["wrapped"] == sealing.wrapped


async def put(database: Database, large: LargeValues, task_key: str,
              text: str) -> tuple[Reference, Sealing | None]:
    """Write the state `text` to the blob store, durably (sealed under the
    task's key when payloads are sealed); its reference."""
    sealer = database.sealer
    scope = owner(task_key)
    if sealer is None:
        return await asyncio.to_thread(large.put, text), None
    sealing = await database.write(lambda: task_key_flow(sealer, scope), Writing())
    where = Where(scope, What.STATE)

    def sealed_put() -> Reference:
        return large.put(sealer.seal(text, where, sealing.key), references.SEALED)

    return await asyncio.to_thread(sealed_put), sealing


async def stored(database: Database, large: LargeValues | None, task_key: str,
                 text: str, *, outside: bool = True,
                 ) -> tuple[str, Reference | None, Sealing | None]:
    """What a state row keeps of the state `text`: the text itself, or, over
    the inline limit and where the fleet reads references (`outside`), its
    reference once its blob is durable."""
    if large is None or not outside or not large.outside(text):
        return text, None, None
    ref, sealing = await put(database, large, task_key, text)
    return ref.text(), ref, sealing


def own(task_key: str, run_id: str | None, refs: Sequence[Reference],
        now: float) -> Flow[None]:
    """The task's state owns `refs`' blobs, and so does the run that wrote
    them (None: a person, from outside any run)."""
    yield from _large.own(owner(task_key), refs, now)
    if run_id:
        yield from _large.own(run_id, refs, now)


def same(row: object, seen: StateRow | None) -> bool:
    """Whether the state row read in a transaction is `seen` (as stored)."""
    if row is None or seen is None:
        return row is None and seen is None
    return int(row["version"]) == seen.version and row["data"] == seen.data  # type: ignore[index]


async def resolve(database: Database, large: LargeValues | None, task_key: str,
                  text: str) -> str:
    """`text`, or the state it references read back (and opened) on a thread."""
    ref = Reference.of(text)
    if ref is None:
        return text
    if large is None:
        raise no_blob_store(task_key, ref)
    scope = owner(task_key)
    sealer = database.sealer
    key: DataKey | None = None
    if ref.codec == references.SEALED:
        if sealer is None:
            raise errors.StoreError(
                f"the state of task {task_key} is sealed in the blob store and this store "
                "does not seal payloads: open it with payloads=True (STEAD_ENCRYPT=1)")
        key = await database.read(lambda: _sealing.key_of(sealer, scope, None))
        if key is None:
            raise _sealing.forgotten(scope)

    def read() -> str:
        text = large.get(ref)
        if sealer is None or key is None:
            return text
        return sealer.unseal(text, Where(scope, What.STATE), key)

    return await asyncio.to_thread(read)


def no_blob_store(task_key: str, ref: Reference | None) -> errors.StoreError:
    held = "" if ref is None else f" ({ref.sha256}, {ref.size} bytes)"
    return errors.StoreError(
        f"the state of task {task_key} is kept in a blob store{held} and this store was "
        "opened without one: open it with blobs=URL (STEAD_BLOBS) naming the blob store "
        "it was written to")


async def resolved(database: Database, large: LargeValues | None,
                   row: StateRow | None) -> StateRow | None:
    """`row` with its data read back if it is a reference."""
    if row is None or not references.is_reference(row.data):
        return row
    return dataclasses.replace(row, data=await resolve(database, large, row.task_key, row.data))
