"""Moving a run to another version of its code, and back: its journal
archived, never deleted."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from stead import errors
from stead.store import _rows
from stead.store.seam import NOT_LANDED, Flow, NotLanded, execute, fence_params, one, rows, stale
from stead.store.transactions import common

if TYPE_CHECKING:  # for annotations; imported below where one is made
    from stead.records import Fence, MigrationPlan, MigrationRow, ResumeRecord, RunRow


def _movable(run: RunRow, lease_now: float | None, what: str) -> Flow[None]:
    """A person may migrate or roll back only a live run no worker holds
    (its lease judged by the database's clock, or `lease_now`)."""
    if not run.live:
        raise errors.MigrationRefused(
            f"run {run.run_id} is {run.status}: there is nothing to {what}")
    if run.lease_owner is None:
        return
    now = float((yield one("lease_now", {"lease_now": lease_now}))["now"])
    if (run.lease_expires_at or 0.0) > now:
        raise errors.MigrationRefused(
            f"run {run.run_id} is held by worker {run.lease_owner} (lease until "
            f"{run.lease_expires_at:.0f}); stop that worker or wait for the run to suspend, "
            f"then {what} it")


def migrate_run(plan: MigrationPlan, fence: Fence | None, resume: ResumeRecord | None,
                now: float, where: str, lease_now: float | None,
                ) -> Flow[tuple[RunRow, MigrationRow]]:
    """Apply `plan`: archive the journal, write the migrated one, move the
    run to the new version and input, and record the migration (and, for a
    person's migration, its resume record), in one transaction. By the
    run's holder (`fence`: it keeps its lease) or by a person (the run must
    be live and held by no one; its epoch moves on)."""
    # A history's records are imported where one is made: a store that only
    # lists runs never builds them (see `stead.records`).
    from stead.records import MigrationRow

    run_id = plan.run_id
    yield execute("lock_run", {"run_id": run_id})
    row = yield one("get_run", {"run_id": run_id})
    if row is None:
        raise common.unknown_run(run_id, where)
    run = _rows.run(row)
    if fence is not None:
        if (yield one("fence", fence_params(fence))) is None:
            raise stale(fence)
    else:
        yield from _movable(run, lease_now, "migrate")
    length = int((yield one("next_seq", {"run_id": run_id}))["seq"])
    if (run.version, run.input, length) != (plan.from_version, plan.old_input,
                                            plan.records_before):
        raise errors.MigrationRefused(
            f"run {run_id} moved while its migration was made (now version {run.version}, "
            f"{length} journal record(s); the migration was made from version "
            f"{plan.from_version} and {plan.records_before}); nothing changed, try again")
    number = len((yield rows("list_migrations", {"run_id": run_id}))) + 1
    yield execute("archive_journal", {"run_id": run_id, "migration": number})
    yield execute("delete_journal", {"run_id": run_id})
    for r in plan.records:
        yield execute("insert_record", _rows.record_params(run_id, r))
    code = {"run_id": run_id, "version": plan.to_version, "input": plan.new_input, "now": now}
    if fence is not None:
        moved = yield one("set_code_fenced", {**code, **fence_params(fence)})
    else:
        moved = yield one("set_code", code)
    new = _rows.run(moved)
    made = MigrationRow(run_id, number, plan.from_version, plan.to_version, plan.old_input,
                        plan.new_input, plan.records_before, len(plan.records), plan.author,
                        now, new.epoch)
    yield execute("insert_migration", _rows.migration_params(made))
    if resume is not None:
        yield execute("insert_resume", _rows.resume_params(
            dataclasses.replace(resume, epoch=new.epoch, at=now)))
    if fence is None:
        yield execute("notify_work")
    return new, made


def migrated(run_id: str, plan: MigrationPlan
             ) -> Flow[tuple[RunRow, MigrationRow] | NotLanded]:
    found = [_rows.migration(r) for r in (yield rows("list_migrations", {"run_id": run_id}))]
    row = yield one("get_run", {"run_id": run_id})
    if not found or row is None:
        return NOT_LANDED
    last = found[-1]
    if (last.from_version, last.to_version, last.records_before, last.new_input) != (
            plan.from_version, plan.to_version, plan.records_before, plan.new_input):
        return NOT_LANDED
    return _rows.run(row), last


def rollback_run(run_id: str, author: str, resume: ResumeRecord, now: float, where: str,
                 lease_now: float | None) -> Flow[tuple[RunRow, MigrationRow]]:
    """Undo the run's last migration: put its archived journal, version and
    input back, if nothing was journaled since."""
    yield execute("lock_run", {"run_id": run_id})
    row = yield one("get_run", {"run_id": run_id})
    if row is None:
        raise common.unknown_run(run_id, where)
    run = _rows.run(row)
    found = [_rows.migration(r) for r in (yield rows("list_migrations", {"run_id": run_id}))]
    if not found or found[-1].rolled_back_at is not None:
        raise errors.MigrationRefused(f"run {run_id} has no migration to roll back")
    last = found[-1]
    yield from _movable(run, lease_now, "roll back")
    length = int((yield one("next_seq", {"run_id": run_id}))["seq"])
    if length != last.records_after or run.version != last.to_version:
        raise errors.MigrationRefused(
            f"run {run_id} went on after its migration to version {last.to_version} "
            f"({length - last.records_after} record(s) journaled since): rolling back would "
            "lose them; nothing changed")
    yield execute("delete_journal", {"run_id": run_id})
    yield execute("restore_journal", {"run_id": run_id, "migration": last.number})
    moved = yield one("set_code", {"run_id": run_id, "version": last.from_version,
                                   "input": last.old_input, "now": now})
    new = _rows.run(moved)
    yield execute("mark_rolled_back", {"run_id": run_id, "number": last.number, "now": now,
                                       "author": author})
    yield execute("insert_resume", _rows.resume_params(
        dataclasses.replace(resume, epoch=new.epoch, at=now, from_seq=last.records_before)))
    yield execute("notify_work")
    return new, dataclasses.replace(last, rolled_back_at=now, rolled_back_by=author)


def rolled_back(run_id: str) -> Flow[tuple[RunRow, MigrationRow] | NotLanded]:
    found = [_rows.migration(r) for r in (yield rows("list_migrations", {"run_id": run_id}))]
    row = yield one("get_run", {"run_id": run_id})
    if not found or found[-1].rolled_back_at is None or row is None:
        return NOT_LANDED
    return _rows.run(row), found[-1]
