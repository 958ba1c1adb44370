"""A run's journal: whether a fenced write of records is stored (the
read-back of an append or a finish), and what a takeover reads of it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from stead import errors
from stead.store import _rows
from stead.store.seam import NOT_LANDED, FencedWrite, Flow, NotLanded, one, rows, together

if TYPE_CHECKING:  # annotations only: a store that lists runs need not build them
    from stead.records import Record, ResumeRecord, TakeoverContext


def records_landed(
    run_id: str, records: Sequence[Record], resume: ResumeRecord | None = None,
) -> Flow[bool | None]:
    """Whether a write of `records` (or, with none, of `resume`) is stored;
    None if neither tells."""
    if records:
        row = yield one("count_records", {
            "run_id": run_id, "seqs": [r.seq for r in records],
            "addrs": [r.addr for r in records], "attempts": [r.attempt for r in records],
            "statuses": [r.status for r in records],
        })
        n = int(row["n"]) if row else 0
        if 0 < n < len(records):
            raise errors.StoreError(
                f"run {run_id}: {n} of the {len(records)} records of one write are stored; "
                "the journal was changed outside stead"
            )
        return n == len(records)
    if resume is not None:
        found = yield one("has_resume", {"run_id": run_id, "epoch": resume.epoch})
        return found is not None
    return None


def journaled(write: FencedWrite) -> Flow[NotLanded | None]:
    """The read-back of an append or a finish."""

    fence, end = write.fence, write.finish
    if end is None or write.records:
        done = yield from records_landed(fence.run_id, write.records, write.resume)
        return None if done else NOT_LANDED
    row = yield one("get_run", {"run_id": fence.run_id})
    ended = row is not None and (row["status"], row["epoch"], row["lease_owner"]) == (
        end.status, fence.epoch, None
    )
    return None if ended else NOT_LANDED


def takeover_context(
    run_id: str, journal: bool, task_key: str, revalidate: bool,
) -> Flow[TakeoverContext]:
    """What a takeover reads, in one read: the journal and the wait an event
    consumed last (if `journal`), the intent's versions and the last resume
    record (if `revalidate`), and the task's state."""
    from stead.records import TakeoverContext

    asked = {"state": one("read_state", {"task_key": task_key})}
    if journal:
        asked["journal"] = rows("load_journal", {"run_id": run_id})
        asked["consumed"] = one("run_last_consumed_wait", {"run_id": run_id})
    if revalidate:
        asked["intents"] = rows("list_intents", {"run_id": run_id})
        asked["resumes"] = rows("list_resumes", {"run_id": run_id})
    # None needs another's answer: one round trip on PostgreSQL.
    got = dict(zip(asked, (yield together(*asked.values())), strict=True))
    records = [_rows.record(r) for r in got.get("journal", [])]
    intents = [_rows.intent(r) for r in got.get("intents", [])]
    resumes = [_rows.resume(r) for r in got.get("resumes", [])]
    state, consumed = got["state"], got.get("consumed")
    return TakeoverContext(
        records, intents, resumes[-1] if resumes else None,
        None if state is None else _rows.state(state),
        None if consumed is None else (_rows.wait(consumed), _rows.joined_event(consumed)))
