"""The workflow of the rolling deploy test (tests/upgrade/test_rolling.py),
run by workers of the previous release and of this one on one database.

Each step writes `pid run step k` to $ROLLING_STEPS and the charge writes its
key to $ROLLING_LEDGER, so the test sees who ran what, and how often.

    python -m tests.upgrade.rolling_app URL FIRST LAST   # start orders FIRST..LAST-1
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

import stead

STEPS = "ROLLING_STEPS"
LEDGER = "ROLLING_LEDGER"
NAMES = ("load", "price", "stock", "pack", "ship")

app = stead.App("rolling")


def _note(env: str, line: str) -> None:
    with open(os.environ[env], "a", encoding="utf-8") as out:
        out.write(line + "\n")


def work(run_id: str, name: str, k: int) -> int:
    _note(STEPS, f"{os.getpid()} {run_id} {name} {k}")
    return k + len(name)


def charge_card(op: stead.Operation, k: int) -> str:
    _note(LEDGER, f"{os.getpid()} {op.key}")
    return op.key


@app.workflow(name="order")
async def order(run: stead.Run, k: int) -> dict[str, Any]:
    total = 0
    for name in NAMES[:3]:
        total += await run.step(name, work, run.id, name, k)
    charged = await run.effect("charge", charge_card, k)
    await run.sleep(0.2)
    for name in NAMES[3:]:
        total += await run.step(name, work, run.id, name, k)
    return {"k": k, "total": total, "charged": charged}


def expected(k: int) -> int:
    return sum(k + len(name) for name in NAMES)


async def start(url: str, first: int, last: int) -> None:
    store = await stead.open_store(url)
    try:
        client = stead.Client(store, app)
        for k in range(first, last):
            await client.start(order, k, task_id=f"order-{k}")
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(start(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
