"""Durable streams, written once for both databases as flows (see `seam`).

An append is fenced like a journal write (a worker that lost the run cannot
append), and one transaction: the fence, the key's read-back (a replayed
append finds its entry and changes nothing), the stream's last entry (no
value after `closed`), for the first entry of a call's try the supersession
of that call's earlier tries, then the insert. The fence locks the run's row
on PostgreSQL and SQLite has one writer, so offsets are dense and in commit
order per stream.
"""

from __future__ import annotations

import json
from typing import Any

from stead import errors
from stead.records import Fence
from stead.store.seam import (
    NOT_LANDED,
    Flow,
    NotLanded,
    execute,
    fence_params,
    one,
    rows,
    stale,
)
from stead.stream_records import EntryKind, NewEntry, StreamEntry


def entry(row: Any) -> StreamEntry:
    return StreamEntry(row["run_id"], row["name"], int(row["pos"]), EntryKind(row["kind"]),
                       row["value"], bool(row["superseded"]), float(row["at"]))


def _params(fence: Fence, name: str, new: NewEntry) -> dict[str, Any]:
    return {"run_id": fence.run_id, "name": name, "entry_key": new.key,
            "kind": str(new.kind), "value": new.text, "call_addr": new.call,
            "call_try": new.attempt_of, "epoch": fence.epoch, "at": new.at}


def _insert(fence: Fence, name: str, pos: int, new: NewEntry) -> Flow[None]:
    yield execute("insert_stream_entry", {**_params(fence, name, new), "pos": pos})


def one_statement(new: NewEntry) -> bool:
    """Whether appending `new` writes with one statement alone (all but the
    first entry of a call's try, which may supersede others first)."""
    return not new.first


def append(fence: Fence, name: str, new: NewEntry) -> Flow[int]:
    """Append `new` to the stream; its offset (a replayed append: the offset
    it was given the first time). Most appends are one statement; when it
    writes nothing, the reads after it say why."""
    if one_statement(new):
        row = yield one("append_stream_entry", {**_params(fence, name, new),
                                                "worker_id": fence.worker_id})
        if row is not None:
            return int(row["pos"])
    if (yield one("fence", fence_params(fence))) is None:
        raise stale(fence)
    stream = {"run_id": fence.run_id, "name": name}
    found = yield one("stream_entry_by_key", {**stream, "entry_key": new.key})
    if found is not None:
        return int(found["pos"])
    last = yield one("last_stream_entry", stream)
    if last is not None and last["kind"] == EntryKind.CLOSED:
        raise errors.StreamClosed(
            f"stream {name!r} of run {fence.run_id} is closed: nothing can be appended to "
            "it. Append before `close()`, or write to a stream of another name.")
    pos = 1 if last is None else int(last["pos"]) + 1
    if new.first and new.call is not None:
        replaced = yield rows("supersede_stream_call", {
            **stream, "call_addr": new.call, "call_try": new.attempt_of})
        if replaced:
            offsets = sorted(int(r["pos"]) for r in replaced)
            note = json.dumps({"call": new.call, "offsets": [offsets[0], offsets[-1]],
                               "count": len(offsets)}, separators=(",", ":"))
            yield from _insert(fence, name, pos, NewEntry(
                f"superseded:{new.call}@{new.attempt_of}", EntryKind.SUPERSEDED, note, new.at))
            pos += 1
    yield from _insert(fence, name, pos, new)
    return pos


def appended(run_id: str, name: str, key: str) -> Flow[int | NotLanded]:
    """Read back an append whose commit went unacknowledged."""
    found = yield one("stream_entry_by_key", {"run_id": run_id, "name": name, "entry_key": key})
    return NOT_LANDED if found is None else int(found["pos"])


def read(run_id: str, name: str, after: int, limit: int) -> Flow[list[StreamEntry]]:
    found = yield rows("read_stream", {"run_id": run_id, "name": name, "after": after,
                                       "limit": limit})
    return [entry(row) for row in found]
