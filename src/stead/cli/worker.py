"""`stead worker MODULE:APP`: run a `stead.Worker` until it is stopped by a
signal (or, with `--until-idle`, until there is nothing left to do; with
`--until-done RUN...`, until those runs have ended or stopped for a person)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import signal
import sys

import click

from stead import errors, logs, processes
from stead.app import App
from stead.cli import common
from stead.store import display_url
from stead.store.base import Store
from stead.worker import Worker, WorkerOptions

log = logging.getLogger("stead.cli")


@click.command()
@common.app_argument
@click.option("--concurrency", type=common.COUNT, default=16, show_default=True,
              metavar="N", help="Runs executed at the same time by this worker.")
@click.option("--lease", "lease", type=common.SECONDS, default=30.0,
              show_default=True, metavar="SECONDS",
              help="Lease length; a crashed worker's runs are taken over after it.")
@click.option("--poll", type=common.SECONDS, default=0.2,
              show_default=True, metavar="SECONDS", help="Pause between claims when idle.")
@click.option("--grace", type=common.SECONDS_OR_ZERO, default=10.0, show_default=True,
              metavar="SECONDS",
              help="On SIGTERM/SIGINT, how long running steps may finish before they are "
                   "cancelled.")
@click.option("--until-idle", is_flag=True,
              help="Exit once nothing is running and nothing can be claimed (a crashed "
                   "worker's lease is waited out first); say what is pending that this "
                   "worker does not host.")
@click.option("--until-done", is_flag=True,
              help="Exit once each RUN has ended or stopped for a person (a decision, "
                   "an event); exit 1 if --timeout passes first.")
@click.option("--timeout", type=common.SECONDS, default=None,
              metavar="SECONDS", help="With --until-done: give up after this long.")
@click.option("--max-result-bytes", type=common.COUNT, default=16 * 1024 * 1024,
              show_default=True, metavar="N",
              help="The largest result (of a step, effect or model call) journaled, as JSON.")
@click.option("--heartbeat", type=common.SECONDS, default=10.0,
              show_default=True, metavar="SECONDS",
              help="How often the worker tells the store which versions it serves "
                   "(a runnable run no worker serves is listed as stranded).")
@click.option("--presence-grace", type=common.SECONDS, default=processes.PRESENCE_GRACE,
              show_default=True, metavar="SECONDS",
              help="PostgreSQL: how long another worker's presence lock must stay free, not "
                   "taken again, before this worker takes it for dead and ends its leases "
                   "(longer than a reconnect: a blip, a pooler restart or a failover moves "
                   "no run).")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=None, metavar="N",
              help="Serve /metrics (Prometheus), /healthz and /readyz on this port "
                   "(0: a free one, logged). Needs the metrics extra.")
@click.option("--metrics-host", default="127.0.0.1", show_default=True, metavar="HOST",
              help="The address --metrics-port binds (0.0.0.0 in a container, for the "
                   "scraper and the probes).")
@click.option("--worker-id", default=None, help="Name this worker (default host:pid:random).")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]),
              default="info", show_default=True, help="Log level of stead's messages.")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text",
              show_default=True,
              help="text: one line per message; json: one JSON object per line (time, "
                   "level, logger, message; run_id, epoch, worker and workflow@version "
                   "when known).")
@click.argument("run_ids", metavar="[RUN]...", nargs=-1)
@click.pass_context
def worker(ctx: click.Context, app_spec: str, concurrency: int, lease: float, poll: float,
           grace: float, until_idle: bool, until_done: bool, timeout: float | None,
           max_result_bytes: int, heartbeat: float, presence_grace: float,
           metrics_port: int | None, metrics_host: str,
           worker_id: str | None, log_level: str,
           log_format: str,
           run_ids: tuple[str, ...]) -> None:
    """Run a worker for the workflows of MODULE:APP.

    It claims runnable runs, replays their journals and continues them live.
    SIGTERM or SIGINT stops it gracefully: it claims nothing more, releases each
    run at its next call boundary (everything acknowledged stays journaled) and
    exits 0.
    """
    if until_done != bool(run_ids):
        raise click.UsageError("--until-done takes the runs to finish: stead worker "
                               "MODULE:APP --until-done RUN [RUN]...")
    if until_done and until_idle:
        raise click.UsageError("choose --until-idle or --until-done, not both")
    if timeout is not None and not until_done:
        raise click.UsageError("--timeout goes with --until-done")
    app = common.load_app(app_spec)
    options = WorkerOptions(concurrency=concurrency, lease_seconds=lease, poll_interval=poll,
                            shutdown_grace=grace, worker_id=worker_id,
                            max_result_bytes=max_result_bytes, heartbeat=heartbeat,
                            presence_grace=presence_grace)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logs.formatter(log_format))
    stead_log = logging.getLogger("stead")
    old_level = stead_log.level
    stead_log.addHandler(handler)
    stead_log.setLevel(log_level.upper())
    until = Until(idle=until_idle, runs=run_ids, timeout=timeout)
    serve = None if metrics_port is None else Serve(metrics_host, metrics_port)
    try:
        report = common.run_async(_work(common.database_url(ctx), app, options, until, serve))
    finally:
        stead_log.removeHandler(handler)
        stead_log.setLevel(old_level)
    if report.stopped:
        ctx.exit(1)  # the worker logged why, in one line of the log's format
    for line in report.lines:
        click.echo(common.safe_lines(line))
    if not report.ok:
        why = "stopped" if timeout is None else f"--timeout {timeout:g}s, or stopped"
        raise click.ClickException(f"the worker exited before every run was done ({why})")


@dataclasses.dataclass(frozen=True)
class Until:
    """When the worker exits: never (a signal stops it), when idle, or when
    `runs` are done (or after `timeout` seconds)."""

    idle: bool = False
    runs: tuple[str, ...] = ()
    timeout: float | None = None


@dataclasses.dataclass(frozen=True)
class Serve:
    """Where the worker serves its metrics and probes."""

    host: str
    port: int


@dataclasses.dataclass(frozen=True)
class Report:
    """What the worker says when it exits by itself, and whether it got there."""

    lines: list[str] = dataclasses.field(default_factory=list)
    ok: bool = True
    stopped: bool = False  # by itself, for a reason no retry mends (it logged which)


async def _report(w: Worker, until: Until, done: bool) -> Report:
    lines: list[str] = []
    for run_id in until.runs:
        row = await w.store.get_run(run_id)
        lines.append(f"run {common.safe(run_id)}: {row.status}")
    if until.idle or until.runs:
        lines += [f"pending, not hosted by this worker: {common.safe(b.code)} "
                  f"({b.runnable} run(s)); start a worker whose app registers it"
                  for b in await w.unhosted()]
    return Report(lines, ok=done)


async def _work(db: str, app: App, options: WorkerOptions, until: Until,
                serve: Serve | None) -> Report:
    async with common.opened_store(db, interactive=False) as store:
        if serve is None:
            return await _run(db, app, store, options, until)
        from stead.client.listing import STRANDED_AFTER
        from stead.metrics.endpoint import Endpoint
        from stead.metrics.exposition import Exposition

        try:
            exposition = Exposition()
        except ImportError as exc:
            raise click.ClickException(str(exc)) from exc
        endpoint = Endpoint(store, exposition, grace=STRANDED_AFTER)
        try:
            endpoint.bind(serve.host, serve.port)
        except OSError as exc:
            endpoint.close()
            raise click.ClickException(f"cannot serve metrics on {serve.host}:{serve.port}: "
                                       f"{exc.strerror or exc}") from exc
        async with endpoint.serving():
            return await _run(db, app, store, options, until)


async def _run(db: str, app: App, store: Store, options: WorkerOptions,
               until: Until) -> Report:
    w = Worker(app, store, options)
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
    if app.migrated():
        log.info("worker %s migrates runs of %s when no live worker hosts them", w.id,
                 ", ".join(app.migrated()))
    for pending in await w.unhosted():
        log.warning("worker %s: %d run(s) of %s are pending and this worker does not "
                    "host that version", w.id, pending.runnable, pending.code)
    done = True
    try:
        if until.runs:
            done = await w.run_until_done(until.runs, timeout=until.timeout)
        elif until.idle:
            await w.run_until_idle()
        else:
            await w.run()
    except (errors.DatabaseMissing, errors.KeysUnavailable):
        return Report(ok=False, stopped=True)  # the worker logged why
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
    log.info("worker %s stopped", w.id)
    return await _report(w, until, done)
