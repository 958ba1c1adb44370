"""`stead chaos MODULE:APP WORKFLOW ARGS_JSON`: the crash matrix of one
workflow (`stead.testing.crash_matrix`), printed point by point; exits 1 if a
point fails."""

from __future__ import annotations

import contextlib
import importlib
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from stead import errors
from stead.cli import common
from stead.testing import Services, crash_matrix
from stead.testing.matrix import check_preload


def _load(spec: str, what: str) -> Any:
    """The object `module:attribute` names (for --events and --services)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise click.BadParameter(f"{spec!r} is not module:attribute", param_hint=what)
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise click.BadParameter(f"cannot load {spec!r}: {exc}", param_hint=what) from exc
    return obj


@click.command(short_help="Kill a worker at every boundary of a workflow and check each "
                          "recovery.")
@common.app_argument
@click.argument("workflow")
@click.argument("args_json", metavar="ARGS_JSON", default="[]", required=False)
@click.option("--events", "events_spec", metavar="MODULE:ATTR", default=None,
              help="A dict mapping a wait's kind to a function(stead.testing.Waiting) -> "
                   "stead.testing.Event: what to deliver to each wait the run opens.")
@click.option("--services", "services_spec", metavar="MODULE:ATTR", default=None,
              help="A stead.testing.Services: counts the calls your fake services received "
                   "per effect key, and readies each point's folder.")
@click.option("--keep", type=click.Path(file_okay=False, path_type=Path), default=None,
              metavar="DIR", help="Work in DIR and keep it: each point's folder, its worker "
                                  "logs and (unless --db is given) the SQLite database.")
@click.option("--preload", multiple=True, metavar="MODULE",
              help="A library the app imports (e.g. langgraph.graph), imported once by the "
                   "process the workers are forked from rather than by each worker on its "
                   "point's time. Not a module that reads the environment or the current "
                   "directory as it loads. Repeatable.")
@click.option("--markdown", is_flag=True, help="Print the report as a Markdown table.")
@click.pass_context
def chaos(ctx: click.Context, app_spec: str, workflow: str, args_json: str,
          events_spec: str | None, services_spec: str | None, keep: Path | None,
          preload: tuple[str, ...], markdown: bool) -> None:
    """Run WORKFLOW of MODULE:APP with ARGS_JSON once uninterrupted, then once
    per boundary: SIGKILL a real worker there (before and after every journal
    write, inside every effect's send, while waiting, as it wakes for an
    event), start a new one, redeliver the events twice, and check the run
    ends as the uninterrupted one did, with no effect key called twice.

    It starts runs: by default on a throwaway SQLite database; a --db given
    explicitly is used instead (never a production one). Exits 1 if any point
    fails.
    """
    common.load_app(app_spec)  # a bad MODULE:APP fails here, in one line
    args = common.parse_json(args_json, "ARGS_JSON", list)
    events: Mapping[str, Callable[..., Any]] | None = None
    if events_spec is not None:
        events = _load(events_spec, "--events")
        if not isinstance(events, Mapping):
            raise click.BadParameter(f"{events_spec} is not a dict of wait kind -> function",
                                     param_hint="--events")
    services: Services | None = None
    if services_spec is not None:
        services = _load(services_spec, "--services")
        if not isinstance(services, Services):
            raise click.BadParameter(f"{services_spec} is not a stead.testing.Services",
                                     param_hint="--services")
    try:
        preloaded = check_preload(preload)
    except errors.InvalidInput as exc:
        raise click.BadParameter(str(exc).removeprefix("preload: "),
                                 param_hint="--preload") from exc
    root = ctx.find_root()
    explicit = root.get_parameter_source("db") != ParameterSource.DEFAULT
    db = common.database_url(ctx) if explicit else None
    with contextlib.ExitStack() as stack:
        folder = keep or Path(stack.enter_context(
            tempfile.TemporaryDirectory(prefix="stead-chaos-")))
        report = common.run_async(crash_matrix(
            app_spec, workflow, args, events=events, services=services, db=db, folder=folder,
            progress=None if markdown else click.echo, preload=preloaded))
    click.echo(report.markdown() if markdown else report.summary())
    if not report.ok:
        raise SystemExit(1)
