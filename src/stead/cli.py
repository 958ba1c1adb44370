"""The `stead` command: run a worker, start runs, inspect and cancel them, and
watch a run survive a crash (`stead demo`).

Every error a user can cause (a bad `module:app`, bad JSON, an unknown run, a
database that cannot be opened) ends as a one-line message and a non-zero exit,
never a traceback. Commands reach the store only through `stead.Client`,
except `worker`, which runs a `stead.Worker`.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import click

from stead import errors, records, timeline
from stead.app import App
from stead.client import Client
from stead.store import DEFAULT_URL, open_store
from stead.worker import Worker, WorkerOptions

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])
log = logging.getLogger("stead.cli")


# -- plumbing -------------------------------------------------------------------
def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro`; any `SteadError` becomes a clean one-line CLI error."""
    try:
        return asyncio.run(coro)
    except errors.SteadError as exc:
        raise click.ClickException(str(exc)) from exc


@contextlib.asynccontextmanager
async def opened_client(db: str, app: App | None = None) -> AsyncIterator[Client]:
    store = await open_store(db)
    try:
        yield Client(store, app)
    finally:
        await store.close()


def require_database(db: str) -> None:
    """Commands that only read or change existing runs refuse to create an
    empty database by accident (a mistyped --db, a forgotten env var)."""
    if not db.startswith("sqlite:"):
        return
    from stead.store.sqlite import path_from_url

    try:
        path = path_from_url(db)
    except errors.StoreError as exc:
        raise click.ClickException(str(exc)) from exc
    if path != ":memory:" and not os.path.exists(path):
        raise click.ClickException(
            f"no database at {path} ({db}); pass --db URL or set STEAD_DATABASE_URL"
        )


def load_app(spec: str) -> App:
    """Import `module:attribute` (the attribute may be dotted) and check that it
    is a `stead.App`. The current directory is importable, as with uvicorn."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise click.BadParameter(
            f"{spec!r} is not module:attribute, e.g. myproject.workflows:app",
            param_hint="'MODULE:APP'",
        )
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if module_name == missing or module_name.startswith(missing + "."):
            raise click.ClickException(
                f"cannot import module {module_name!r} for {spec!r}: {exc}. Run stead from "
                "the folder that contains it, or install the package."
            ) from exc
        raise  # the module exists but one of its own imports fails: show the traceback
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise click.ClickException(
                f"module {module_name!r} has no attribute {attr!r} (from {spec!r})"
            ) from None
    if not isinstance(obj, App):
        raise click.ClickException(
            f"{spec!r} is a {type(obj).__qualname__}, not a stead.App; point at the "
            "object made with stead.App(...)"
        )
    return obj


def parse_json(text: str, what: str, kind: type[list[Any]] | type[dict[str, Any]]) -> Any:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise click.BadParameter(f"not valid JSON: {exc}", param_hint=what) from exc
    if not isinstance(value, kind):
        shape = "array, e.g. '[1, \"a\"]'" if kind is list else "object, e.g. '{\"a\": 1}'"
        raise click.BadParameter(f"must be a JSON {shape}", param_hint=what)
    return value


# -- shared options -------------------------------------------------------------------
def app_argument(f: F) -> F:
    return click.argument("app_spec", metavar="MODULE:APP")(f)


def run_argument(f: F) -> F:
    return click.argument("run_id", metavar="RUN")(f)


def json_option(f: F) -> F:
    return click.option("--json", "as_json", is_flag=True,
                        help="Print JSON instead of text.")(f)


def _db(ctx: click.Context) -> str:
    return str(ctx.find_root().params["db"])


# -- commands -------------------------------------------------------------------
@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--db", default=DEFAULT_URL, show_default=True, envvar="STEAD_DATABASE_URL",
    show_envvar=True, metavar="URL", help="The database, e.g. sqlite:///path/to/stead.db.",
)
@click.version_option(package_name="stead", prog_name="stead")
def main(db: str) -> None:
    """stead: durable execution for AI agents. Resume, don't rerun.

    Run workers for your app, start runs, and inspect what each run journaled
    and how it was resumed. Try `stead demo` to watch a run survive a crash.
    """


@main.command()
@app_argument
@click.option("--concurrency", type=click.IntRange(min=1), default=16, show_default=True,
              metavar="N", help="Runs executed at the same time by this worker.")
@click.option("--lease", "lease", type=click.FloatRange(min=0, min_open=True), default=30.0,
              show_default=True, metavar="SECONDS",
              help="Lease length; a crashed worker's runs are taken over after it.")
@click.option("--poll", type=click.FloatRange(min=0, min_open=True), default=0.5,
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
@click.pass_context
def worker(ctx: click.Context, app_spec: str, concurrency: int, lease: float, poll: float,
           grace: float, until_idle: bool, worker_id: str | None, log_level: str) -> None:
    """Run a worker for the workflows of MODULE:APP.

    It claims runnable runs, replays their journals and continues them live.
    SIGTERM or SIGINT stops it gracefully: it claims nothing more, releases each
    run at its next call boundary (everything acknowledged stays journaled) and
    exits 0.
    """
    app = load_app(app_spec)
    options = WorkerOptions(concurrency=concurrency, lease_seconds=lease, poll_interval=poll,
                            shutdown_grace=grace, worker_id=worker_id)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    stead_log = logging.getLogger("stead")
    old_level = stead_log.level
    stead_log.addHandler(handler)
    stead_log.setLevel(log_level.upper())
    try:
        run_async(_work(_db(ctx), app, options, until_idle))
    finally:
        stead_log.removeHandler(handler)
        stead_log.setLevel(old_level)


async def _work(db: str, app: App, options: WorkerOptions, until_idle: bool) -> None:
    async with opened_client(db, app) as client:
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
                 "nothing", db)
        try:
            await (w.run_until_idle() if until_idle else w.run())
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)
        log.info("worker %s stopped", w.id)


@main.command()
@app_argument
@click.argument("workflow")
@click.argument("args_json", metavar="[ARGS_JSON]", required=False)
@click.option("--kwargs", "kwargs_json", metavar="JSON",
              help="Keyword arguments as a JSON object.")
@click.option("--task-id", default=None,
              help="Business key (e.g. order-123): starting it again returns the live run.")
@click.option("--version", "version", type=click.IntRange(min=1), default=None,
              help="Workflow version (default: the newest the app registers).")
@click.option("-q", "--quiet", is_flag=True, help="Print only the run id.")
@click.pass_context
def start(ctx: click.Context, app_spec: str, workflow: str, args_json: str | None,
          kwargs_json: str | None, task_id: str | None, version: int | None,
          quiet: bool) -> None:
    """Start a run of WORKFLOW from MODULE:APP.

    ARGS_JSON is a JSON array of positional arguments, e.g. '[{"id": 4711}]'.
    A worker picks the run up. With --task-id, a live run of that task is
    returned instead of starting a second one.
    """
    app = load_app(app_spec)
    args = parse_json(args_json, "'ARGS_JSON'", list) if args_json is not None else []
    kwargs = parse_json(kwargs_json, "'--kwargs'", dict) if kwargs_json is not None else {}

    async def go() -> Any:
        async with opened_client(_db(ctx), app) as client:
            return await client.start(workflow, *args, task_id=task_id, version=version,
                                      **kwargs)

    info = run_async(go())
    if quiet:
        click.echo(info.run_id)
    elif info.created:
        task = f", task {info.task_id}" if info.task_id else ""
        click.echo(f"started run {info.run_id} ({info.workflow}@{info.version}{task})")
    else:
        click.echo(f"run {info.run_id} already exists for task {info.task_id} "
                   f"(status {info.status}); not started again")


@main.group()
def runs() -> None:
    """List, inspect and cancel runs."""


@runs.command("ls")
@click.option("--status", type=click.Choice(records.STATUSES), default=None,
              help="Only runs with this status.")
@click.option("--workflow", default=None, help="Only runs of this workflow.")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True,
              help="At most this many runs, newest first.")
@json_option
@click.pass_context
def runs_ls(ctx: click.Context, status: str | None, workflow: str | None, limit: int,
            as_json: bool) -> None:
    """List runs, newest first."""
    db = _db(ctx)
    require_database(db)

    async def go() -> Any:
        async with opened_client(db) as client:
            return await client.list_runs(status=status, workflow=workflow, limit=limit)

    infos = run_async(go())
    if as_json:
        click.echo(json.dumps([timeline.run_json(i) for i in infos], indent=2))
    else:
        click.echo(timeline.render_runs(infos))


@runs.command("show", short_help="Show a run, its journal as a timeline, and its resumes.")
@run_argument
@json_option
@click.pass_context
def runs_show(ctx: click.Context, run_id: str, as_json: bool) -> None:
    """Show a run: status, result or error, the journal as a timeline, and
    every takeover (who resumed it, at which epoch, from where, what was reused)."""
    db = _db(ctx)
    require_database(db)

    async def go() -> Any:
        async with opened_client(db) as client:
            info = await client.get(run_id)
            return info, await client.journal(run_id), await client.resumes(run_id)

    info, journal, resumes = run_async(go())
    if as_json:
        click.echo(json.dumps(timeline.show_json(info, journal, resumes), indent=2))
    else:
        click.echo(timeline.render_run(info, journal, resumes))


@runs.command("cancel")
@run_argument
@click.pass_context
def runs_cancel(ctx: click.Context, run_id: str) -> None:
    """Cancel a live run. Its worker's next write is rejected and it stops;
    the journal is kept."""
    db = _db(ctx)
    require_database(db)

    async def go() -> Any:
        async with opened_client(db) as client:
            before = await client.get(run_id)
            return before, await client.cancel(run_id)

    before, after = run_async(go())
    if before.status == records.CANCELLED:
        click.echo(f"run {run_id} was already cancelled")
    elif after.status != records.CANCELLED:
        raise click.ClickException(
            f"run {run_id} already ended as {after.status}; there is nothing to cancel"
        )
    else:
        click.echo(f"cancelled run {run_id} (was {before.status})")


@main.command(short_help="Watch a run survive a real worker crash and resume.")
@click.option("--keep", type=click.Path(file_okay=False, path_type=Path), default=None,
              metavar="DIR",
              help="Keep the database and logs in DIR (created if missing) to explore them "
                   "afterwards with `stead runs show`.")
def demo(keep: Path | None) -> None:
    """Watch a run survive a crash: a ticket-triage run whose worker process is
    SIGKILLed mid-step is taken over by a fresh worker process that resumes it,
    reusing what was journaled. Checks the invariants and exits non-zero if
    any fails."""
    from stead import demo_driver

    ok = run_async(demo_driver.run_demo(keep, echo=click.echo))
    if not ok:
        raise SystemExit(1)
