"""`stead tenants`: a platform team's settings for its tenants, kept in the
database (see `stead.spend`): each tenant's spend budget (model tokens, cost)
and quotas (runs started per minute, open waits, children per run, stored
bytes), and the price table model calls are costed by."""

from __future__ import annotations

import json
from typing import Any

import click

from stead import bounds, errors
from stead.cli import common
from stead.spend import QUOTAS, Limits, Price

NONE = "none"
# Each limit's option, and whether it is an amount (a cost) or a whole number.
_LIMITS = {"tokens": False, "cost": True, **{name: False for name in QUOTAS}}


class LimitValue(click.ParamType[Any, Any]):
    """A limit: a number, or `none` to lift it."""

    name = "number|none"

    def __init__(self, amount: bool) -> None:
        self.amount = amount

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        if value is None or (isinstance(value, str) and value.strip().lower() == NONE):
            return NONE
        try:
            if self.amount:
                return bounds.amount(float(value), "it")
            return bounds.integer(int(value), "it")
        except (ValueError, errors.InvalidValue) as exc:
            self.fail(f"{value!r} is not a limit ({exc}); give a number, or 'none' to lift it",
                      param, ctx)


def _limit_options(f: Any) -> Any:
    for name in reversed(list(_LIMITS)):
        what = "cost (in the price table's unit)" if name == "cost" else (
            "model tokens" if name == "tokens" else QUOTAS[name])
        f = click.option(f"--{name.replace('_', '-')}", name, type=LimitValue(_LIMITS[name]),
                         default=None, help=f"The limit on {what}; 'none' lifts it.")(f)
    return f


@click.group("tenants")
def tenants_group() -> None:
    """Tenants' spend budgets and quotas, and the model price table."""


@tenants_group.command("set")
@click.argument("tenant")
@_limit_options
@click.option("--resume/--no-resume", default=True, show_default=True,
              help="Resume the tenant's runs paused on its spend budget.")
@common.decision_options
@click.pass_context
def tenants_set(ctx: click.Context, /, tenant: str, resume: bool, by: str, why: str,
                **limits: Any) -> None:
    """Set TENANT's spend budget and quotas (the ones given; the others stay),
    recorded with who and why."""
    db = common.database_url(ctx)
    common.require_database(db)
    changes = {name: None if value == NONE else value
               for name, value in limits.items() if value is not None}
    if not changes:
        raise click.UsageError("give at least one limit (--tokens, --cost, --runs-per-minute, "
                               "--open-waits, --children-per-run, --stored-bytes)")

    async def go() -> Limits:
        async with common.opened_client(db) as client:
            return await client.set_tenant_limits(tenant, by=by, why=why, resume=resume,
                                                  **changes)

    now = common.run_async(go())
    click.echo(f"tenant {common.safe(tenant)}: {_shown(now)}")


@tenants_group.command("show")
@click.argument("tenant")
@common.json_option
@click.pass_context
def tenants_show(ctx: click.Context, tenant: str, as_json: bool) -> None:
    """Print TENANT's limits, what its model calls hold (settled and
    reserved), and its runs paused on its spend budget."""
    db = common.database_url(ctx)
    common.require_database(db)

    async def go() -> Any:
        async with common.opened_client(db) as client:
            return await client.tenant_spend(tenant)

    spend = common.run_async(go())
    if as_json:
        click.echo(json.dumps(spend.to_json(), sort_keys=True))
        return
    lines = [f"tenant {tenant}",
             f"  limits: {_shown(spend.limits) if spend.limits else 'none'}",
             f"  spent: {spend.tokens} tokens, cost {spend.cost:.6g}",
             f"  reserved: {spend.reserved_tokens} tokens, cost {spend.reserved_cost:.6g}"]
    if spend.paused:
        lines.append(f"  paused on spend: {', '.join(spend.paused)}")
    common.echo("\n".join(lines))


@tenants_group.command("ls")
@common.json_option
@click.pass_context
def tenants_ls(ctx: click.Context, as_json: bool) -> None:
    """List the tenants that have limits, with who set them last."""
    db = common.database_url(ctx)
    common.require_database(db)

    async def go() -> list[dict[str, Any]]:
        async with common.opened_store(db) as store:
            return await store.list_tenant_limits()

    found = common.run_async(go())
    if as_json:
        click.echo(json.dumps([{**t, "limits": t["limits"].to_json()} for t in found],
                              sort_keys=True))
        return
    for t in found:
        common.echo(f"{t['tenant']}  {_shown(t['limits'])}  (by {t['updated_by']}: {t['why']})")


@tenants_group.command("reset")
@click.argument("tenant")
@common.decision_options
@click.pass_context
def tenants_reset(ctx: click.Context, tenant: str, by: str, why: str) -> None:
    """Start a new budget period for TENANT: its settled spend is forgotten
    (what is reserved stays held)."""
    db = common.database_url(ctx)
    common.require_database(db)

    async def go() -> None:
        async with common.opened_client(db) as client:
            await client.reset_tenant_spend(tenant)

    common.run_async(go())
    click.echo(f"tenant {common.safe(tenant)}: spend reset (by {common.safe(by)}: "
               f"{common.safe(why)})")


@tenants_group.command("price")
@click.argument("model")
@click.option("--input", "input_price", type=LimitValue(True), required=True,
              help="The price of a million input tokens.")
@click.option("--output", "output_price", type=LimitValue(True), required=True,
              help="The price of a million output tokens.")
@click.pass_context
def tenants_price(ctx: click.Context, model: str, input_price: Any, output_price: Any) -> None:
    """Price MODEL's tokens (per million input and output tokens), for the
    cost budgets of tenants and runs."""
    db = common.database_url(ctx)
    common.require_database(db)
    if NONE in (input_price, output_price):
        raise click.BadParameter("a price is a number", param_hint="'--input' / '--output'")

    async def go() -> Price:
        async with common.opened_client(db) as client:
            return await client.set_price(model, input=input_price, output=output_price)

    price = common.run_async(go())
    click.echo(f"model {common.safe(model)}: {price.input:g} per million input tokens, "
               f"{price.output:g} per million output tokens")


@tenants_group.command("prices")
@common.json_option
@click.pass_context
def tenants_prices(ctx: click.Context, as_json: bool) -> None:
    """List the price table."""
    db = common.database_url(ctx)
    common.require_database(db)

    async def go() -> dict[str, Price]:
        async with common.opened_store(db) as store:
            return await store.prices()

    prices = common.run_async(go())
    if as_json:
        click.echo(json.dumps({m: {"input": p.input, "output": p.output}
                               for m, p in prices.items()}, sort_keys=True))
        return
    for model, p in prices.items():
        common.echo(f"{model}  input {p.input:g}/M  output {p.output:g}/M")


def _shown(limits: Limits) -> str:
    data = limits.to_json()
    return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                     for k, v in data.items()) or "no limits"
