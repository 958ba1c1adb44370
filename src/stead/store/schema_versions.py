"""Schema versions: the numbered migrations this code knows, what each one
declares about a live fleet, and the gate every process passes when it opens
a database (docs/guides/platform/upgrading.md says the same to an operator).

Each migration file declares, in a line of its header, what applying it does
to the processes that run on the database:

    -- upgrade: compatible online
    -- upgrade: compatible online no-transaction
    -- upgrade: breaking locking

- `compatible` or `breaking`: whether code that knows only the migrations
  before it keeps working once it is applied. A compatible migration adds
  (tables, columns that may be null or have a default, indexes, triggers that
  keep what older code writes true) and changes nothing older code reads or
  writes.
- `online` or `locking`: whether it runs without stopping the reads or writes
  of a table that grows with runs for longer than a moment. On PostgreSQL an
  index built `CONCURRENTLY` or a column added without a rewrite is online; a
  plain `CREATE INDEX` on `runs` holds off every write to it while it builds.
  On SQLite every migration holds the file's write lock while it runs: one
  that is quick whatever the number of runs is online.
- `no-transaction` (PostgreSQL): its statements run one by one outside a
  transaction, as `CREATE INDEX CONCURRENTLY` must; each ends its line with
  `;`, and each can run again after a failure (`DROP INDEX CONCURRENTLY IF
  EXISTS` first). A database created from nothing has no rows to keep
  working: there, such a migration runs in the creating transaction, without
  `CONCURRENTLY`.

The gate, for code that knows the migrations up to L and a database whose
newest applied migration is V:

- V = L: the process opens.
- V < L: the database lacks migrations this code needs. The opener applies
  them as `STEAD_MIGRATE` allows (`OnOpen`: `all`, SQLite's default;
  `online`, PostgreSQL's default: a database created now, or pending
  migrations that are all compatible and online; `none`), else it raises
  `SchemaBehind` and writes nothing: `stead db migrate` applies them.
- V > L: a newer release migrated the database. The process keeps working
  while every migration past L is compatible (the compatibility window, said
  in one log line); a breaking one past L is `SchemaAhead`: it writes nothing,
  and a running worker that meets it stops claiming (`Store.check_schema`,
  at each heartbeat).
- A breaking migration is never applied while a live worker (a heartbeat in
  `worker_hosts`) runs code older than it: `MigrationBlocked` names them.

From schema 30 on, `stead_schema` keeps with each version its name, whether
it is compatible, when it was applied and by which stead release: what older
code reads to know whether it may go on.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import logging
import os
import re
from collections.abc import Iterable, Sequence
from typing import Any

from stead import errors, release
from stead.store import sql_files

log = logging.getLogger("stead.store")

ENV = "STEAD_MIGRATE"
# The first version whose row in `stead_schema` says what it is (migration 30
# added the columns): older rows hold their number alone.
DESCRIBED_FROM = 30
_HEADER = re.compile(r"^--\s*upgrade:(?P<traits>[^\n]*)$", re.MULTILINE)
_TRAITS = {"compatible": ("compatible", True), "breaking": ("compatible", False),
           "online": ("online", True), "locking": ("online", False),
           "no-transaction": ("transaction", False)}
_CONCURRENTLY = re.compile(r"\bCONCURRENTLY\b")
_STATEMENT_END = re.compile(r";[ \t]*$", re.MULTILINE)


class OnOpen(enum.StrEnum):
    """What opening a database whose schema is behind the code does (`STEAD_MIGRATE`)."""

    ALL = "all"  # apply every pending migration (SQLite's default)
    # Create a new database; apply pending ones only if all are compatible and
    # online (PostgreSQL's default).
    ONLINE = "online"
    NONE = "none"  # apply nothing: `stead db migrate` does


@dataclasses.dataclass(frozen=True)
class Migration:
    """One numbered migration of one dialect, as its file declares it."""

    version: int
    name: str
    compatible: bool
    online: bool
    transaction: bool
    script: str = dataclasses.field(repr=False)

    @property
    def label(self) -> str:
        return f"{self.version:04d} {self.name}"

    @property
    def traits(self) -> str:
        return ", ".join([("compatible" if self.compatible else "breaking"),
                          ("online" if self.online else "locking"),
                          *(() if self.transaction else ("no transaction",))])

    def statements(self) -> list[str]:
        """A `no-transaction` migration's statements, one by one, without
        their comments. A line ending in `;` ends a statement, unless it is
        inside a dollar-quoted body (`DO $$ ... $$;` runs as one statement,
        in one transaction)."""
        found: list[str] = []
        lines: list[str] = []
        quoted = False
        for line in self.script.splitlines():
            if not line.strip() or line.lstrip().startswith("--"):
                continue
            lines.append(line.rstrip())
            quoted ^= line.count("$$") % 2 == 1
            if not quoted and _STATEMENT_END.search(line):
                found.append("\n".join(lines))
                lines = []
        if _code("\n".join(lines)):
            found.append("\n".join(lines) + ";")
        return found

    def in_one_transaction(self) -> str:
        """The script as it runs inside a transaction: for a database created
        now, where building an index concurrently protects no one."""
        return self.script if self.transaction else _CONCURRENTLY.sub("", self.script)


def _code(text: str) -> bool:
    return any(line.strip() and not line.lstrip().startswith("--")
               for line in text.splitlines())


def parse(version: int, name: str, script: str) -> Migration:
    """A migration from its file; `ValueError` if its header does not declare
    whether it is compatible and online."""
    header = _HEADER.search(script)
    words = header["traits"].split() if header else []
    traits: dict[str, bool] = {"transaction": True}
    for word in words:
        if word not in _TRAITS:
            raise ValueError(f"migration {version:04d}_{name}: unknown trait {word!r} in its "
                             f"'-- upgrade:' line; use {', '.join(_TRAITS)}")
        key, value = _TRAITS[word]
        traits[key] = value
    if "compatible" not in traits or "online" not in traits:
        raise ValueError(f"migration {version:04d}_{name} must declare in its header "
                         "'-- upgrade: compatible|breaking online|locking' (see "
                         "stead/store/schema_versions.py)")
    return Migration(version, name, traits["compatible"], traits["online"],
                     traits["transaction"], script)


@functools.cache
def known(dialect: str) -> tuple[Migration, ...]:
    """The migrations this code carries for `dialect`, in order."""
    return tuple(parse(v, name, sql) for v, name, sql in sql_files.migration_files(dialect))


def latest(dialect: str = "sqlite") -> int:
    """The schema version this code needs (both dialects number their
    migrations alike: tests/test_postgres.py)."""
    return known(dialect)[-1].version


def stead_version() -> str:
    return release.__version__


def on_open(dialect: str, given: str | None = None) -> OnOpen:
    """The policy `given` (else `STEAD_MIGRATE`, else the dialect's default)."""
    text = given if given is not None else os.environ.get(ENV, "")
    if not text:
        return OnOpen.ALL if dialect == "sqlite" else OnOpen.ONLINE
    try:
        return OnOpen(text)
    except ValueError:
        where = "migrate=" if given is not None else ENV
        raise errors.StoreError(
            f"{where} is one of {', '.join(OnOpen)}, not {text!r}") from None


def lock_timeout_setting(seconds: float) -> str:
    """`seconds` as PostgreSQL's `lock_timeout` setting: whole milliseconds,
    at least one (0 would mean no bound at all)."""
    return f"{max(1, round(seconds * 1000))}ms"


@dataclasses.dataclass(frozen=True)
class Migrating:
    """How one opener treats the schema."""

    on_open: OnOpen = OnOpen.ALL
    # `stead db migrate`: apply every pending migration, breaking ones too
    # (unless live workers run older code).
    explicit: bool = False
    # `stead db migrate --dry-run`: judge and say; apply nothing, refuse nothing.
    dry_run: bool = False
    # PostgreSQL: how long one statement of a migration may wait for a lock
    # before it gives up (and is tried again, for up to `patience` seconds),
    # so that the writes queued behind its lock wait no longer than that.
    lock_timeout: float = 2.0
    patience: float = 60.0


@dataclasses.dataclass(frozen=True)
class Beyond:
    """A migration the database has and this code does not know, as the
    release that applied it described it (None: it did not say)."""

    version: int
    name: str | None
    compatible: bool | None
    stead_version: str | None

    @property
    def label(self) -> str:
        return f"{self.version:04d} {self.name or '(unnamed)'}"


@dataclasses.dataclass(frozen=True)
class Found:
    """What a database's `stead_schema` holds."""

    applied: frozenset[int]
    beyond: tuple[Beyond, ...] = ()

    @property
    def version(self) -> int:
        return max(self.applied, default=0)


@dataclasses.dataclass(frozen=True)
class LiveWorker:
    """A worker heard from lately, with the release and schema it runs (None:
    a release before schema 30, which did not say)."""

    worker_id: str
    stead_version: str | None
    schema_version: int | None

    def older_than(self, version: int) -> bool:
        return self.schema_version is None or self.schema_version < version


@dataclasses.dataclass(frozen=True)
class Report:
    """What an opener found and did: the database's version when it looked,
    the migrations it lacked and those this opener applied."""

    where: str
    found: Found
    latest: int
    pending: tuple[Migration, ...]
    applied: tuple[Migration, ...] = ()
    # On a dry run with a breaking migration pending: the live workers (any
    # older than it would block it).
    live: tuple[LiveWorker, ...] = ()

    @property
    def version(self) -> int:
        """The database's version now, as far as this opener knows."""
        return max([self.found.version, *(m.version for m in self.applied)])

    @property
    def in_window(self) -> bool:
        """The database is newer than the code, and all of that is compatible."""
        return self.found.version > self.latest


def beyond(row: Any) -> Beyond:
    """A `schema_beyond` row (sqlite3's or psycopg's, read by column name)."""
    compatible = row["compatible"]
    return Beyond(int(row["version"]), row["name"],
                  None if compatible is None else bool(compatible), row["stead_version"])


def live_worker(row: Any) -> LiveWorker:
    """A `live_worker_versions` row."""
    schema = row["schema_version"]
    return LiveWorker(row["worker_id"], row["stead_version"],
                      None if schema is None else int(schema))


def pending(found: Found, code: Sequence[Migration]) -> tuple[Migration, ...]:
    """The migrations of `code` the database has not applied."""
    return tuple(m for m in code if m.version not in found.applied)


def judge(found: Found, code: Sequence[Migration], migrating: Migrating,
          where: str) -> tuple[Report, tuple[Migration, ...]]:
    """The report of what the database holds, and the migrations this opener
    applies now. Raises `SchemaAhead` past the compatibility window and
    `SchemaBehind` when the policy leaves a pending migration unapplied
    (never on a dry run, which only says)."""
    report = Report(where, found, code[-1].version, pending(found, code))
    if found.version > report.latest:
        check_beyond(found.beyond, report.latest, where)
        if not migrating.dry_run:
            log.warning("%s", window_line(found, report.latest, where))
    todo = report.pending
    if not todo or migrating.dry_run:
        return report, ()
    policy = migrating.on_open
    left = [] if migrating.explicit else held(todo, policy, fresh=found.version == 0)
    if not left:
        return report, todo
    why = (f"{ENV}={policy}" if policy == OnOpen.NONE else
           "; ".join(f"{m.label} is {m.traits}" for m in left)
           + f" ({ENV}={policy} applies only compatible, online ones on open)")
    raise errors.SchemaBehind(
        f"{where}: the database is at schema {found.version} and this stead "
        f"({stead_version()}) needs schema {report.latest}; pending: "
        f"{', '.join(m.label for m in todo)}, not applied on open: {why}. Run `stead db "
        "migrate` (`--dry-run` first lists them), then try again")


def held(todo: Sequence[Migration], policy: OnOpen, *, fresh: bool) -> list[Migration]:
    """What of `todo` keeps opening under `policy` from applying them (it
    applies all or none): all under `none`, those not compatible and online
    under `online` (a database created now: none), none under `all`."""
    if policy == OnOpen.ALL or (fresh and policy == OnOpen.ONLINE):
        return []
    if policy == OnOpen.NONE:
        return list(todo)
    return [m for m in todo if not (m.compatible and m.online)]


def check_beyond(beyond: Iterable[Beyond], latest: int, where: str) -> None:
    """Raise `SchemaAhead` if a migration past `latest` is not compatible."""
    newer = sorted(beyond, key=lambda b: b.version)
    breaking = [b for b in newer if b.compatible is not True]
    if not breaking:
        return
    by = _migrated_by(newer)
    upgrade = (f"to stead {by} or later (in stead's checkout: git pull, then pip install -e "
               ".; see docs/install.md)" if by else
               "to the release that migrated it (CHANGELOG.md names each release's schema)")
    raise errors.SchemaAhead(
        f"{where}: the database is at schema {newer[-1].version}, newer than this stead "
        f"({stead_version()}, schema {latest}) can work with: migration {breaking[0].label} "
        f"changes what older code relies on, so this process writes nothing. Upgrade it "
        f"{upgrade}, then try again")


def window_line(found: Found, latest: int, where: str) -> str:
    """The one line an opener logs while it works inside the compatibility window."""
    newer = [b.label for b in found.beyond]
    by = _migrated_by(found.beyond)
    return (f"{where}: the database is at schema {found.version}, newer than this stead "
            f"({stead_version()}, schema {latest}); {', '.join(newer)} "
            f"{'is' if len(newer) == 1 else 'are'} compatible, so this process keeps "
            f"working: upgrade it to stead {by or 'the release that migrated it'} soon")


def _migrated_by(beyond: Sequence[Beyond]) -> str | None:
    """The release that applied the newest of `beyond`, if it said."""
    return next((b.stead_version for b in reversed(beyond) if b.stead_version), None)


def breaking_since(schema: int | None, version: int, code: Sequence[Migration]) -> list[Migration]:
    """The breaking migrations of `code` a worker whose code needs `schema`
    (None: a release before schema 30, which did not say) has not seen on a
    database at `version`: none while it works inside its window."""
    since = DESCRIBED_FROM - 1 if schema is None else schema
    return [m for m in code if since < m.version <= version and not m.compatible]


def needs_fleet(todo: Sequence[Migration]) -> bool:
    """Whether applying `todo` must first look for live workers of older code."""
    return any(not m.compatible for m in todo)


def check_fleet(todo: Sequence[Migration], live: Sequence[LiveWorker], where: str) -> None:
    """Raise `MigrationBlocked` if a breaking migration of `todo` would break
    a live worker that runs older code."""
    for m in todo:
        if m.compatible:
            continue
        older = [w for w in live if w.older_than(m.version)]
        if not older:
            continue
        shown = ", ".join(
            f"{w.worker_id} (stead {w.stead_version or 'before 0.2.0'}, schema "
            f"{w.schema_version if w.schema_version is not None else 'unknown'})"
            for w in older[:5]) + (f" and {len(older) - 5} more" if len(older) > 5 else "")
        raise errors.MigrationBlocked(
            f"{where}: migration {m.label} is breaking and {len(older)} live worker(s) run "
            f"older code: {shown}; applying it would break them, so nothing was applied. "
            "Stop those workers, run `stead db migrate` again, then start workers of the new "
            "release (`stead doctor` lists the fleet)")


def version_row(m: Migration, now: float) -> tuple[str, dict[str, object]]:
    """The query that records `m` as applied, and its parameters: from
    `DESCRIBED_FROM` on, with what older code reads of it."""
    if m.version < DESCRIBED_FROM:
        return "insert_version", {"version": m.version}
    return "insert_version_described", {
        "version": m.version, "name": m.name, "compatible": m.compatible,
        "applied_at": now, "stead_version": stead_version()}
