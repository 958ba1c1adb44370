"""A run's spend as text and JSON (`stead runs show`): what its model calls
reserved and settled, and where its tenant stands against its budget, so a
run of a tenant whose budget is spent says why its model calls wait. Pure
functions over what `Client.run_spend` returns."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stead.client.spending import RunSpend


def over(spend: RunSpend) -> list[str]:
    """Each budget of the run's tenant that is spent (held at or past it)."""
    tenant = spend.tenant
    if tenant is None or tenant.limits is None:
        return []
    spent = []
    held_tokens = tenant.tokens + tenant.reserved_tokens
    held_cost = tenant.cost + tenant.reserved_cost
    if tenant.limits.tokens is not None and held_tokens >= tenant.limits.tokens:
        spent.append(f"tokens: {held_tokens} of {tenant.limits.tokens} spent or reserved")
    if tenant.limits.cost is not None and held_cost >= tenant.limits.cost:
        spent.append(f"cost: {held_cost:.6g} of {tenant.limits.cost:.6g} spent or reserved")
    return spent


def render(spend: RunSpend) -> str:
    """The lines `stead runs show` prints under the timeline ("" if none)."""
    lines = []
    if spend.reservations:
        states = Counter(str(r["state"]) for r in spend.reservations)
        held = [r for r in spend.reservations if r["state"] != "released"]
        lines.append(
            f"spend: {sum(r['tokens'] for r in held)} tokens, cost "
            f"{sum(r['cost'] for r in held):.6g} over {len(spend.reservations)} model call "
            f"attempt(s) ({', '.join(f'{n} {s}' for s, n in sorted(states.items()))})")
    tenant = spend.tenant
    if tenant is not None and tenant.limits is not None:
        limits = tenant.limits
        budget = ", ".join(part for part in (
            None if limits.tokens is None else f"{limits.tokens} tokens",
            None if limits.cost is None else f"cost {limits.cost:.6g}") if part) or "none"
        lines.append(f"tenant {tenant.tenant}: {tenant.tokens} tokens and cost "
                     f"{tenant.cost:.6g} spent, {tenant.reserved_tokens} tokens reserved; "
                     f"budget {budget}")
        spent = over(spend)
        if spent:
            lines.append(f"  the tenant's budget is spent ({'; '.join(spent)}): this run's "
                         f"next model call pauses until it is raised (stead tenants set "
                         f"{tenant.tenant} ...)")
        elif tenant.paused:
            lines.append(f"  {len(tenant.paused)} run(s) of the tenant are paused on its "
                         "budget: a model call that would pass it pauses its run until it is "
                         f"raised (stead tenants show {tenant.tenant})")
    return "\n".join(lines)


def to_json(spend: RunSpend) -> dict[str, Any]:
    return {"reservations": [{**r, "state": str(r["state"])} for r in spend.reservations],
            "tenant": None if spend.tenant is None else spend.tenant.to_json(),
            "tenant_budget_spent": over(spend)}
