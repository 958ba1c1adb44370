"""The arithmetic of a reservation: a call's estimate, its cost, and whether
it fits every budget that bounds it (`judge`)."""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from stead import errors
from stead.spend.limits import Limits, Price

# A call that names no output bound (`max_tokens`...) is estimated at this
# many output tokens.
DEFAULT_OUTPUT_TOKENS = 1024
# About four characters of English (or JSON) per token: the estimate needs no
# tokenizer, and the settlement corrects it to what the model reported.
_CHARS_PER_TOKEN = 4
_OUTPUT_PARAMS = ("max_tokens", "max_output_tokens", "max_completion_tokens")


class ReservationState(enum.StrEnum):
    """Where a model call's reservation stands."""

    RESERVED = "reserved"  # its attempt is in flight: the estimate is held
    SETTLED = "settled"  # its attempt answered: the usage it reported is held
    RELEASED = "released"  # its attempt failed: nothing is held
    DIED = "died"  # its worker died mid-call: the estimate is held for good


@dataclasses.dataclass(frozen=True, slots=True)
class Totals:
    """Tokens and cost: a call's estimate or usage, or a sum of them."""

    tokens: int = 0
    cost: float = 0.0

    def __add__(self, other: Totals) -> Totals:
        return Totals(self.tokens + other.tokens, self.cost + other.cost)


def estimate(messages: Sequence[Mapping[str, Any]], params: Mapping[str, Any]
             ) -> tuple[int, int]:
    """`(input_tokens, output_tokens)` a model call is reserved at before it is
    sent: its messages' JSON length over four, and its output bound (or
    `DEFAULT_OUTPUT_TOKENS`)."""
    text = json.dumps(list(messages), default=str, ensure_ascii=False)
    input_tokens = -(-len(text) // _CHARS_PER_TOKEN)
    for name in _OUTPUT_PARAMS:
        value = params.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return input_tokens, value
    return input_tokens, DEFAULT_OUTPUT_TOKENS


def cost_of(price: Price | None, input_tokens: int, output_tokens: int) -> float:
    """What the tokens cost at `price` (0 for an unpriced model)."""
    if price is None:
        return 0.0
    return (input_tokens * price.input + output_tokens * price.output) / 1_000_000


@dataclasses.dataclass(frozen=True, slots=True)
class Ask:
    """A reservation to judge: the run's budget (`run_tokens`, `run_cost`:
    None unbounded), what the run holds already (settled and reserved), the
    tenant's limits and what it holds, and the call's `estimate`."""

    model: str
    estimate: Totals
    priced: bool
    run_id: str
    run_tokens: int | None = None
    run_cost: float | None = None
    run_held: Totals = Totals()
    tenant: str | None = None
    limits: Limits | None = None
    tenant_spent: Totals = Totals()
    tenant_reserved: Totals = Totals()


def _over(scope: str, who: str, unit: str, held: float, more: float, limit: float,
          shown: Callable[[float], str]) -> errors.SpendRefused:
    return errors.SpendRefused(
        f"the {unit} budget of {who} would be passed: {shown(held)} spent or reserved, this "
        f"model call needs {shown(more)} more, of {shown(limit)}",
        {"scope": scope, "unit": unit, "held": held, "estimate": more, "limit": limit})


def _tokens(n: float) -> str:
    return f"{int(n)} tokens"


def _cost(n: float) -> str:
    return f"{n:.6g}"


def judge(ask: Ask) -> errors.SpendRefused | None:
    """Why the call may not be sent (its estimate on top of what is held
    would pass a budget), or None: it may."""
    refusal = None
    if ask.tenant is not None and ask.limits is not None:
        held = ask.tenant_spent + ask.tenant_reserved
        who = f"tenant {ask.tenant!r}"
        if ask.limits.tokens is not None and held.tokens + ask.estimate.tokens > ask.limits.tokens:
            refusal = _over("tenant", who, "tokens", held.tokens, ask.estimate.tokens,
                            ask.limits.tokens, _tokens)
        elif ask.limits.cost is not None and not ask.priced:
            refusal = _unpriced("tenant", who, ask.model)
        elif ask.limits.cost is not None and held.cost + ask.estimate.cost > ask.limits.cost:
            refusal = _over("tenant", who, "cost", held.cost, ask.estimate.cost, ask.limits.cost,
                            _cost)
    if refusal is None:
        held, who = ask.run_held, f"run {ask.run_id}"
        if ask.run_tokens is not None and held.tokens + ask.estimate.tokens > ask.run_tokens:
            refusal = _over("run", who, "tokens", held.tokens, ask.estimate.tokens,
                            ask.run_tokens, _tokens)
        elif ask.run_cost is not None and not ask.priced:
            refusal = _unpriced("run", who, ask.model)
        elif ask.run_cost is not None and held.cost + ask.estimate.cost > ask.run_cost:
            refusal = _over("run", who, "cost", held.cost, ask.estimate.cost, ask.run_cost,
                            _cost)
    if refusal is not None and ask.tenant is not None:
        refusal.detail["tenant"] = ask.tenant
    return refusal


def _unpriced(scope: str, who: str, model: str) -> errors.SpendRefused:
    return errors.SpendRefused(
        f"{who} has a cost budget, but model {model!r} has no price: its calls cannot be "
        f"costed (set one: stead tenants price {model} --input P --output P)",
        {"scope": scope, "unit": "price", "model": model})
