"""A refund run that may only act under its authority, revalidated against
the refund policy service at every resume (the story of `stead demo policy`).

The run is started with an intent granting `dispatch_refund` up to a limit,
under the policy version that allowed it, for a while. It waits for the
customer's approval (a waiting run holds no worker); then the model proposes
the next step, the refund, under the policy in force when it is asked, and
the refund is dispatched only under a covering, unexpired grant. The app's
policy asks the (fake, file-backed) policy service for the limit in force: a
grant wider than the limit pauses the run before anything is sent, and once
every grant has expired the run pauses before its next model call; a person
decides (narrows, renews, or ends the run).

    stead start stead.examples.policy_agent:app refund '["123", 1000]' --intent intent.json

`refund_loop` is the same refund written as an agent loop: every turn asks
for the next action (`run.propose`) and acts on it. A plain crash reuses the
proposal; after a change (the policy, the grants, the task state) the
proposal not acted on yet is asked again with what holds now, and the policy
judges the step the run is about to take.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import stead
from stead.examples import services


def refund_policy(intent: stead.Intent | None, state: dict[str, Any], run: Any,
                  action: stead.Action | None) -> stead.Continue | stead.Pause:
    """Pause a run whose refund grant allows more than the policy's limit."""
    limit, version = services.RefundPolicy().current()
    grants = [] if intent is None else intent.grants_for("dispatch_refund")
    for grant in grants:
        allowed = grant.scope.get("max_amount", math.inf)
        if allowed > limit:
            return stead.Pause(
                f"the refund limit is now {limit} ({version}); the grant allows {allowed} "
                f"({grant.policy or 'no policy named'})", version=version)
    return stead.Continue(version=version)


app = stead.App("shop", policy=refund_policy)


class ProposingModel:
    """Stands in for a model given the refund policy in force: asked what to do
    about an approved refund, it proposes to refund what was asked, up to the
    limit of the policy it is told about (the provider logs every request)."""

    name = "scripted-refund-proposer"

    async def complete(self, messages: Sequence[Mapping[str, Any]],
                       **params: Any) -> stead.Completion:
        services.ModelCalls().note(self.name, "propose")
        request = json.loads(messages[-1]["content"])
        limit, version = services.RefundPolicy().current()
        amount = min(int(request["asked"]), limit)
        call = stead.ToolCall("call_1", "dispatch_refund",
                              {"order_id": request["order_id"], "amount": amount})
        return stead.Completion(text=f"Refund {amount} under {version}.", tool_calls=(call,),
                                model=self.name, stop_reason="tool_use")


MODEL = ProposingModel()


def dispatch_refund(op: stead.Operation, order_id: str, amount: int) -> dict[str, Any]:
    return services.Payments().refund(order_id, amount, idempotency_key=op.key)


@app.workflow()
async def refund(run: stead.Run, order_id: str, amount: int) -> dict[str, Any]:
    approval: stead.Wait[dict[str, Any]] = await run.wait(
        "approval", token=False, bind={"order_id": order_id})
    answer = await approval
    if not answer.get("approved"):
        return {"order_id": order_id, "refunded": False}
    # The next step is proposed when the run gets here, under the policy then.
    proposal = await run.llm("propose", MODEL, [
        {"role": "system", "content": "You handle approved refunds. Use the tools."},
        {"role": "user", "content": json.dumps({"order_id": order_id, "asked": amount})},
    ], reason="the customer approved: what to refund now")
    calls = [c for c in proposal.tool_calls if c.name == "dispatch_refund"]
    if len(calls) != 1:
        return {"order_id": order_id, "refunded": False, "reason": proposal.text}
    refunded = int(calls[0].arguments["amount"])
    receipt: dict[str, Any] = await run.effect(
        "dispatch_refund", dispatch_refund, order_id, refunded, tool="dispatch_refund",
        reason="the customer approved the refund", cost=refunded)
    return {"order_id": order_id, "refunded": True, "asked": amount, **receipt}


class Planner:
    """Stands in for the model: proposes the next action from what holds now
    (the task state `run.propose` shows it)."""

    name = "refund-planner"

    async def complete(self, messages: Sequence[Mapping[str, Any]], **params: Any
                       ) -> stead.Completion:
        now = json.loads(str(messages[-1]["content"]).removeprefix("What holds now: "))
        facts = now["task_state"]["data"]
        if "confirmed" not in facts:
            return stead.Completion(text="wait_for_confirmation")
        if facts["confirmed"] and not facts.get("refunded"):
            return stead.Completion(text="dispatch_refund")
        return stead.Completion(text="done")


@app.workflow()
async def refund_loop(run: stead.Run, order_id: str, amount: int) -> dict[str, Any]:
    planner = Planner()
    for turn in range(4):
        step = await run.propose(
            "next", planner, [{"role": "user", "content": f"refund order {order_id}, turn {turn}"}],
            reason=f"turn {turn}: the next step of refunding order {order_id}")
        if step.text == "wait_for_confirmation":
            approval: stead.Wait[dict[str, Any]] = await run.wait(
                "approval", token=False, bind={"order_id": order_id})
            answer = await approval
            # The confirmation is committed to the task state first; the next
            # turn re-checks what to do under it.
            facts = await run.state.get()
            await run.state.update({"confirmed": bool(answer.get("approved"))},
                                   expect_version=facts.version)
        elif step.text == "dispatch_refund":
            receipt: dict[str, Any] = await run.effect(
                "dispatch_refund", dispatch_refund, order_id, amount, tool="dispatch_refund",
                reason="the customer confirmed the refund", cost=amount)
            facts = await run.state.get()
            await run.state.update({"refunded": True}, expect_version=facts.version)
            return {"order_id": order_id, "refunded": True, **receipt}
        else:
            break
    return {"order_id": order_id, "refunded": False}


def intent(limit: int, policy: str, expires_in: float = 48 * 3600) -> stead.Intent:
    """The intent a refund runs under: refund order 123, up to `limit`, for
    `expires_in` seconds."""
    return stead.Intent(
        goal="refund order 123", plan_version="refund-v1", reason="the customer asked",
        grants=[stead.Grant("dispatch_refund", {"order_id": "123", "max_amount": limit},
                            policy=policy, expires_in=expires_in)])
