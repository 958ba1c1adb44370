"""Rows as records, and records as query parameters, for both dialects: a
row is read by column name (`sqlite3.Row` and psycopg's dict rows both
allow it), and columns a newer schema added are ignored."""

from __future__ import annotations

from typing import Any

from stead.records import (
    Backlog,
    EventRow,
    IntentRow,
    Record,
    ResumeRecord,
    RunRow,
    StateRow,
    WaitRow,
)

Row = Any  # sqlite3.Row or a psycopg dict row


def run(row: Row) -> RunRow:
    return RunRow(
        row["run_id"], row["workflow"], row["version"], row["task_id"], row["status"],
        row["input"], row["result"], row["error"], row["epoch"], row["lease_owner"],
        row["lease_expires_at"], row["created_at"], row["updated_at"], row["wake_at"],
        # A store still on an older schema (before 7) has no intent column
        # (and `in` on an sqlite3.Row looks at its values, not its names).
        row["intent_version"] if "intent_version" in row.keys() else 0,  # noqa: SIM118
        *_queue_columns(row),
    )


def _queue_columns(row: Row) -> tuple[str | None, int, str | None, float | None]:
    """queue, priority, dedup_key, started_at; a store before schema 12 has none."""
    if "queue" not in row.keys():  # noqa: SIM118
        return None, 0, None, None
    return row["queue"], row["priority"], row["dedup_key"], row["started_at"]


def intent(row: Row) -> IntentRow:
    return IntentRow(row["run_id"], row["version"], row["intent"], row["author"], row["why"],
                     row["at"])


def intent_params(r: IntentRow) -> dict[str, Any]:
    return {"run_id": r.run_id, "version": r.version, "intent": r.intent, "author": r.author,
            "why": r.why, "at": r.at}


def backlog(row: Row) -> Backlog:
    return Backlog(row["workflow"], int(row["version"]), int(row["runnable"]),
                   int(row["leased"]), row["next_expiry"])


def record(row: Row) -> Record:
    return Record(
        row["seq"], row["addr"], row["attempt"], row["kind"], row["name"], row["digest"],
        row["status"], row["payload"], row["epoch"], row["at"],
    )


def resume(row: Row) -> ResumeRecord:
    return ResumeRecord(
        row["run_id"], row["epoch"], row["worker_id"], row["at"], row["from_seq"],
        row["code_version"], row["reused"], row["detail"],
    )


def wait(row: Row) -> WaitRow:
    return WaitRow(**{name: row[name] for name in _WAIT_FIELDS})


def event(row: Row) -> EventRow:
    return EventRow(**{name: row[name] for name in _EVENT_FIELDS})


def state(row: Row) -> StateRow:
    return StateRow(row["task_key"], row["version"], row["data"], row["run_id"],
                    row["updated_at"])


def record_params(run_id: str, r: Record) -> dict[str, Any]:
    return {
        "run_id": run_id, "seq": r.seq, "addr": r.addr, "attempt": r.attempt,
        "kind": r.kind, "name": r.name, "digest": r.digest, "status": r.status,
        "payload": r.payload, "epoch": r.epoch, "at": r.at,
    }


def resume_params(r: ResumeRecord) -> dict[str, Any]:
    return {
        "run_id": r.run_id, "epoch": r.epoch, "worker_id": r.worker_id, "at": r.at,
        "from_seq": r.from_seq, "code_version": r.code_version, "reused": r.reused,
        "detail": r.detail,
    }


def event_params(e: EventRow) -> dict[str, Any]:
    return {name: getattr(e, name) for name in _EVENT_FIELDS}


def wait_params(w: WaitRow) -> dict[str, Any]:
    """What inserting a new (open) wait takes."""
    return {name: getattr(w, name) for name in _WAIT_INSERT}


_WAIT_FIELDS = WaitRow.__dataclass_fields__.keys()
_WAIT_INSERT = tuple(n for n in _WAIT_FIELDS
                     if n not in ("state", "event_id", "closed_at", "bad_tokens", "locked_at"))
_EVENT_FIELDS = EventRow.__dataclass_fields__.keys()
