"""`stead db migrate`: bring a database's schema up to date explicitly (opening
a store does it too, safely when many processes start at once)."""

from __future__ import annotations

import click

from stead.cli import common
from stead.store import display_url, open_store, sql_files


@click.group("db")
def db_group() -> None:
    """The database: schema migrations."""


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
