"""Migrations: a run's checkpoint moved from one workflow version to another.

    @app.migration("refund_order", from_version=1, to_version=2)
    def to_v2(old: stead.MigrationView) -> stead.Migrated:
        return stead.Migrated(args=[*old.args, "EUR"],
                              journal=old.rename("check", "check_eligibility"))

A migration is a pure function of a read-only view of the run (its input,
journal, task state, open waits and effects) returning the new input and
the journal the new version replays: records kept, renamed, or cut at a
position. It may never lose an effect's record (an intent or an outcome):
`new_journal` refuses such a result, since the new code would then send
again what may have been sent. Applying one (`takeover`, `Client.migrate`)
archives the old journal, so it can be rolled back.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from stead import errors
from stead.records import Record, RecordKind, WaitRow
from stead.replay import Journal


@dataclasses.dataclass(frozen=True)
class MigrationView:
    """What a migration sees of a run, read-only: its `args`/`kwargs` (as
    JSON values), its journal `records` in commit order, its task `state`
    (JSON, None if none) at `state_version`, and its `open_waits`."""

    run_id: str
    workflow: str
    from_version: int
    to_version: int
    task_id: str | None
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    records: tuple[Record, ...]
    state: Any
    state_version: int
    open_waits: tuple[WaitRow, ...]

    @property
    def effects(self) -> dict[str, tuple[Record, ...]]:
        """Each effect's records (its phases), by address."""
        found: dict[str, list[Record]] = {}
        for r in self.records:
            if r.kind == RecordKind.EFFECT:
                found.setdefault(r.addr, []).append(r)
        return {addr: tuple(rs) for addr, rs in found.items()}

    def rename(self, old: str, new: str, records: Sequence[Record] | None = None
               ) -> list[Record]:
        """`records` (default: the journal) with every call named `old` named `new`."""
        return [r.evolve(name=new) if r.name == old else r
                for r in (self.records if records is None else records)]

    def cut(self, at: int, records: Sequence[Record] | None = None) -> list[Record]:
        """`records` (default: the journal) before seq `at`: the new code goes
        on live from there. Refused later if it drops an effect's record."""
        return [r for r in (self.records if records is None else records) if r.seq < at]


@dataclasses.dataclass(frozen=True)
class Migrated:
    """What a migration returns: the run's input under the new version, and
    the journal it replays (None: the journal as it is)."""

    args: Sequence[Any] = ()
    kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    journal: Sequence[Record] | None = None


MigrationFn = Callable[[MigrationView], Migrated]


@dataclasses.dataclass(frozen=True)
class Migration:
    workflow: str
    from_version: int
    to_version: int
    fn: MigrationFn

    @property
    def source(self) -> str:
        return f"{self.workflow}@{self.from_version}"

    @property
    def target(self) -> str:
        return f"{self.workflow}@{self.to_version}"

    def __call__(self, view: MigrationView) -> Migrated:
        """Run the migration function; what it raises or returns wrongly is a
        `MigrationRefused` naming the migration."""
        try:
            made = self.fn(view)
        except errors.MigrationRefused:
            raise
        except Exception as exc:
            raise errors.MigrationRefused(
                f"migration {self.source} -> {self.target} raised on run {view.run_id}: "
                f"{type(exc).__qualname__}: {exc}") from exc
        if inspect.isawaitable(made):
            raise errors.MigrationRefused(
                f"migration {self.source} -> {self.target} is async; a migration is a plain "
                "function of the run's view (it reads nothing and calls nothing)")
        if not isinstance(made, Migrated):
            raise errors.MigrationRefused(
                f"migration {self.source} -> {self.target} returned {type(made).__name__}, "
                "not a stead.Migrated")
        return made


def _intent_or_outcome(r: Record) -> tuple[str, int, str, str]:
    return (r.addr, r.attempt, r.status, r.payload)


def new_journal(migration: Migration, view: MigrationView, made: Migrated) -> tuple[Record, ...]:
    """The journal `made` says the new version replays, numbered from 0 in
    the order given, checked: every effect record of the old journal is in
    it, unchanged but for its name and digest; and it is a journal replay
    can read."""
    given = view.records if made.journal is None else tuple(made.journal)
    if not all(isinstance(r, Record) for r in given):
        raise errors.MigrationRefused(
            f"migration {migration.source} -> {migration.target} returned a journal of "
            "something other than stead records (use view.records, view.rename, view.cut, "
            "record.evolve)")
    kept = {_intent_or_outcome(r) for r in given if r.kind == RecordKind.EFFECT}
    lost = [r for r in view.records
            if r.kind == RecordKind.EFFECT and _intent_or_outcome(r) not in kept]
    if lost:
        first = lost[0]
        raise errors.MigrationRefused(
            f"migration {migration.source} -> {migration.target} would lose "
            f"{len(lost)} record(s) of effects of run {view.run_id}, first effect "
            f"{first.name!r} ({first.status}, seq {first.seq}, at {first.addr}): the new "
            "code would not know what was sent. Keep every effect record (rename it if need "
            "be), or cut the journal after the last one")
    numbered = tuple(r.numbered(seq) for seq, r in enumerate(given))
    for r in numbered:
        if r.kind == RecordKind.CUT and json.loads(r.payload).get("from_seq", 0) > r.seq:
            raise errors.MigrationRefused(f"a cut record at seq {r.seq} points past itself")
    try:
        Journal(view.run_id, numbered)
    except errors.CorruptRecord as exc:
        raise errors.MigrationRefused(
            f"migration {migration.source} -> {migration.target} made a journal replay "
            f"cannot read: {exc}") from exc
    return numbered
