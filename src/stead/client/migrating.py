"""Moving runs: to another version of their workflow (`migrate`, with a dry
replay first, and `rollback`), and to another database (`export_run`,
`import_run`)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from stead import bounds, errors, inputs, records
from stead.app import App
from stead.client import revisions
from stead.client.base import Base
from stead.client.info import RunInfo
from stead.exports import StoredRun
from stead.records import ConversationPart, MigrationRow

if TYPE_CHECKING:
    from stead import dryrun

# `dryrun` and `takeover` run workflow code: imported inside the methods that
# replay or load a run, so a client that only starts or lists runs (the
# command line's `runs ls`) does not load the workflow runtime.


@dataclasses.dataclass(frozen=True)
class MigrationReport:
    """What `Client.migrate` did or, with `dry_run`, would do: the versions,
    the journal's length before and after, the new input, and how the target
    version replays the migrated journal (`replay`, a dry replay: its
    `finding` is None when the code interprets all of it). `applied` are
    the stored migrations (empty for a dry run)."""

    run_id: str
    from_version: int
    to_version: int
    records_before: int
    records_after: int
    new_input: Any
    replay: dryrun.Replayed
    applied: tuple[MigrationRow, ...] = ()

    @property
    def ok(self) -> bool:
        return self.replay.finding is None



class Migrating(Base):
    """How `Client` moves a run to another version or another database."""

    async def export_run(self, run_id: str) -> StoredRun:
        """The run's history (row, journal, waits, task state, and the
        conversation its model calls sent): `dumps()` it to a file for
        `stead replay-check --from` or `import_run`."""
        from stead import takeover

        row = await self.store.get_run(run_id)
        stored = await takeover.load_stored(self.store, row)
        # Large values are read back in place of their references: the export
        # stands alone, wherever it is imported.
        run, journal = await self.store.inlined(stored.run, stored.journal)
        parts = await self.store.conversation_parts(run_id)
        conversation = tuple(ConversationPart(p.name, p.parent, p.body)
                             for _, p in sorted(parts.items()))
        return dataclasses.replace(stored, run=run, journal=journal,
                                   conversation=conversation)

    async def import_run(self, stored: StoredRun) -> RunInfo:
        """Store a run exported from another database (no lease; the task
        state only if the task has none here; its conversation with it, so
        `stead runs show RUN --conversation` reads as it did there). Checked whole first, as an
        export read from a file is (`StoredRun.checked`): `InvalidInput` if it
        is not a valid export, or its id (or a live run of its task) exists;
        either way nothing of it is stored."""
        stored = stored.checked()
        row = await self.store.import_run(stored.run.evolve(lease_owner=None,
                                                            lease_expires_at=None),
                                          stored.journal, stored.waits, stored.state,
                                          stored.conversation)
        return RunInfo.from_row(row)

    async def migrate(self, run_id: str, *, to: int, by: str | None = None,
                      dry_run: bool = False) -> MigrationReport:
        """Move a run to version `to` with the migrations the client's app
        registers (one after the other, if there are several): the old journal
        is archived (see `rollback`) and the migration recorded with who,
        when and from→to, in a resume record too. The run must be live and
        held by no worker. `dry_run`: only say what it would do. Either way
        the migrated journal is first replayed dry against version `to`;
        the migration is applied only if the report is `ok`. `by` (who
        migrates, recorded) defaults to the OS user running the client."""
        from stead import dryrun, takeover

        bounds.version(to, "to (the version to migrate to)")
        by = revisions.author(by)
        app = self._app("migrate")
        row = await self.store.get_run(run_id)
        path = dryrun.path_to(app, row.workflow, row.version, to)
        stored, plans = dryrun.migrated(app, await takeover.load_stored(self.store, row), path,
                                        by)
        [replayed] = await dryrun.replay_all(app, [stored])
        report = MigrationReport(run_id, row.version, to, plans[0].records_before,
                                 len(stored.journal), inputs.decode(stored.run.input),
                                 replayed)
        if dry_run or not report.ok:
            return report
        applied = []
        for plan in plans:
            resume = records.ResumeRecord(
                run_id=run_id, epoch=0, worker_id=f"migrated by {by}", at=0.0,
                from_seq=plan.records_before, code_version=f"{row.workflow}@{plan.to_version}",
                reused=0, detail=records.ResumeDetails(
                    plan.records_before, {}, {}, None,
                    {"applied": [_audit(plan, by)]}).to_json())
            _, made = await self.store.migrate_run(plan, resume=resume)
            applied.append(made)
        return dataclasses.replace(report, applied=tuple(applied))

    async def rollback(self, run_id: str, *, by: str | None = None) -> RunInfo:
        """Undo the run's last migration: its archived journal, version and
        input come back, if nothing was journaled since (else
        `MigrationRefused`). Audited in a resume record and on the migration,
        with `by` (default: the OS user running the client)."""
        by = revisions.author(by)
        row = await self.store.get_run(run_id)
        resume = records.ResumeRecord(
            run_id=run_id, epoch=0, worker_id=f"rolled back by {by}", at=0.0, from_seq=0,
            code_version=f"{row.workflow}@{row.version}", reused=0,
            detail=records.ResumeDetails(0, {}, {}, None, {"rolled_back": {
                "by": by, "from_version": row.version}}).to_json())
        new, _ = await self.store.rollback_run(run_id, by, resume)
        return RunInfo.from_row(new)

    def _app(self, what: str) -> App:
        if self.app is None:
            raise errors.SteadError(f"to {what} a run the client needs the app that registers "
                                    "the migration: Client(store, app)")
        return self.app


def _audit(plan: records.MigrationPlan, by: str) -> dict[str, Any]:
    return {"from_version": plan.from_version, "to_version": plan.to_version, "by": by,
            "records_before": plan.records_before, "records_after": len(plan.records)}
