"""`stead tasks forget TASK --why TEXT`: erase one task's personal data
(every payload of its runs), keeping the audit (see docs/data.md)."""

from __future__ import annotations

import click

from stead import errors
from stead.cli import common


@click.group("tasks")
def tasks_group() -> None:
    """A task's runs as a whole: forget its personal data."""


@tasks_group.command("forget")
@click.argument("task_id", metavar="TASK")
@click.option("--why", required=True, help="Why it is forgotten (stored in clear, with who "
                                           "and when: no personal data in it).")
@click.option("--by", default=None, help="Who forgets it (default: the OS user).")
@click.pass_context
def tasks_forget(ctx: click.Context, task_id: str, why: str, by: str | None) -> None:
    """Forget every payload of TASK's runs at once: inputs, results, journal
    values, events, stream entries, intents, wait requests, task state. Its
    live runs end; none of its runs can be resumed or forked again. With
    encryption on, its runs' data keys are destroyed too. The audit stays:
    which runs, steps, effects, decisions, who and when."""
    db = common.database_url(ctx)
    common.require_database(db)

    async def go() -> tuple[int, int, bool]:
        async with common.opened_client(db) as client:
            done = await client.forget(task_id, why=why, by=by)
            return len(done.runs), len(done.ended), done.keys_destroyed

    try:
        runs, ended, destroyed = common.run_async(go())
    except errors.SteadError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"forgot task {task_id}: the payloads of {runs} runs"
               + (f" ({ended} live, now ended)" if ended else ""))
    if destroyed:
        click.echo("their data keys are destroyed: copies sealed under them (backups, "
                   "exports) open no more once the data key that wrapped them is retired "
                   "(stead keys rotate, stead keys reencrypt, then remove the old key)")
    else:
        click.echo("encryption is off: the payloads were overwritten in this database, but "
                   "backups made before now still hold them")
