"""Spend and quotas: what a tenant (and a run) may consume and create.

- **Spend** is counted in model tokens and in a cost, from a price table the
  platform keeps in the database (per model: the price of a million input
  and of a million output tokens). A live model call *reserves* its estimate
  (`estimate`) before it is sent, in one transaction with the call's started
  marker; the call's outcome *settles* the reservation to the usage the model
  reported (journaled in the same transaction), or *releases* it when the
  call failed. An attempt whose worker died mid-call stays reserved until the
  run's next holder meets the call again: it then counts as sent, at its
  estimate (`died`). A replayed call reserves nothing.
- **Budgets**: a tenant's (`Limits.tokens`, `Limits.cost`) and a run's
  (`stead.Budget.tokens`, `stead.Budget.model_cost`). A reservation that would
  pass one is refused (`judge`): nothing is sent and the run pauses, saying
  which budget and by how much.
- **Quotas** (`Limits.runs_per_minute`, `open_waits`, `children_per_run`,
  `stored_bytes`) refuse what a tenant creates past them with
  `stead.errors.QuotaExceeded`.

The judgements here are pure; the store asks them inside the transaction
that holds the tenant's row (see `stead.store.transactions.spend`).
"""

from stead.spend.accounting import (
    DEFAULT_OUTPUT_TOKENS,
    Ask,
    ReservationState,
    Totals,
    cost_of,
    estimate,
    judge,
)
from stead.spend.limits import QUOTAS, Limits, Price

__all__ = ["DEFAULT_OUTPUT_TOKENS", "QUOTAS", "Ask", "Limits", "Price", "ReservationState",
           "Totals", "cost_of", "estimate", "judge"]
