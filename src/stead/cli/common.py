"""What every `stead` command shares: the database URL, loading `module:app`,
opening a client, reading JSON arguments, the common options, and turning a
`SteadError` into a one-line message.

Every error a user can cause (a bad `module:app`, bad JSON, an unknown run, a
database that cannot be opened) ends as a one-line message and a non-zero exit,
never a traceback.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import json
import logging
import os
import sys
import time
import unicodedata
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import click

from stead import bounds, errors

if TYPE_CHECKING:
    from stead.app import App
    from stead.client import Client
    from stead.intent import Grant, Intent
    from stead.store import Store

# What a command needs (the app, the client, the store, an intent file's
# `Intent`) is imported inside it: `stead --help` and `stead runs ls` stay
# quick because they load neither the workflow runtime nor the libraries of
# the commands not run.

# `stead.store.DEFAULT_URL`, written here so that `--help` loads no store; a
# test keeps the two equal.
DEFAULT_URL = "sqlite:///stead.db"

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


# -- bad input ---------------------------------------------------------------------------
# The exit status of every error a user can cause: a bad option or argument
# that click finds, or one a command finds (an unknown run, a bad intent file).
BAD_INPUT = 1


class BadInput(click.UsageError):
    """A usage error that exits `BAD_INPUT`."""

    exit_code = BAD_INPUT


@dataclasses.dataclass(frozen=True)
class Place:
    """Where a command of the root group is (`module:attribute` in
    `stead.cli`), its line in `stead --help`, and the commands of other
    modules its group also holds."""

    where: str
    summary: str
    adds: tuple[str, ...] = ()


def _load(where: str) -> click.Command:
    module, _, attribute = where.partition(":")
    command: click.Command = getattr(importlib.import_module(f"stead.cli.{module}"), attribute)
    return command


class Root(click.Group):
    """The root group: bad input exits `BAD_INPUT` with one `Error:` line,
    whether click finds it while parsing (its usage errors exit 2 by default)
    or a command does. Its commands are imported when one is run (`places`):
    `stead --help` lists them from their `Place`s."""

    def __init__(self, *args: Any, places: Mapping[str, Place], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.places = dict(places)

    def make_context(self, info_name: str | None, args: list[str],
                     parent: click.Context | None = None, **extra: Any) -> click.Context:
        # The moment the command was given: ages (`db prune --older-than`)
        # count from it, not from when its imports are done.
        started = time.time()
        try:
            ctx = super().make_context(info_name, args, parent, **extra)
        except click.UsageError as exc:
            raise _bad_input(exc) from exc
        ctx.meta[_STARTED] = started
        return ctx

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self.places})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        place = self.places.get(cmd_name)
        if place is not None and cmd_name not in self.commands:
            command = _load(place.where)
            if isinstance(command, click.Group):
                for where in place.adds:
                    command.add_command(_load(where))
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = []
        for name in names:
            if name in self.places and name not in self.commands:
                # Shortened as click shortens a command's help, without importing it.
                summary = click.Command(name, help=self.places[name].summary)
                rows.append((name, summary.get_short_help_str(limit)))
            else:
                command = self.get_command(ctx, name)
                if command is not None and not command.hidden:
                    rows.append((name, command.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            raise _bad_input(exc) from exc


_STARTED = "stead.started"


def started(ctx: click.Context) -> float:
    """When the command was given (seconds since the epoch)."""
    return float(ctx.find_root().meta.get(_STARTED, time.time()))


def _bad_input(exc: click.UsageError) -> click.UsageError:
    if isinstance(exc, BadInput):
        return exc
    return BadInput(exc.format_message(), exc.ctx)


# -- the database ----------------------------------------------------------------------
def _nonempty_url(ctx: click.Context, param: click.Parameter, value: str) -> str:
    # click ignores an empty environment variable: an empty STEAD_DATABASE_URL
    # would quietly mean the default database.
    if not value.strip() or (
        os.environ.get("STEAD_DATABASE_URL", None) == ""
        and ctx.get_parameter_source("db") == click.core.ParameterSource.DEFAULT
    ):
        raise click.BadParameter(
            "the database URL is empty (--db or STEAD_DATABASE_URL); give one, e.g. "
            f"{DEFAULT_URL}, or unset STEAD_DATABASE_URL for that default",
            ctx=ctx, param=param,
        )
    return value


def database_option(f: F) -> F:
    """`--db URL` on the root group; commands read it with `database_url`."""
    return click.option(
        "--db", default=DEFAULT_URL, show_default=True, envvar="STEAD_DATABASE_URL",
        show_envvar=True, metavar="URL", help="The database, e.g. sqlite:///path/to/stead.db.",
        callback=_nonempty_url,
    )(f)


def database_url(ctx: click.Context) -> str:
    """The URL given to the root group's `--db`."""
    return str(ctx.find_root().params["db"])


def require_database(db: str) -> None:
    """Commands that only read or change existing runs refuse to create an
    empty database by accident (a mistyped --db, a forgotten env var)."""
    if not db.startswith("sqlite:"):
        return
    from stead.store import display_url
    from stead.store.sqlite import path_from_url

    try:
        path = path_from_url(db)
    except errors.StoreError as exc:
        raise click.ClickException(str(exc)) from exc
    if path != ":memory:" and not os.path.exists(path):
        raise click.ClickException(
            f"no database at {path} ({display_url(db)}); pass --db URL or set STEAD_DATABASE_URL"
        )


def print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """`stead --version`: the release, and the schema version its code needs
    (`stead db migrate` brings a database there; CHANGELOG.md names both)."""
    if not value or ctx.resilient_parsing:
        return
    from stead import release
    from stead.store import schema_versions

    click.echo(f"stead {release.__version__} (schema {schema_versions.latest()})")
    ctx.exit()


# -- running ---------------------------------------------------------------------------
def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro`; any `SteadError` becomes a clean one-line CLI error."""
    import asyncio

    try:
        return asyncio.run(coro)
    except errors.SteadError as exc:
        raise click.ClickException(safe_lines(str(exc))) from exc


# -- what reaches the terminal ---------------------------------------------------------
# Unicode's bidirectional overrides and isolates: they reorder what a terminal shows.
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e"
                  "\u2066\u2067\u2068\u2069")


def _escaped(ch: str) -> str:
    if unicodedata.category(ch) == "Cc" or ch in _BIDI:
        return ch.encode("unicode_escape").decode("ascii")
    return ch


def safe(value: object) -> str:
    """`value` as text that cannot drive the terminal: control characters
    (escape sequences, newlines, carriage returns) and bidirectional overrides
    are shown escaped (`\\x1b[2J`). For ids, task ids, names and any other text
    a user or an outside system chose."""
    text = str(value)
    if text.isprintable() and not _BIDI.intersection(text):
        return text
    return "".join(_escaped(ch) for ch in text)


def safe_lines(text: str) -> str:
    """`safe` for text of several lines: its newlines are kept."""
    return "\n".join(safe(line) for line in text.split("\n"))


def echo(text: str) -> None:
    """Print text of several lines (a table, a timeline) with `safe_lines`."""
    click.echo(safe_lines(text))


@contextlib.asynccontextmanager
async def opened_store(db: str, *, interactive: bool = True) -> AsyncIterator[Store]:
    """The store at `db`, closed on exit: for a command that needs no
    `Client` (`runs ls`), which then loads none of the client's parts."""
    from stead.store import open_store

    # A person waiting on a command gives up on an unreachable server after a
    # few seconds, with one error line; a worker rides out outages and logs them.
    quiet = logging.getLogger("stead.store")
    level = quiet.level
    if interactive:
        quiet.setLevel(logging.ERROR)
    try:
        store = await open_store(db, retry_for=3.0 if interactive else 30.0)
        try:
            yield store
        finally:
            await store.close()
    finally:
        quiet.setLevel(level)


@contextlib.asynccontextmanager
async def opened_client(
    db: str, app: App | None = None, *, interactive: bool = True
) -> AsyncIterator[Client]:
    """A `Client` on the store at `db`, closed on exit."""
    from stead.client import Client

    async with opened_store(db, interactive=interactive) as store:
        yield Client(store, app)


# -- arguments -------------------------------------------------------------------------
def load_app(spec: str) -> App:
    """Import `module:attribute` (the attribute may be dotted) and check that it
    is a `stead.App`. The current directory is importable, as with uvicorn."""
    from stead.app import App

    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise click.BadParameter(
            f"{spec!r} is not module:attribute, e.g. myproject.workflows:app",
            param_hint="'MODULE:APP'",
        )
    if any(c in module_name for c in "/\\") or module_name.endswith(".py"):
        dotted = module_name.replace("\\", "/").removesuffix(".py").lstrip("./")
        raise click.BadParameter(
            f"{spec!r} names a file; MODULE:APP takes a module's dotted name, as "
            f"`import` does: e.g. {dotted.replace('/', '.') or 'app'}:{attr}, run from the "
            "folder the module is in",
            param_hint="'MODULE:APP'",
        )
    if not all(part.isidentifier() for part in module_name.split(".")):
        raise click.BadParameter(
            f"{spec!r}: {module_name!r} is not a module name; write it as `import` "
            "would, e.g. myproject.workflows:app",
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
    """`text` as JSON of the given kind (array or object); `what` names the
    parameter in the error message."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise click.BadParameter(f"not valid JSON: {exc}", param_hint=what) from exc
    except RecursionError as exc:
        raise click.BadParameter("JSON nested too deeply; flatten it", param_hint=what) from exc
    if not isinstance(value, kind):
        shape = "array, e.g. '[1, \"a\"]'" if kind is list else "object, e.g. '{\"a\": 1}'"
        raise click.BadParameter(f"must be a JSON {shape}", param_hint=what)
    return value


def read_intent(path: str, what: str = "'--intent'") -> Intent:
    """The `stead.Intent` in the JSON file at `path` (fields as in
    `Intent.to_json`, grants with `expires_in` or `expires_at`)."""
    from stead.intent import Intent

    text = read_text(path, what)
    try:
        return Intent.loads(text)
    except errors.InvalidIntent as exc:
        raise click.BadParameter(f"{path}: {exc}", param_hint=what) from exc


def _author(ctx: click.Context, param: click.Parameter, value: str | None) -> str:
    from stead.client import revisions

    try:
        return revisions.author(value)
    except errors.InvalidInput as exc:
        raise click.BadParameter(f"{exc}; give --by NAME", ctx=ctx, param=param) from None


def read_text(path: str, what: str) -> str:
    """The text of the file at `path` (`what` names the option in errors)."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise click.BadParameter(f"cannot read {path!r}: {reason}", param_hint=what) from exc


def read_grants(text: str, what: str) -> list[Grant]:
    """`text` as a JSON array of grants, each as in an intent file."""
    from stead.intent import Grant

    try:
        return [Grant.from_json(g) for g in parse_json(text, what, list)]
    except errors.InvalidIntent as exc:
        raise click.BadParameter(str(exc), param_hint=what) from exc


def decision_options(f: F) -> F:
    """`--by WHO --why WHY`: who decides on a run (default: the OS user), and
    why (both recorded)."""
    f = click.option("--why", required=True, help="Why (recorded with the decision).")(f)
    return click.option("--by", "by", default=None, callback=_author, metavar="NAME",
                        help="Who decides, recorded with the decision (default: the "
                             "current OS user).")(f)


# -- numbers ------------------------------------------------------------------------------
class Seconds(click.ParamType[float, Any]):
    """A duration in seconds, checked by `stead.bounds`: NaN, infinities,
    negatives (and zero, unless `zero`) and more than a century are refused
    as a usage error naming the option."""

    name = "seconds"

    def __init__(self, *, zero: bool = False, least: float | None = None) -> None:
        self.zero = zero
        self.least = least

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> float:
        if isinstance(value, float):
            return value
        try:
            seconds = bounds.seconds(_number(value), "it", zero=self.zero)
        except errors.InvalidValue as exc:
            self.fail(_said(exc), param, ctx)
        if self.least is not None and seconds < self.least:
            self.fail(f"{value!r}: give at least {self.least:g} seconds", param, ctx)
        return seconds


class Whole(click.ParamType[int, Any]):
    """A whole number from `least` to `most` (a version, a priority, a count)."""

    name = "integer"

    def __init__(self, least: int = 0, most: int = bounds.MAX_EXACT) -> None:
        self.least = least
        self.most = most

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            number: Any = value
        else:
            try:
                number = int(str(value).strip())
            except ValueError:
                self.fail(f"{value!r} is not a whole number", param, ctx)
        try:
            return bounds.integer(number, "it", least=self.least, most=self.most)
        except errors.InvalidValue as exc:
            self.fail(_said(exc), param, ctx)


def _said(exc: errors.InvalidValue) -> str:
    return str(exc).removeprefix("it is ").removesuffix("; nothing was stored")


def _number(text: Any) -> float:
    try:
        return float(str(text).strip())
    except ValueError:
        raise errors.InvalidValue(f"it is {text!r}, not a number of seconds") from None


SECONDS = Seconds()
SECONDS_OR_ZERO = Seconds(zero=True)
VERSION = Whole(1, bounds.MAX_INT32)
PRIORITY = Whole(-bounds.MAX_INT32, bounds.MAX_INT32)
COUNT = Whole(1)  # a batch, a limit: at least one
POSITION = Whole(0)  # a journal seq


def grace_option(f: F) -> F:
    """`--grace SECONDS`: how long no worker may serve a runnable run's
    version before the run counts as stranded."""
    from stead.client.listing import STRANDED_AFTER

    return click.option(
        "--grace", type=SECONDS_OR_ZERO, default=STRANDED_AFTER, show_default=True,
        metavar="SECONDS", help="A runnable run no worker has served this long is stranded.")(f)


def app_argument(f: F) -> F:
    return click.argument("app_spec", metavar="MODULE:APP")(f)


def run_argument(f: F) -> F:
    return click.argument("run_id", metavar="RUN")(f)


def json_option(f: F) -> F:
    return click.option("--json", "as_json", is_flag=True,
                        help="Print JSON instead of text.")(f)
