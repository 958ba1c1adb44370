"""The workflows whose runs the upgrade fixtures hold (tests/upgrade/fixtures),
written against what every release the fixtures come from offers, so that
each release's code wrote them and today's code finishes them.

Each effect writes a line to the file named by $UPGRADE_LEDGER, so a test
sees what was sent, and how often. With $UPGRADE_DIE set, `charge` kills its
own process once it has sent: the run is left mid-effect, its outcome unknown.
"""

from __future__ import annotations

import json
import os
import signal
from typing import Any

import stead

LEDGER = "UPGRADE_LEDGER"
DIE = "UPGRADE_DIE"

app = stead.App("upgrade")
app.queue("held", concurrency=1)


def _ledger(effect: str, key: str, order: str) -> None:
    with open(os.environ[LEDGER], "a", encoding="utf-8") as out:
        out.write(json.dumps({"effect": effect, "key": key, "order": order}) + "\n")


def look(order: str) -> dict[str, Any]:
    return {"order": order, "eligible": True}


def notify(op: stead.Operation, order: str) -> dict[str, str]:
    _ledger("notify", op.key, order)
    return {"sent": op.key}


def charge_card(op: stead.Operation, order: str) -> dict[str, str]:
    _ledger("charge", op.key, order)
    if os.environ.get(DIE):
        os.kill(os.getpid(), signal.SIGKILL)  # sent, and never acknowledged
    return {"charged": op.key}


def pay_back(op: stead.Operation, order: str, amount: int) -> dict[str, Any]:
    _ledger("refund", op.key, order)
    return {"refunded": amount}


@app.policy(version="upgrade@1")
def judge(intent: stead.Intent | None, state: dict[str, Any], run: Any,
          action: stead.Action | None) -> stead.Continue | stead.Pause:
    if action is not None and action.kind == "effect" and action.name == "refund" \
            and action.arguments["amount"] > 100:
        return stead.Pause("refunds over 100 need a person")
    return stead.Continue()


@app.workflow(name="approval")
async def approval(run: stead.Run, order: str) -> dict[str, Any]:
    facts = await run.step("look", look, order)
    answer = await (await run.wait("approval"))
    sent = await run.effect("notify", notify, order)
    return {"order": facts["order"], "approved": answer["approved"], "sent": sent["sent"]}


@app.workflow(name="sleeper")
async def sleeper(run: stead.Run, seconds: float) -> str:
    await run.step("before", look, "sleeper")
    await run.sleep(seconds)
    await run.step("after", look, "sleeper")
    return "woke"


@app.workflow(name="charge")
async def charge(run: stead.Run, order: str) -> dict[str, str]:
    await run.step("look", look, order)
    charged: dict[str, str] = await run.effect("charge", charge_card, order)
    return charged


@app.workflow(name="queued")
async def queued(run: stead.Run, n: int) -> int:
    doubled: int = await run.step("double", lambda: n * 2)
    return doubled


@app.workflow(name="refund")
async def refund(run: stead.Run, order: str, amount: int) -> dict[str, Any]:
    await run.step("look", look, order)
    done: dict[str, Any] = await run.effect("refund", pay_back, order=order, amount=amount,
                                            tool="refund")
    return done


@app.workflow(name="parent")
async def parent(run: stead.Run, order: str) -> dict[str, Any]:
    child = await run.child(approval, order, task_id=f"child-{order}")
    return {"child": child}
