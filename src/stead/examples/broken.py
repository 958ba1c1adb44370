"""Do not copy this one: a refund made in a plain `run.step`, the mistake the
crash matrix is there to catch.

A step's function may run again: if the worker dies after the function
returned and before its record committed, the worker that takes the run over
calls it once more. For a read that is harmless; for a refund it is a second
call to the payment service. Here the key is the order (so this fake service
pays once), but the service's own ledger shows two refund calls, and a service
without idempotency keys would have paid twice.

    stead chaos stead.examples.broken:app refund_in_a_step '["123", 4200]' \\
        --services stead.testing.examples:SERVICES

names the point and the key: "before write 1 commits (step refund): 2 calls
under key refund-123 ...". The fix is `run.effect("refund", ...)` with
`op.key` as the idempotency key, as `stead.examples.refund_agent` does.
"""

from __future__ import annotations

from typing import Any

import stead
from stead.examples import services

app = stead.App("broken")


def refund(order_id: str, amount: int) -> dict[str, Any]:
    return services.Payments().refund(order_id, amount, idempotency_key=f"refund-{order_id}")


@app.workflow(version=1)
async def refund_in_a_step(run: stead.Run, order_id: str, amount: int) -> dict[str, Any]:
    receipt = await run.step("refund", refund, order_id, amount)  # wrong: an effect in a step
    return {"order_id": order_id, "refund": receipt["refund"]}
