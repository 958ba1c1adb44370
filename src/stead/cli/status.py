"""`stead status`: is the fleet healthy? One screen, from the database
(`stead.metrics.health`); exit 1 when something needs a person, for a cron
check."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

from stead.cli import common

if TYPE_CHECKING:
    from stead.metrics.health import Status

def _text(s: Status) -> str:
    lines = [f"database: reachable, schema {s.schema}"]
    lines.append(f"workers live: {sum(1 for w in s.workers if w['verdict'] != 'dead')}"
                 + (f" ({len(s.workers)} heard from)" if s.workers else ""))
    lines += [f"  {w['worker_id']}: {w['verdict']} ({w['reason']}); serves {w['serves']}"
              for w in s.workers]
    lines.append(f"queues: {len(s.queues)} with runnable runs"
                 if s.queues else "queues: nothing runnable")
    lines += [f"  {q['queue']}: {q['runnable']} runnable, oldest ready {q['oldest_age']:.0f} s"
              for q in s.queues]
    lines.append(f"human waits: {s.waits_open} open, {s.waits_expiring} expiring within 1 h")
    lines.append(f"unknown effects: {s.unknown_effects}"
                 + (f" (oldest {s.unknown_oldest_age:.0f} s)" if s.unknown_effects else ""))
    lines.append(f"stranded runs: {sum(s.stranded.values())}")
    lines.append(f"takeovers in the last hour: {s.takeovers}")
    lines.append("store errors: see stead_store_errors_total on each worker's /metrics")
    if s.needs:
        lines.append(f"NEEDS A PERSON ({len(s.needs)}):")
        lines += [f"  - {n}" for n in s.needs]
    else:
        lines.append("healthy: nothing needs a person")
    return "\n".join(lines)


@click.command()
@common.grace_option
@click.option("--max-age", type=common.SECONDS, default=300.0, show_default=True,
              metavar="SECONDS",
              help="A runnable run waiting longer than this to be claimed needs a person.")
@common.json_option
@click.pass_context
def status(ctx: click.Context, grace: float, max_age: float, as_json: bool) -> None:
    """Is the fleet healthy? The live workers (by the test claimers use),
    the queues with their depth and oldest age, the human waits, the effects
    whose outcome is unknown, the stranded runs and the takeovers of the last
    hour, in one screen. Exits 1 when something needs a person (an unknown
    outcome, a paused or incompatible run, a stranded run, runnable runs no
    live worker serves, a run waiting past --max-age, a dead worker), so a
    cron job can page on it."""
    db = common.database_url(ctx)
    common.require_database(db)
    from stead.metrics import health

    async def go() -> Status:
        async with common.opened_client(db) as client:
            return await health.look(client.store, grace=grace, max_age=max_age)

    found = common.run_async(go())
    if as_json:
        click.echo(json.dumps(found.to_json(), indent=2))
    else:
        common.echo(_text(found))
    if found.needs:
        ctx.exit(1)
