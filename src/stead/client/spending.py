"""A platform team's settings for its tenants: each tenant's spend budget and
quotas, the price table model calls are costed by, and what a tenant's runs
hold now (see `stead.spend`). Raising a tenant's budget resumes the runs its
spend paused."""

from __future__ import annotations

import dataclasses
from typing import Any

from stead import bounds, errors, tenants
from stead.client import revisions
from stead.client.deciding import Deciding
from stead.client.info import RunInfo
from stead.records import RunStatus
from stead.spend import Limits, Price

# How many paused runs a change of limits looks at to resume, newest first.
RESUME_AT_MOST = 10_000


@dataclasses.dataclass(frozen=True, slots=True)
class TenantSpend:
    """A tenant's limits (None: none set) and what its model calls hold:
    `tokens` and `cost` settled, `reserved_tokens` and `reserved_cost` in
    flight; `paused`: its runs paused on its spend budget."""

    tenant: str
    limits: Limits | None
    tokens: int
    cost: float
    reserved_tokens: int
    reserved_cost: float
    paused: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"tenant": self.tenant,
                "limits": None if self.limits is None else self.limits.to_json(),
                "tokens": self.tokens, "cost": self.cost,
                "reserved_tokens": self.reserved_tokens, "reserved_cost": self.reserved_cost,
                "paused": list(self.paused)}


@dataclasses.dataclass(frozen=True, slots=True)
class RunSpend:
    """A run's reservations, oldest first (see `Store.reservations`), and
    its tenant's spend (None: the run serves no tenant)."""

    reservations: tuple[dict[str, Any], ...]
    tenant: TenantSpend | None


def _tenant(tenant: str) -> str:
    checked = tenants.check(tenant, "a tenant")
    if checked is None:
        raise errors.InvalidTenant("name the tenant: a tenant id, not None")
    return checked


def paused_on_spend(info: RunInfo, tenant: str) -> bool:
    """Whether `info` is paused because `tenant`'s spend budget refused a call."""
    error = info.error or {}
    return (info.status == RunStatus.PAUSED and error.get("cause") == "spend"
            and error.get("scope") == "tenant" and error.get("tenant") == tenant)


class Spending(Deciding):
    """Tenant limits, prices and spend."""

    async def set_tenant_limits(self, tenant: str, *, why: str, by: str | None = None,
                                resume: bool = True, **changes: Any) -> Limits:
        """Change `tenant`'s limits (the fields of `stead.spend.Limits`: a
        value sets one, None lifts it), recorded with who and why. With
        `resume`, the tenant's runs paused on its spend budget are resumed:
        each reserves again when a worker takes it, against the new budget."""
        tenant = _tenant(tenant)
        if not isinstance(why, str) or not why.strip():
            raise errors.InvalidInput("a change of limits says why: give why=")
        bounds.text(why, "why")
        author = revisions.author(by)
        limits = await self.store.set_tenant_limits(tenant, changes, by=author, why=why)
        if resume:
            for run_id in await self._paused_on_spend(tenant):
                try:
                    await self.resume(run_id, by=author, why=f"tenant {tenant} limits: {why}")
                except errors.NotStopped:
                    continue  # resumed meanwhile
        return limits

    async def tenant_limits(self, tenant: str) -> Limits | None:
        return await self.store.tenant_limits(_tenant(tenant))

    async def tenant_spend(self, tenant: str) -> TenantSpend:
        """`tenant`'s limits, what its runs hold, and which are paused on it."""
        tenant = _tenant(tenant)
        held = await self.store.tenant_spend(tenant)
        return TenantSpend(tenant, await self.store.tenant_limits(tenant), **held,
                           paused=tuple(await self._paused_on_spend(tenant)))

    async def run_spend(self, run_id: str) -> RunSpend:
        """What run `run_id`'s model calls reserved and settled, and where its
        tenant stands."""
        held = tuple(await self.store.reservations(run_id))
        tenant = await self.store.run_tenant(run_id)
        if tenant is None:
            return RunSpend(held, None)
        return RunSpend(held, await self.tenant_spend(tenant))

    async def reset_tenant_spend(self, tenant: str) -> None:
        """Start a new budget period for `tenant`: its settled spend is
        forgotten (what is reserved stays held)."""
        await self.store.reset_tenant_spend(_tenant(tenant))

    async def set_price(self, model: str, *, input: float, output: float) -> Price:
        """Price `model`'s tokens: `input` per million input tokens, `output`
        per million output tokens (the unit is the platform's)."""
        if not isinstance(model, str) or not model:
            raise errors.InvalidValue("a price names its model")
        bounds.text(model, "a model's name")
        price = Price(input, output)
        await self.store.set_price(model, price)
        return price

    async def prices(self) -> dict[str, Price]:
        return await self.store.prices()

    async def _paused_on_spend(self, tenant: str) -> list[str]:
        rows = await self.store.list_runs(status=RunStatus.PAUSED, limit=RESUME_AT_MOST,
                                          tenant=tenant)
        infos = (RunInfo.from_row(row) for row in rows)
        return [info.run_id for info in infos if paused_on_spend(info, tenant)]
