"""`stead grants renew|deny RUN TOOL`: a person's decision on a run's grant.
A renewal (a new expiry, a narrower scope) resumes a run paused on it; a
denial withdraws the grant and terminates a paused run."""

from __future__ import annotations

from typing import Any

import click

from stead.cli import common


@click.group("grants")
def grants_group() -> None:
    """Renew or deny the grants that let a run call its tools."""


@grants_group.command("renew")
@common.run_argument
@click.argument("tool")
@click.option("--expires-in", type=common.SECONDS, default=None,
              help="Seconds from now until the renewed grant expires.")
@click.option("--scope", "scope_json", metavar="JSON", default=None,
              help="The renewed scope, a JSON object (default: the grant's own).")
@click.option("--widen", is_flag=True,
              help="Allow a scope wider than the grant's (refused without it).")
@common.decision_options
@click.pass_context
def grants_renew(ctx: click.Context, run_id: str, tool: str, expires_in: float | None,
                 scope_json: str | None, widen: bool, by: str, why: str) -> None:
    """Renew RUN's grant for TOOL; a run paused on it resumes."""
    db = common.database_url(ctx)
    common.require_database(db)
    scope = None if scope_json is None else common.parse_json(scope_json, "'--scope'", dict)

    async def go() -> Any:
        async with common.opened_client(db) as client:
            return await client.renew_grant(run_id, tool, expires_in=expires_in, scope=scope,
                                            widen=widen, by=by, why=why)

    info = common.run_async(go())
    click.echo(f"renewed the grant for {common.safe(tool)} of run {common.safe(info.run_id)} "
               f"(status {info.status})")


@grants_group.command("deny")
@common.run_argument
@click.argument("tool")
@common.decision_options
@click.pass_context
def grants_deny(ctx: click.Context, run_id: str, tool: str, by: str, why: str) -> None:
    """Withdraw RUN's grant for TOOL; a run paused on it is terminated."""
    db = common.database_url(ctx)
    common.require_database(db)

    async def go() -> Any:
        async with common.opened_client(db) as client:
            return await client.deny_grant(run_id, tool, by=by, why=why)

    info = common.run_async(go())
    click.echo(f"denied the grant for {common.safe(tool)} of run {common.safe(info.run_id)} "
               f"(status {info.status})")
