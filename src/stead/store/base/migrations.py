"""Moving a run to another version of its code and back, and the journals
that were archived on the way."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stead.store import _rows
from stead.store.base.part import StorePart
from stead.store.seam import Writing
from stead.store.transactions import common
from stead.store.transactions import migrations as tx

if TYPE_CHECKING:  # annotations only: a store that lists runs need not build them
    from stead.records import Fence, MigrationPlan, MigrationRow, Record, ResumeRecord, RunRow


class Migrations(StorePart):
    """The `Store`'s operations on moving a run between versions of its code."""

    async def migrate_run(self, plan: MigrationPlan, *, fence: Fence | None = None,
                          resume: ResumeRecord | None = None) -> tuple[RunRow, MigrationRow]:
        """Apply `plan` in one transaction (see `transactions.migrations.migrate_run`):
        the old journal is archived, never deleted. Raises `MigrationRefused`
        (nothing written) if the run moved since the plan was made."""
        where, now = self.database.display, self.clock.now()
        return await self.database.write(
            lambda: tx.migrate_run(plan, fence, resume, now, where, self.database.lease_now()),
            Writing(landed=lambda _: tx.migrated(plan.run_id, plan)),
        )

    async def rollback_run(self, run_id: str, author: str, resume: ResumeRecord
                           ) -> tuple[RunRow, MigrationRow]:
        """Undo the run's last migration if nothing was journaled since
        (`MigrationRefused` if something was, or there is none)."""
        where, now = self.database.display, self.clock.now()
        return await self.database.write(
            lambda: tx.rollback_run(run_id, author, resume, now, where,
                                    self.database.lease_now()),
            Writing(landed=lambda _: tx.rolled_back(run_id)),
        )

    async def list_migrations(self, run_id: str) -> list[MigrationRow]:
        return await self.database.read(lambda: common.read_all(
            "list_migrations", {"run_id": run_id}, _rows.migration))

    async def archived_journal(self, run_id: str, migration: int) -> list[Record]:
        """The journal as it was before the run's migration number `migration`."""
        return await self.database.read(lambda: common.read_all(
            "load_archive", {"run_id": run_id, "migration": migration}, _rows.record))
