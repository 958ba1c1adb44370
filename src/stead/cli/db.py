"""`stead db migrate`: bring a database's schema up to date explicitly, or
(`--dry-run`) say what that would apply; opening a store applies what
`STEAD_MIGRATE` allows (see `stead.store.schema_versions`). `stead db
prune`: delete finished runs older than an age (see `stead.retention`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from stead import errors, retention
from stead.cli import common
from stead.store import display_url, open_store, upgrade

if TYPE_CHECKING:
    from stead.store.schema_versions import Report


@click.group("db")
def db_group() -> None:
    """The database: schema migrations, retention."""


@db_group.command("migrate")
@click.option("--dry-run", is_flag=True,
              help="List the pending migrations, each compatible or breaking, online or "
                   "locking; apply nothing.")
@click.option("--lock-timeout", type=common.SECONDS, default=2.0, show_default=True,
              help="PostgreSQL: how long one statement may wait for a lock before the "
                   "migration is rolled back and tried again (for up to a minute).")
@click.pass_context
def migrate(ctx: click.Context, dry_run: bool, lock_timeout: float) -> None:
    """Create the schema, or apply the migrations it lacks, then exit. A
    breaking migration is refused while a live worker runs older code.
    Compatible migrations leave older workers running (the compatibility
    window); see docs/guides/platform/upgrading.md."""
    url = common.database_url(ctx)
    if dry_run:
        common.require_database(url)  # a dry run makes no database where there is none
    report = common.run_async(upgrade(url, dry_run=dry_run, lock_timeout=lock_timeout))
    common.echo(_said(report, dry_run, display_url(url)))


def _said(report: Report, dry_run: bool, where: str) -> str:
    """What `stead db migrate` prints: the versions, and each migration
    pending or applied, with what it declares."""
    from stead import release
    from stead.store import schema_versions

    running = f"stead {release.__version__}"
    found, latest = report.found.version, report.latest
    if found > latest:
        return schema_versions.window_line(report.found, latest, where)
    if report.applied:
        return "\n".join([f"{where}: schema {found} -> {report.version} ({running})",
                          *(f"  applied {m.label}: {m.traits}" for m in report.applied)])
    if not report.pending:
        return f"{where}: schema {found}, up to date ({running})"
    if not dry_run:  # another process applied them while this one waited for the lock
        return (f"{where}: schema {latest}, up to date ({running}); another process applied "
                f"{', '.join(m.label for m in report.pending)} meanwhile")
    older = {m.version: [w for w in report.live if w.older_than(m.version)]
             for m in report.pending if not m.compatible}
    lines = [f"{where}: schema {found}; {running} needs schema {latest}"]
    for m in report.pending:
        blocked = older.get(m.version)
        lines.append(f"  {m.label}: {m.traits}" + (
            f" (refused while {len(blocked)} live worker(s) run older code: "
            f"{', '.join(w.worker_id for w in blocked[:3])})" if blocked else ""))
    lines.append(f"{len(report.pending)} migration(s) would be applied by `stead db migrate` "
                 "(dry run: nothing changed)")
    return "\n".join(lines)


@db_group.command("prune")
@click.option("--older-than", "older_than", required=True, metavar="AGE",
              help="Delete finished runs last changed longer ago than this: 30d, 12h, 90m.")
@click.option("--dry-run", is_flag=True, help="Count what would be deleted; delete nothing.")
@click.option("--export", "export", type=click.Path(dir_okay=False), default=None,
              help="Append each run (row, journal, waits, events...) as a JSON line to this "
                   "file before it is deleted.")
@click.option("--batch", default=retention.BATCH, show_default=True, type=common.COUNT,
              help="Runs deleted per transaction.")
@click.pass_context
def prune(ctx: click.Context, older_than: str, dry_run: bool, export: str | None,
          batch: int) -> None:
    """Delete finished runs older than AGE, in bounded batches: never a live
    run, never one stopped for a person, never one whose parent is live, never
    one with an effect whose outcome is unknown. Rejected events older than
    AGE go too, of any run (they decide nothing later)."""
    now = common.started(ctx)  # the age counts from when the command was given
    url = common.database_url(ctx)
    common.require_database(url)
    try:
        age = retention.parse_age(older_than)
    except errors.InvalidInput as exc:
        raise click.BadParameter(str(exc), param_hint="'--older-than'") from None

    async def go() -> retention.PruneReport:
        store = await open_store(url)
        try:
            if export is None or dry_run:
                return await retention.prune(store, age, batch=batch, dry_run=dry_run, now=now)
            with open(export, "a", encoding="utf-8") as out:
                return await retention.prune(store, age, batch=batch, now=now,
                                             export=retention.json_lines(out))
        finally:
            await store.close()

    report = common.run_async(go())
    if report.dry_run:
        click.echo(f"{report.matched} finished run(s) older than {older_than} would be "
                   f"deleted, and {report.rejected} rejected event(s) received before then "
                   "(dry run: nothing deleted)")
        return
    click.echo(f"deleted {report.deleted} finished run(s) older than {older_than} in "
               f"{report.batches} batch(es)"
               + (f"; exported {report.exported} to {common.safe(export)}" if export else "")
               + f"; deleted {report.rejected} rejected event(s) received before then")
