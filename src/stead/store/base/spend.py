"""Spend: a model call's reservation and settlement (fenced, journaled with
the call's records), the price table and each tenant's limits and spend."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from stead.spend import Limits, Price, ReservationState
from stead.store.base.part import StorePart
from stead.store.seam import FencedWrite, Flow, Writing, execute
from stead.store.transactions import common, journal, quotas
from stead.store.transactions import spend as tx

if TYPE_CHECKING:
    from stead.records import Fence, Record, ResumeRecord


class Spending(StorePart):
    """The `Store`'s operations on spend and tenant limits."""

    async def reserve_spend(self, fence: Fence, records: Sequence[Record],
                            resume: ResumeRecord | None, ask: tx.Reservation) -> None:
        """Reserve a model call's estimate and journal `records` (its started
        marker) in one fenced transaction; `SpendRefused` (nothing written)
        if a budget would be passed."""
        write = FencedWrite(fence, records, resume)
        await self.database.write(
            lambda: tx.reserve(write, ask, self.clock.now()),
            Writing(landed=lambda _: journal.journaled(write), pipelined=True))

    async def settle_spend(self, fence: Fence, records: Sequence[Record],
                           resume: ResumeRecord | None, outcome: tx.Settlement) -> None:
        """Journal `records` (a model call's outcome) and settle or release
        its reservation, in one fenced transaction."""
        write = FencedWrite(fence, records, resume)
        await self.database.write(
            lambda: tx.settle(write, outcome, self.clock.now()),
            Writing(landed=lambda _: journal.journaled(write), pipelined=True))

    async def run_tenant(self, run_id: str) -> str | None:
        """The tenant run `run_id` serves; None for none."""
        return await self.database.read(lambda: quotas.run_tenant(run_id))

    async def set_tenant_limits(self, tenant: str, changes: dict[str, Any], *, by: str,
                                why: str) -> Limits:
        """Change a tenant's limits (`stead.spend.Limits` field names; None
        lifts one); returns them as they now stand."""
        now = self.clock.now()
        return await self.database.write(
            lambda: tx.set_tenant_limits(tenant, changes, by, why, now), Writing())

    async def tenant_limits(self, tenant: str) -> Limits | None:
        return await self.database.read(lambda: quotas.tenant_limits(tenant))

    async def list_tenant_limits(self) -> list[dict[str, Any]]:
        """Every tenant with limits: `tenant`, `limits` (a `Limits`),
        `updated_at`, `updated_by`, `why`."""
        return await self.database.read(lambda: common.read_all(
            "list_tenant_limits", {}, lambda row: {
                "tenant": row["tenant"], "limits": Limits.loads(str(row["limits"])),
                "updated_at": float(row["updated_at"]), "updated_by": row["updated_by"],
                "why": row["why"]}))

    async def set_price(self, model: str, price: Price) -> None:
        now = self.clock.now()
        await self.database.write(lambda: _set_price(model, price, now), Writing())

    async def prices(self) -> dict[str, Price]:
        found = await self.database.read(lambda: common.read_all(
            "list_prices", {}, lambda row: (str(row["model"]), tx.price(row))))
        return {model: price for model, price in found if price is not None}

    async def tenant_spend(self, tenant: str) -> dict[str, Any]:
        """What a tenant's model calls hold: `tokens` and `cost` settled,
        `reserved_tokens` and `reserved_cost` in flight."""
        row = await self.database.read(lambda: common.read_one(
            "get_tenant_spend", {"tenant": tenant}, dict))
        zero = {"tokens": 0, "cost": 0.0, "reserved_tokens": 0, "reserved_cost": 0.0}
        if row is None:
            return zero
        return {"tokens": int(row["tokens"]), "cost": max(0.0, float(row["cost"])),
                "reserved_tokens": int(row["reserved_tokens"]),
                "reserved_cost": max(0.0, float(row["reserved_cost"]))}

    async def reset_tenant_spend(self, tenant: str) -> None:
        """Start a new budget period: the settled spend is forgotten; what is
        reserved stays held."""
        await self.database.write(
            lambda: _one_write("reset_tenant_spend", {"tenant": tenant}), Writing())

    async def reservations(self, run_id: str) -> list[dict[str, Any]]:
        """A run's reservations, oldest first: `addr`, `attempt`, `model`,
        `tokens`, `cost`, `state` (a `ReservationState`), `at`."""
        return await self.database.read(lambda: common.read_all(
            "list_reservations", {"run_id": run_id}, lambda row: {
                "addr": row["addr"], "attempt": int(row["attempt"]), "model": row["model"],
                "tenant": row["tenant"], "tokens": int(row["tokens"]),
                "cost": float(row["cost"]), "state": ReservationState(row["state"]),
                "at": float(row["at"])}))


def _set_price(model: str, price: Price, now: float) -> Flow[None]:
    yield execute("set_price", {"model": model, "input": price.input, "output": price.output,
                                "now": now})


def _one_write(name: str, params: dict[str, Any]) -> Flow[None]:
    yield execute(name, params)

