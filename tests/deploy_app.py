"""One refund workflow in two versions, for the deploy tests
(tests/test_deploys.py), run by real `stead worker` processes.

Version 2 renamed the step `check` to `check_eligibility` and takes a
currency. `v1` hosts version 1; `v2` hosts only version 2; `v2_migrating`
also registers the migration from 1 to 2. The effect `notify` writes each
call to the file named by $DEPLOY_LEDGER, to show it is never sent twice.
"""

from __future__ import annotations

import json
import os
from typing import Any

import stead


def check(order_id: str) -> dict[str, Any]:
    return {"order_id": order_id, "eligible": True}


def notify(op: stead.Operation, order_id: str) -> dict[str, str]:
    with open(os.environ["DEPLOY_LEDGER"], "a") as ledger:
        ledger.write(json.dumps({"key": op.key, "order_id": order_id}) + "\n")
    return {"sent": op.key}


v1 = stead.App("shop")


@v1.workflow(name="refund", version=1)
async def refund_v1(run: stead.Run, order_id: str) -> dict[str, Any]:
    facts = await run.step("check", check, order_id)
    sent = await run.effect("notify", notify, order_id)
    answer = await (await run.wait("approval", token=False))
    return {"version": 1, "eligible": facts["eligible"], "sent": sent["sent"],
            "approved": answer["approved"]}


def _v2(migrating: bool) -> stead.App:
    app = stead.App("shop")

    @app.workflow(name="refund", version=2)
    async def refund_v2(run: stead.Run, order_id: str, currency: str) -> dict[str, Any]:
        facts = await run.step("check_eligibility", check, order_id)
        sent = await run.effect("notify", notify, order_id)
        answer = await (await run.wait("approval", token=False))
        return {"version": 2, "eligible": facts["eligible"], "sent": sent["sent"],
                "approved": answer["approved"], "currency": currency}

    if migrating:
        @app.migration("refund", from_version=1, to_version=2)
        def to_v2(old: stead.MigrationView) -> stead.Migrated:
            return stead.Migrated(args=[*old.args, "EUR"],
                                  journal=old.rename("check", "check_eligibility"))

    return app


v2 = _v2(migrating=False)
v2_migrating = _v2(migrating=True)

# A migration that would lose the effect's records: refused.
v2_lossy = _v2(migrating=False)


@v2_lossy.migration("refund", from_version=1, to_version=2)
def drop_everything(old: stead.MigrationView) -> stead.Migrated:
    return stead.Migrated(args=[*old.args, "EUR"], journal=old.cut(0))
