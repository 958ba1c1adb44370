"""`stead workers drain ID`: ask a worker, on any host, to stop as SIGTERM
stops it: it claims nothing more and releases each run at its next call
boundary, where another live worker takes it over at once. The request goes
through the database, which each worker asks every half second
(`WorkerOptions.drain_check`)."""

from __future__ import annotations

import json
import time

import click

from stead.cli import common


@click.group("workers")
def workers_group() -> None:
    """The workers of the fleet (`stead status` lists the live ones)."""


@workers_group.command("drain")
@click.argument("worker_id", metavar="ID")
@common.decision_options
@click.pass_context
def drain(ctx: click.Context, worker_id: str, by: str, why: str) -> None:
    """Ask worker ID to stop claiming and release its runs at their next call
    boundary, as SIGTERM does, from any machine that reaches the database.
    The worker sees the request within a second, logs who asked and why,
    drains and exits 0."""
    db = common.database_url(ctx)
    common.require_database(db)

    async def go() -> bool:
        async with common.opened_client(db) as client:
            store = client.store
            now = store.clock.now()
            live = {h.worker_id for h in await store.worker_hosts()
                    if h.stopped_at is None
                    and (h.live_until is None or h.live_until >= now)}
            if worker_id not in live:
                return False
            await store.request_drain(worker_id, json.dumps(
                {"by": by, "why": why, "at": time.time()}))
            return True

    if not common.run_async(go()):
        raise click.ClickException(f"no live worker {common.safe(worker_id)}: `stead status` "
                                   "lists the live workers")
    click.echo(f"asked worker {common.safe(worker_id)} to drain: it claims nothing more and "
               "releases each run at its next call boundary")
