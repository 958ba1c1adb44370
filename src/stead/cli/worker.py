"""`stead worker MODULE:APP`: run a `stead.Worker` until it is stopped by a
signal (or, with `--until-idle`, until there is nothing left to do)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys

import click

from stead import errors, logs
from stead.app import App
from stead.cli import common
from stead.store import display_url
from stead.worker import Worker, WorkerOptions

log = logging.getLogger("stead.cli")


@click.command()
@common.app_argument
@click.option("--concurrency", type=click.IntRange(min=1), default=16, show_default=True,
              metavar="N", help="Runs executed at the same time by this worker.")
@click.option("--lease", "lease", type=click.FloatRange(min=0, min_open=True), default=30.0,
              show_default=True, metavar="SECONDS",
              help="Lease length; a crashed worker's runs are taken over after it.")
@click.option("--poll", type=click.FloatRange(min=0, min_open=True), default=0.2,
              show_default=True, metavar="SECONDS", help="Pause between claims when idle.")
@click.option("--grace", type=click.FloatRange(min=0), default=10.0, show_default=True,
              metavar="SECONDS",
              help="On SIGTERM/SIGINT, how long running steps may finish before they are "
                   "cancelled.")
@click.option("--until-idle", is_flag=True,
              help="Exit once nothing is running and nothing can be claimed.")
@click.option("--worker-id", default=None, help="Name this worker (default host:pid:random).")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]),
              default="info", show_default=True, help="Log level of stead's messages.")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text",
              show_default=True,
              help="text: one line per message; json: one JSON object per line (time, "
                   "level, logger, message, run_id when known).")
@click.pass_context
def worker(ctx: click.Context, app_spec: str, concurrency: int, lease: float, poll: float,
           grace: float, until_idle: bool, worker_id: str | None, log_level: str,
           log_format: str) -> None:
    """Run a worker for the workflows of MODULE:APP.

    It claims runnable runs, replays their journals and continues them live.
    SIGTERM or SIGINT stops it gracefully: it claims nothing more, releases each
    run at its next call boundary (everything acknowledged stays journaled) and
    exits 0.
    """
    app = common.load_app(app_spec)
    options = WorkerOptions(concurrency=concurrency, lease_seconds=lease, poll_interval=poll,
                            shutdown_grace=grace, worker_id=worker_id)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logs.formatter(log_format))
    stead_log = logging.getLogger("stead")
    old_level = stead_log.level
    stead_log.addHandler(handler)
    stead_log.setLevel(log_level.upper())
    try:
        common.run_async(_work(common.database_url(ctx), app, options, until_idle))
    finally:
        stead_log.removeHandler(handler)
        stead_log.setLevel(old_level)


async def _work(db: str, app: App, options: WorkerOptions, until_idle: bool) -> None:
    async with common.opened_client(db, app, interactive=False) as client:
        w = Worker(app, client.store, options)
        loop = asyncio.get_running_loop()

        def stop(sig: signal.Signals) -> None:
            log.info("worker %s: %s received, stopping (no new claims; runs are released "
                     "at their next call boundary)", w.id, sig.name)
            w.stop()

        installed = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop, sig)
                installed.append(sig)
        log.info("worker %s started: hosting %s on %s", w.id, ", ".join(app.hosted()) or
                 "nothing", display_url(db))
        try:
            await client.store.keyring()
        except errors.KeysUnavailable as exc:
            log.warning("worker %s: waits with a token cannot open here: %s", w.id, exc)
        try:
            await (w.run_until_idle() if until_idle else w.run())
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)
        log.info("worker %s stopped", w.id)
