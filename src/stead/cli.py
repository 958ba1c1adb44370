"""The `stead` command: run a worker, start runs, inspect and cancel them,
reconcile an effect whose outcome is unknown, and watch a run survive a crash
(`stead demo`).

Every error a user can cause (a bad `module:app`, bad JSON, an unknown run, a
database that cannot be opened) ends as a one-line message and a non-zero exit,
never a traceback. Commands reach the store only through `stead.Client`,
except `worker`, which runs a `stead.Worker`.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
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
async def opened_client(
    db: str, app: App | None = None, *, interactive: bool = True
) -> AsyncIterator[Client]:
    # A person waiting on a command gives up on an unreachable server after a
    # few seconds, with one error line; a worker rides out outages and logs them.
    quiet = logging.getLogger("stead.store")
    level = quiet.level
    if interactive:
        quiet.setLevel(logging.ERROR)
    try:
        store = await open_store(db, retry_for=3.0 if interactive else 30.0)
        try:
            yield Client(store, app)
        finally:
            await store.close()
    finally:
        quiet.setLevel(level)


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
    async with opened_client(db, app, interactive=False) as client:
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


@runs.command("retry")
@run_argument
@click.pass_context
def runs_retry(ctx: click.Context, run_id: str) -> None:
    """Let a run stopped as incompatible_checkpoint be claimed again, after
    deploying code that fits its journal (the old version registered next to
    the new one, or the change rolled back). If it still does not fit, it stops
    again; nothing in the journal is changed."""
    db = _db(ctx)
    require_database(db)

    async def go() -> Any:
        async with opened_client(db) as client:
            return await client.retry(run_id)

    info = run_async(go())
    click.echo(f"run {run_id} is claimable again (epoch {info.epoch}): a worker hosting "
               f"{info.workflow}@{info.version} replays it")


def _any_json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise click.BadParameter(f"not valid JSON: {exc}", param_hint=what) from exc


def _current_user() -> str:
    try:
        return os.environ.get("USER") or getpass.getuser()
    except (OSError, KeyError) as exc:  # no login name in this environment
        raise click.UsageError("cannot tell who you are; say who decides with --by NAME") \
            from exc


@main.command(short_help="Decide what happened to an effect whose outcome is unknown.")
@run_argument
@click.argument("effect")
@click.option("--happened", "happened_json", metavar="JSON",
              help="It happened; JSON is its result, as the effect function would have "
                   "returned it (the workflow continues with it).")
@click.option("--not-happened", is_flag=True,
              help="It did not happen: the run sends it, with the same key.")
@click.option("--compensate", "compensate_json", metavar="JSON",
              help="It happened and was undone; JSON says how. The workflow sees "
                   "stead.EffectCompensated.")
@click.option("--by", metavar="NAME", default=None,
              help="Who decides, kept with the decision (default: the current OS user).")
@click.option("--why", metavar="TEXT", default="", help="Why, kept with the decision.")
@click.pass_context
def reconcile(ctx: click.Context, run_id: str, effect: str, happened_json: str | None,
              not_happened: bool, compensate_json: str | None, by: str | None,
              why: str) -> None:
    """Decide what happened to EFFECT of RUN, a run stopped as outcome_unknown.

    stead stops a run when it cannot tell whether an effect reached the outside
    world (the worker died after the intent was journaled, and the effect is not
    idempotent and has no check). Find out outside, looking it up by the
    effect's key (`stead runs show RUN` shows it), then give exactly one of
    --happened JSON, --not-happened or --compensate JSON. The decision is
    journaled with who made it and why, and a worker continues the run from it.

    EFFECT is the effect's name, or its key when several effects share the name.
    """
    given = [happened_json is not None, not_happened, compensate_json is not None]
    if sum(given) != 1:
        raise click.UsageError(
            "give exactly one decision: --happened JSON, --not-happened or --compensate JSON"
        )
    kwargs: dict[str, Any] = {}
    if happened_json is not None:
        kwargs["happened"] = _any_json(happened_json, "'--happened'")
    elif compensate_json is not None:
        kwargs["compensate"] = _any_json(compensate_json, "'--compensate'")
    else:
        kwargs["not_happened"] = True
    who = by if by is not None else _current_user()
    db = _db(ctx)
    require_database(db)

    async def go() -> Any:
        async with opened_client(db) as client:
            return await client.reconcile(run_id, effect, by=who, why=why, **kwargs)

    info = run_async(go())
    because = f": {why}" if why else ""
    if "happened" in kwargs:
        click.echo(f"run {run_id}: effect {effect} happened, with result "
                   f"{json.dumps(kwargs['happened'])} (decided by {who}{because})")
        click.echo("the run continues from that result")
    elif "compensate" in kwargs:
        click.echo(f"run {run_id}: effect {effect} was compensated: "
                   f"{json.dumps(kwargs['compensate'])} (decided by {who}{because})")
        click.echo("the run continues; the workflow sees stead.EffectCompensated")
    else:
        click.echo(f"run {run_id}: effect {effect} did not happen (decided by {who}{because})")
        click.echo("the run continues: it sends the effect, with the same key")
    click.echo(f"status {info.status}: a worker hosting {info.workflow}@{info.version} "
               "picks it up")


@main.command(short_help="Watch an agent run survive a real worker crash and resume.")
@click.argument("story", type=click.Choice(["refund", "ci", "triage"]), default="refund",
                required=False)
@click.option("--keep", type=click.Path(file_okay=False, path_type=Path), default=None,
              metavar="DIR",
              help="Keep the database, the fake services' ledgers and the worker logs in DIR "
                   "(new or empty) to explore them afterwards with `stead runs show`.")
@click.option("--model", type=click.Choice(["scripted"]), default="scripted",
              show_default=True,
              help="The model the agent asks. Only the scripted model for now (no network, "
                   "no key): there are no OpenAI/Anthropic adapters yet, so OPENAI_API_KEY "
                   "and ANTHROPIC_API_KEY are not used.")
def demo(story: str, keep: Path | None, model: str) -> None:
    """Watch an agent run survive a real crash, with real worker processes.

    \b
    refund  (default) order 123 waits for the customer's confirmation; its
            worker is SIGKILLed (a deploy); the approval arrives while no
            worker runs; a new worker resumes the run and refunds once
    ci      a coding agent is SIGKILLed while its CI job runs; the new worker
            asks CI about job 471 and never submits a second job
    triage  a worker is SIGKILLed mid-step; only that step runs again

    Each story prints the run's timeline, the resume record and the fake
    services' own ledgers, checks its invariants and exits non-zero if any
    fails.
    """
    from stead import demos

    ok = run_async(demos.run_demo(story, keep, echo=click.echo, model=model))
    if not ok:
        raise SystemExit(1)


def _register_more() -> None:
    # Registered last: these modules use the helpers above.
    from stead import cli_db, cli_events

    cli_events.register(main)
    cli_db.register(main)


_register_more()
