"""Rows as records, and records as query parameters, for both dialects: a
row is read by column name (`sqlite3.Row` and psycopg's dict rows both
allow it), and columns a newer schema added are ignored."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from stead import records
from stead.records import ActionRow, IntentRow, Link, RunRow, StateRow

# A store that only lists runs builds none of the other records (see
# `stead.records`). Those of a journal, a takeover, waits and snapshots are
# written `records.Record`, which imports their module when the first is built
# (an import in each function would cost ~0.6 µs a row, a third of building a
# `Record`); those of a history and of the fleet are imported where one is.
if TYPE_CHECKING:
    from stead.records import Backlog, HostRow, MigrationRow, ScheduleRow

Row = Any  # sqlite3.Row or a psycopg dict row


# The runs columns later schemas added (intent 7, queues 12, children and
# deadlines 13, calls in flight 14), and what a read takes beside them (a
# lease ended early, 29; the tenant, 35, '' for none), each with what a row
# without it reads as.
_LATER_RUN_COLUMNS: dict[str, Any] = {
    "intent_version": 0, "queue": None, "priority": 0, "dedup_key": None, "started_at": None,
    "parent_id": None, "deadline": None, "cancel_requested": None, "in_flight": None,
    "prior_lease_until": None, "tenant": None,
}


def run(row: Row) -> RunRow:
    names = row.keys()  # `in` on an sqlite3.Row looks at its values, not its names
    later = {n: row[n] if n in names else default for n, default in _LATER_RUN_COLUMNS.items()}
    if later["tenant"] == "":  # stored for a run of no tenant
        later["tenant"] = None
    return RunRow(
        row["run_id"], row["workflow"], row["version"], row["task_id"], row["status"],
        row["input"], row["result"], row["error"], row["epoch"], row["lease_owner"],
        row["lease_expires_at"], row["created_at"], row["updated_at"], row["wake_at"],
        **later,
    )


def schedule(row: Row) -> ScheduleRow:
    from stead.records import ScheduleRow

    return ScheduleRow(row["name"], row["cron"], row["next_tick"], row["updated_at"])


def intent(row: Row) -> IntentRow:
    return IntentRow(row["run_id"], row["version"], row["intent"], row["author"], row["why"],
                     row["at"])


def intent_params(r: IntentRow) -> dict[str, Any]:
    return {"run_id": r.run_id, "version": r.version, "intent": r.intent, "author": r.author,
            "why": r.why, "at": r.at}


def link(row: Row) -> Link:
    return Link(row["run_id"], row["parent_id"], row["kind"], row["at_seq"], row["created_at"])


def link_params(r: Link) -> dict[str, Any]:
    return {"run_id": r.run_id, "parent_id": r.parent_id, "kind": r.kind, "at_seq": r.at_seq,
            "created_at": r.created_at}


def host(row: Row) -> HostRow:
    from stead.records import HostRow

    return HostRow(row["worker_id"], row["code"], row["role"], row["started_at"],
                   row["seen_at"], row["stopped_at"], row["policy_version"], row["live_until"],
                   row["stead_version"], row["schema_version"])


def migration(row: Row) -> MigrationRow:
    from stead.records import MigrationRow

    return MigrationRow(**{name: row[name] for name in MigrationRow.__dataclass_fields__})


def migration_params(m: MigrationRow) -> dict[str, Any]:
    return {name: getattr(m, name) for name in m.__dataclass_fields__}


def backlog(row: Row) -> Backlog:
    from stead.records import Backlog

    return Backlog(row["workflow"], int(row["version"]), int(row["runnable"]),
                   int(row["leased"]), row["next_expiry"])


def record(row: Row) -> records.Record:
    return records.Record(
        row["seq"], row["addr"], row["attempt"], row["kind"], row["name"], row["digest"],
        row["status"], row["payload"], row["epoch"], row["at"], row["arguments"],
    )


def resume(row: Row) -> records.ResumeRecord:
    return records.ResumeRecord(
        row["run_id"], row["epoch"], row["worker_id"], row["at"], row["from_seq"],
        row["code_version"], row["reused"], row["detail"],
    )


def wait(row: Row) -> records.WaitRow:
    """A wait; its request only where the query joined `wait_requests` (the
    reads a person's view goes through), else None."""
    names = row.keys()
    return records.WaitRow(**{name: row[name] for name in _fields(records.WaitRow)
                              if name != "request" or name in names})


def event(row: Row) -> records.EventRow:
    return records.EventRow(**{name: row[name] for name in _fields(records.EventRow)})


def joined_event(row: Row) -> records.EventRow | None:
    """The event a row carries as its `e_*` columns (`wait_and_event`: the
    one that consumed the wait; `run_waits_and_event`: the one stored under
    the delivered id), or None if there is none."""
    if row["e_event_id"] is None:
        return None
    return records.EventRow(**{name: row["e_" + name] for name in _fields(records.EventRow)})


def state(row: Row) -> StateRow:
    return StateRow(row["task_key"], row["version"], row["data"], row["run_id"] or None,
                    row["updated_at"])


def state_history(row: Row) -> StateRow:
    """A row of a task's state history (`at`: when that version was written;
    an empty `run_id`: a change from outside any run, by `author`)."""
    return StateRow(row["task_key"], row["version"], row["data"], row["run_id"] or None,
                    row["at"], row["author"], row["why"])


def action(row: Row) -> ActionRow:
    return ActionRow(**{name: row[name] for name in ActionRow.__dataclass_fields__})


def record_params(run_id: str, r: records.Record) -> dict[str, Any]:
    return {
        "run_id": run_id, "seq": r.seq, "addr": r.addr, "attempt": r.attempt,
        "kind": r.kind, "name": r.name, "digest": r.digest, "status": r.status,
        "payload": r.payload, "epoch": r.epoch, "at": r.at, "arguments": r.arguments,
    }


def resume_params(r: records.ResumeRecord) -> dict[str, Any]:
    return {
        "run_id": r.run_id, "epoch": r.epoch, "worker_id": r.worker_id, "at": r.at,
        "from_seq": r.from_seq, "code_version": r.code_version, "reused": r.reused,
        "detail": r.detail,
    }


def event_params(e: records.EventRow) -> dict[str, Any]:
    return {name: getattr(e, name) for name in _fields(records.EventRow)}


def wait_params(w: records.WaitRow) -> dict[str, Any]:
    """What inserting a new (open) wait takes."""
    return {name: getattr(w, name) for name in _wait_insert()}


@functools.cache
def _fields(record_class: type[Any]) -> tuple[str, ...]:
    """The names of a record class's fields, in order: read once a class,
    when the first is built or written, not as this module is imported."""
    return tuple(record_class.__dataclass_fields__)


@functools.cache
def _wait_insert() -> tuple[str, ...]:
    return tuple(n for n in _fields(records.WaitRow) if n not in (
        "state", "event_id", "closed_at", "bad_tokens", "locked_at", "request"))


def snapshot(row: Row) -> records.SnapshotRow:
    return records.SnapshotRow(*(row[name] for name in _fields(records.SnapshotRow)))


def snapshot_params(s: records.SnapshotRow) -> dict[str, Any]:
    return {name: getattr(s, name) for name in _fields(records.SnapshotRow)}
