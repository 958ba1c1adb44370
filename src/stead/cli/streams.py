"""`stead streams revoke`: take back end-user stream tokens (see
`stead.stream_tokens`) before they expire."""

from __future__ import annotations

import sys

import click

from stead import errors
from stead.cli import common


@click.group("streams")
def streams_group() -> None:
    """End users' stream tokens: take them back before they expire.

    An app mints a token with `Client.stream_token(run_id, ttl=...)` and hands
    its text to a browser, which reads /runs/RUN/streams/NAME?token=TEXT from
    the dashboard's server without a login. These commands take tokens back.
    """


@streams_group.command("revoke")
@click.argument("token_id", metavar="ID", required=False)
@click.option("--run", "run_id", metavar="RUN", default=None,
              help="Revoke every stream token of RUN minted until now.")
@click.pass_context
def revoke(ctx: click.Context, token_id: str | None, run_id: str | None) -> None:
    """Refuse a stream token from now on: its ID (`StreamToken.token_id`), or
    `-` to read the token itself from standard input (never give a token as
    an argument: arguments are seen by every user of the machine). With
    --run, every token of that run minted until now."""
    if (token_id is None) == (run_id is None):
        raise click.UsageError("give a token's ID (or - for the token on stdin), or --run RUN")
    if token_id == "-":
        token_id = sys.stdin.read(4096).strip()
    db = common.database_url(ctx)

    async def go() -> str:
        async with common.opened_client(db) as client:
            if run_id is not None:
                await client.revoke_stream_tokens(run_id)
                return f"every stream token of run {common.safe(run_id)} minted until now"
            assert token_id is not None
            return f"stream token {await client.revoke_stream_token(token_id)}"

    try:
        what = common.run_async(go())
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'ID'") from exc
    except errors.UnknownRun as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"revoked {what}")
