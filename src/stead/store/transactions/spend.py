"""A tenant's spend: a model call's reservation, written with its started
marker before it is sent, and its settlement, written with its outcome; the
price table and each tenant's limits.

Every reservation of a tenant locks the tenant's `tenant_spend` row (SQLite's
single writer; on PostgreSQL the upsert that reads it), reads what the tenant and the run
hold, asks the pure `stead.spend.judge`, then writes: two workers reserving
against one budget at once are judged one after the other, so together they
cannot pass it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from stead import spend
from stead.spend import Limits, Price, ReservationState, Totals
from stead.store._rows import Row
from stead.store.seam import FencedWrite, Flow, Journal, execute, one, rows
from stead.store.transactions import quotas


@dataclasses.dataclass(frozen=True, slots=True)
class Reservation:
    """Attempt `attempt` of the model call at `addr` asks to reserve its
    estimate; `run_tokens` and `run_cost` are the run's budget (None: none)."""

    addr: str
    attempt: int
    model: str
    input_tokens: int
    output_tokens: int
    run_tokens: int | None = None
    run_cost: float | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Settlement:
    """The outcome of attempt `attempt` of the call at `addr`: the tokens it
    used (`input_tokens`, `output_tokens`), or `released` (it failed: nothing
    was used). `attempt` None: the call's open attempts died in flight (each
    counts at its estimate)."""

    addr: str
    attempt: int | None
    input_tokens: int = 0
    output_tokens: int = 0
    released: bool = False


SETTLED, RELEASED, DIED = (ReservationState.SETTLED, ReservationState.RELEASED,
                           ReservationState.DIED)


def price(row: Row | None) -> Price | None:
    return None if row is None else Price(float(row["input_per_million"]),
                                          float(row["output_per_million"]))


def _resolve(row: Row, state: str, held: Totals, now: float) -> Flow[None]:
    """Close reservation `row` as `state`, now holding `held`; its tenant's
    counts move from reserved to settled."""
    yield execute("close_reservation", {
        "run_id": row["run_id"], "addr": row["addr"], "attempt": row["attempt"],
        "tenant": row["tenant"], "state": state, "tokens": held.tokens, "cost": held.cost,
        "held_tokens": int(row["tokens"]), "held_cost": float(row["cost"]), "now": now})


def _died(run_id: str, addr: str, before: int | None, now: float) -> Flow[None]:
    """The call's attempts still reserved (before `before`, if given) were in
    flight when their worker died: each was sent, as far as anyone knows, and
    counts at its estimate."""
    for row in (yield rows("reserved_at", {"run_id": run_id, "addr": addr})):
        if before is None or int(row["attempt"]) < before:
            yield from _resolve(row, DIED, Totals(int(row["tokens"]), float(row["cost"])), now)


def reserve(write: FencedWrite, ask: Reservation, now: float) -> Flow[None]:
    """Reserve `ask`'s estimate, journaling `write` (the call's started
    marker and whatever it carries) with it, the fence checked by that
    journal write; or raise `SpendRefused` (a budget would be passed) or
    `QuotaExceeded` (its tenant's stored bytes), having written nothing."""
    run_id = write.fence.run_id
    if ask.attempt > 1:  # an earlier attempt may have died in flight
        yield from _died(run_id, ask.addr, ask.attempt, now)
    ctx = yield one("reserve_context", {"run_id": run_id, "model": ask.model})
    tenant = str(ctx["tenant"]) if ctx["tenant"] else None
    priced = price(ctx) if ctx["input_per_million"] is not None else None
    estimate = Totals(ask.input_tokens + ask.output_tokens,
                      spend.cost_of(priced, ask.input_tokens, ask.output_tokens))
    limits, spent, reserved = None, Totals(), Totals()
    if tenant is not None:
        row = yield one("lock_tenant_spend", {"tenant": tenant})
        spent = Totals(int(row["tokens"]), float(row["cost"]))
        reserved = Totals(int(row["reserved_tokens"]), float(row["reserved_cost"]))
        limits = None if ctx["limits"] is None else Limits.loads(str(ctx["limits"]))
    refusal = spend.judge(spend.Ask(
        model=ask.model, estimate=estimate, priced=priced is not None, run_id=run_id,
        run_tokens=ask.run_tokens, run_cost=ask.run_cost,
        run_held=Totals(int(ctx["run_tokens"]), float(ctx["run_cost"])), tenant=tenant,
        limits=limits, tenant_spent=spent, tenant_reserved=reserved))
    if refusal is not None:
        raise refusal
    if tenant is not None and limits is not None:
        # A runaway's model calls stop at its tenant's stored-bytes quota too.
        yield from quotas.stored_bytes(tenant, limits, f"a model call of run {run_id}")
    yield execute("open_reservation", {
        "run_id": run_id, "addr": ask.addr, "attempt": ask.attempt, "tenant": tenant,
        "model": ask.model, "input_price": None if priced is None else priced.input,
        "output_price": None if priced is None else priced.output,
        "tokens": estimate.tokens, "cost": estimate.cost, "now": now})
    yield Journal(write)


def settle(write: FencedWrite, outcome: Settlement, now: float) -> Flow[None]:
    """Journal `write` (the call's outcome; the fence checked by it) and
    settle or release its reservation in the same transaction."""
    run_id = write.fence.run_id
    if outcome.attempt is None:
        yield from _died(run_id, outcome.addr, None, now)
    else:
        yield execute("settle_reservation", {
            "run_id": run_id, "addr": outcome.addr, "attempt": outcome.attempt,
            "state": RELEASED if outcome.released else SETTLED,
            "input_tokens": 0 if outcome.released else outcome.input_tokens,
            "output_tokens": 0 if outcome.released else outcome.output_tokens, "now": now})
    yield Journal(write)


def set_tenant_limits(tenant: str, changes: dict[str, Any], by: str, why: str,
                      now: float) -> Flow[Limits]:
    """Apply `changes` to the tenant's limits (a name set to None lifts it)."""
    current = (yield from quotas.tenant_limits(tenant)) or Limits()
    new = current.merged(changes)
    yield execute("set_tenant_limits", {"tenant": tenant, "limits": new.dumps(), "now": now,
                                        "by": by, "why": why})
    return new
