"""`stead blobs gc`: delete the large values' blobs no run or task state owns (orphans of
a write whose reference never committed, or of a prune that stopped before
deleting them), once older than a grace (see `stead.payloads`)."""

from __future__ import annotations

import click

from stead.cli import common
from stead.payloads import references


@click.group("blobs")
def blobs_group() -> None:
    """The blob store of large values: collect orphans (gc).

    The store is STEAD_BLOBS; for SQLite, by default the directory beside the
    database (stead.db.blobs)."""


@blobs_group.command("gc")
@click.option("--dry-run", is_flag=True, help="List the orphans; delete nothing.")
@click.option("--grace", type=common.SECONDS_OR_ZERO, default=3600.0, show_default=True,
              help="Keep orphans younger than this many seconds: a write in flight has not "
                   "committed its reference yet.")
@click.pass_context
def gc(ctx: click.Context, dry_run: bool, grace: float) -> None:
    """Find the blobs no run or task state owns that are older than the grace, and delete
    them (with --dry-run, list them). Owned blobs go with their runs
    (`stead db prune`)."""
    url = common.database_url(ctx)
    common.require_database(url)

    async def go() -> tuple[str | None, list[str], int, int]:
        async with common.opened_store(url) as store:
            where = None if store.large is None else store.large.blobs.url
            found = await store.collect_blobs(grace=grace, dry_run=dry_run)
            return where, found.orphans, found.orphan_bytes, found.kept

    where, orphans, size, kept = common.run_async(go())
    if where is None:
        click.echo(f"no blob store: large values are kept inline ({references.BLOBS_ENV} is "
                   "unset)")
        return
    for sha256 in orphans:
        click.echo(sha256)
    verb = "would delete" if dry_run else "deleted"
    click.echo(f"{verb} {len(orphans)} orphan(s) ({size} bytes) in {common.safe(where)}; "
               f"kept {kept} blob(s)" + (" (dry run: nothing deleted)" if dry_run else ""))
