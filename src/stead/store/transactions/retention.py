"""What leaves a database and what comes in: finished runs found prunable,
exported and deleted, and a run exported elsewhere imported here."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from stead import errors
from stead.store import _rows
from stead.store.seam import NOT_LANDED, Flow, NotLanded, execute, one, rows

if TYPE_CHECKING:  # for annotations; imported below where one is made
    from stead.records import ConversationPart, Record, RunExport, RunRow, StateRow, WaitRow


# What a run leaves besides its journal and events, deleted with it in this
# order (the run last: the others name it); a day's partitions emptied whole
# take the journal and the events (`transactions.days.empty_day`).
BESIDE_JOURNAL = ("delete_resumes", "delete_wait_requests", "delete_waits", "delete_intents",
                  "delete_migrations", "delete_journal_archive", "delete_lineage",
                  "delete_snapshots", "delete_operator_actions", "delete_rejected_tally",
                  "delete_streams", "delete_run_blobs", "delete_payload_keys",
                  "delete_conversation_parts", "delete_runs")


def prunable(cutoff: float, limit: int, run_ids: Sequence[str] | None = None
             ) -> Flow[list[str]]:
    # The least and greatest id bound the journal's days PostgreSQL reads.
    found = yield rows("prunable_runs" if run_ids is None else "prunable_runs_of", {
        "cutoff": cutoff, "limit": limit,
        "run_ids": None if run_ids is None else list(run_ids),
        "id_min": min(run_ids) if run_ids else None,
        "id_max": max(run_ids) if run_ids else None})
    return [str(r["run_id"]) for r in found]


def export_runs(run_ids: Sequence[str]) -> Flow[list[RunExport]]:
    """Everything stored of each run."""
    # A history's records are imported where one is made: a store that only
    # lists runs never builds them (see `stead.records`).
    from stead.records import ConversationPart, RunExport

    out = []
    for run_id in run_ids:
        key = {"run_id": run_id}
        row = yield one("get_run", key)
        if row is None:
            continue
        out.append(RunExport(
            run=_rows.run(row),
            journal=tuple(_rows.record(r) for r in (yield rows("load_journal", key))),
            resumes=tuple(_rows.resume(r) for r in (yield rows("list_resumes", key))),
            waits=tuple(_rows.wait(r) for r in (yield rows("run_waits", key))),
            events=tuple(_rows.event(r) for r in (yield rows(
                "list_events", {**key, "limit": 1_000_000}))),
            intents=tuple(_rows.intent(r) for r in (yield rows("list_intents", key))),
            conversation=tuple(sorted(
                (ConversationPart(str(r["name"]), None if r["parent"] is None
                                  else str(r["parent"]), str(r["body"]))
                 for r in (yield rows("conversation_parts", key))), key=lambda p: p.name)),
        ))
    return out


def delete_runs(cutoff: float, run_ids: Sequence[str]) -> Flow[list[str]]:
    """Delete those of `run_ids` that may still be pruned (checked again
    here, in the deleting transaction), with everything stored of them."""
    keep = yield from prunable(cutoff, len(run_ids) or 1, run_ids)
    if keep:
        ids = {"run_ids": keep}
        for query in ("delete_journals", "delete_events", *BESIDE_JOURNAL):
            yield execute(query, ids)
    return keep


def import_run(run: RunRow, journal: Sequence[Record], waits: Sequence[WaitRow],
               state: StateRow | None, where: str,
               conversation: Sequence[ConversationPart] = ()) -> Flow[RunRow]:
    """Store a run exported from another database: its row (no lease), its
    journal, its waits, its task state if the task has none here, and the
    parts of its model calls' conversation (sealed, with encryption on, as
    the run's own). Refused if a run with its id exists."""
    params = {name: getattr(run, name) for name in (
        "run_id", "workflow", "version", "task_id", "status", "input", "result", "error",
        "epoch", "created_at", "updated_at", "wake_at")}
    row = yield one("import_run", params)
    if row is None:
        raise errors.InvalidInput(
            f"{where} already holds a run {run.run_id} (or a live run of task "
            f"{run.task_id!r}); nothing was imported")
    for r in journal:
        yield execute("insert_record", _rows.record_params(run.run_id, r))
    for w in waits:
        yield execute("import_wait", {name: getattr(w, name) for name in (
            "wait_id", "run_id", "addr", "kind", "bind", "schema", "token_hash", "task_key",
            "expires_at", "state", "event_id", "created_at", "closed_at")})
        if w.request is not None:
            yield execute("insert_wait_request", {"wait_id": w.wait_id, "run_id": run.run_id,
                                                  "request": w.request})
    for p in conversation:
        yield execute("insert_conversation_part", {
            "run_id": run.run_id, "name": p.name, "parent": p.parent, "body": p.body})
    if state is not None:
        yield execute("lock_state", {"task_key": state.task_key})
        if (yield one("read_state", {"task_key": state.task_key})) is None:
            params = {"task_key": state.task_key, "version": state.version, "data": state.data,
                      "run_id": run.run_id, "now": state.updated_at or 0.0}
            yield execute("upsert_state", params)
            yield execute("insert_state_history", params)
    return _rows.run(row)


def imported(run: RunRow) -> Flow[RunRow | NotLanded]:
    row = yield one("get_run", {"run_id": run.run_id})
    return NOT_LANDED if row is None else _rows.run(row)
