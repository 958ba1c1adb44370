"""A worker process hosting the order-123 refund workflow (tests/test_order_story.py).

    python order_worker.py --db URL --dir DIR

Everything the outside world sees is a file in DIR: the model's calls
(model.log), eligibility checks (eligibility.log), the confirmation link sent
to the user (link.json) and the payment service's ledger (payments.json).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pydantic

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import stead
from tests.outside import Payments

DIR = Path(os.environ.get("ORDER_DIR", "."))
app = stead.App("shop")


class Confirmation(pydantic.BaseModel):
    approved: bool


class LoggedModel:
    """Decides to check eligibility; every call is logged outside the process."""

    name = "scripted-refund"

    async def complete(self, messages: Any, **params: Any) -> stead.Completion:
        with open(DIR / "model.log", "a") as f:
            f.write("asked\n")
        return stead.Completion(
            text="", model=self.name,
            tool_calls=(stead.ToolCall("call_1", "check_eligibility", {"order_id": "123"}),),
        )


def check_eligibility(order_id: str, amount: int) -> dict[str, Any]:
    with open(DIR / "eligibility.log", "a") as f:
        f.write(f"{order_id}\n")
    return {"eligible": amount <= 10_000}


def send_link(op: stead.Operation, order_id: str, wait_id: str, token: stead.Token) -> str:
    link = {"order_id": order_id, "wait_id": wait_id, "token": token.reveal(), "key": op.key}
    (DIR / "link.json").write_text(json.dumps(link))
    return f"https://shop.example/confirm/{wait_id}"


def dispatch_refund(op: stead.Operation, order_id: str, amount: int) -> dict[str, Any]:
    return Payments(DIR / "payments.json").refund(order_id, amount, idempotency_key=op.key)


def find_refund(op: stead.Operation) -> stead.Outcome:
    found = Payments(DIR / "payments.json").lookup(op.key)
    return stead.Outcome.done(found) if found else stead.Outcome.not_found()


@app.workflow(version=1)
async def refund_order(run: stead.Run, order_id: str, amount: int) -> dict[str, Any]:
    decision = await run.llm("decide", LoggedModel(),
                             [{"role": "user", "content": f"refund order {order_id}"}])
    assert decision.tool_calls[0].name == "check_eligibility"
    await run.step("check_eligibility", check_eligibility, order_id, amount)
    facts = await run.state.update(
        {"status": "awaiting_user_confirmation", "refund_dispatched": False}, expect_version=0)
    w = await run.wait("user_confirmation", schema=Confirmation,
                       bind={"order_id": order_id, "amount": amount,
                             "state_version": facts.version},
                       expires_in=dt.timedelta(hours=48))
    await run.effect("send_confirmation_link", send_link, order_id, w.wait_id, w.token,
                     idempotent=True)
    answer = await w
    if not answer.approved:
        return {"refunded": False}
    again = await run.step("recheck_eligibility", check_eligibility, order_id, amount)
    if not again["eligible"]:
        return {"refunded": False}
    receipt = await run.effect("dispatch_refund", dispatch_refund, order_id, amount,
                               check=find_refund)
    await run.state.update({"status": "refunded", "refund_dispatched": True},
                           expect_version=facts.version)
    return {"refunded": True, "receipt": receipt}


async def main(db: str) -> None:
    store = await stead.open_store(db)
    worker = stead.Worker(app, store, stead.WorkerOptions(lease_seconds=1.0,
                                                          poll_interval=0.05))
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, worker.stop)
    print("ready", flush=True)
    try:
        await worker.run()
    finally:
        await store.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--dir", required=True)
    args = parser.parse_args()
    DIR = Path(args.dir)
    asyncio.run(main(args.db))
