"""`stead db migrate`: bring a database's schema up to date explicitly (opening
a store does it too, safely when many processes start at once). `stead db
prune`: delete finished runs older than an age (see `stead.retention`)."""

from __future__ import annotations

import click

from stead import errors, retention
from stead.cli import common
from stead.store import display_url, open_store, sql_files


@click.group("db")
def db_group() -> None:
    """The database: schema migrations, retention."""


@db_group.command("migrate")
@click.pass_context
def migrate(ctx: click.Context) -> None:
    """Create the schema, or apply the migrations it lacks, then exit."""
    url = common.database_url(ctx)
    dialect = "sqlite" if url.startswith("sqlite:") else "postgres"

    async def go() -> None:
        store = await open_store(url)  # migrates on open, under a lock
        await store.close()

    common.run_async(go())
    latest = max(v for v, _ in sql_files.migrations(dialect))
    click.echo(f"{display_url(url)}: schema at version {latest}")


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
