"""A refund agent: the order-123 story of stead's design, as a workflow to copy.

The model decides what to do (here: check eligibility first); the agent checks,
moves the order to `awaiting_user_confirmation`, sends the customer a
confirmation link and waits for the answer (hours or days: a waiting run holds
no worker). When the answer comes it records the accepted confirmation in the
task state first, then re-checks eligibility (the policy may have changed
meanwhile), and only then dispatches the refund, once, with an idempotency key.

The outside world is fake and file-backed (`stead.examples.services`): the
payment service, the customer's mailbox and the model's call log live in
`$STEAD_EXAMPLE_SERVICES` (default ./example-services). Try it by hand:

    stead start stead.examples.refund_agent:app refund_order '["123", 4200]' --task-id order-123
    stead worker stead.examples.refund_agent:app --until-idle   # runs up to the wait
    cat example-services/mailbox.json     # the link: its wait id and token
    stead approve RUN --wait WAIT_ID --token TOKEN             # what the link's page does
    stead worker stead.examples.refund_agent:app --until-idle   # resumes, refunds once
    cat example-services/payments.json    # the payment service's own ledger

`stead demo` tells this story with real processes and a SIGKILL. The model is
scripted (no network, no key); any `stead.Model` can take its place.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from typing import Any

import pydantic

import stead
from stead.examples import services

app = stead.App("shop")
MAX_REFUND = 10_000  # cents: the refund policy
CUSTOMER = "customer-123@example.com"


class Confirmation(pydantic.BaseModel):
    """What the confirmation page posts back."""

    approved: bool


class ScriptedAgentModel:
    """Stands in for a real model: asked about a refund request, it decides to
    check eligibility first (a tool call). The provider logs every request."""

    name = "scripted-refund-agent"

    async def complete(self, messages: Sequence[Mapping[str, Any]],
                       **params: Any) -> stead.Completion:
        services.ModelCalls().note(self.name, "decide")
        request = json.loads(messages[-1]["content"])
        call = stead.ToolCall("call_1", "check_eligibility", {"order_id": request["order_id"]})
        return stead.Completion(text="I will check that the order is eligible first.",
                                tool_calls=(call,), model=self.name, stop_reason="tool_use")


MODEL = ScriptedAgentModel()


# -- the agent's tools --------------------------------------------------------------
def check_eligibility(order_id: str, amount: int) -> dict[str, Any]:
    """A read (a step): may be run again if it was never acknowledged."""
    return {"order_id": order_id, "eligible": 0 < amount <= MAX_REFUND, "limit": MAX_REFUND}


def send_confirmation_link(op: stead.Operation, to: str, w: stead.Wait[Confirmation],
                           bound: dict[str, Any]) -> dict[str, Any]:
    """An effect: the mailbox dedups on `op.key`, so resending is safe. Only
    here, in the effect that sends it, does the token's value come out."""
    assert w.token is not None
    link = w.link("https://shop.example/confirm")
    body = {"link": link, "wait_id": w.wait_id, "token": w.token.reveal(), "bound": bound}
    message_id = services.Mailbox().send(
        to, f"Confirm the refund of order {bound['order_id']}", body, key=op.key)
    return {"message_id": message_id, "to": to}  # journaled: no token in here


def dispatch_refund(op: stead.Operation, order_id: str, amount: int) -> dict[str, Any]:
    """An effect: its intent is journaled before it runs; `op.key` is the
    idempotency key, the same on every attempt and every takeover."""
    return services.Payments().refund(order_id, amount, idempotency_key=op.key)


def find_refund(op: stead.Operation) -> stead.Outcome:
    """After a crash mid-dispatch: ask the payment service by key."""
    receipt = services.Payments().lookup(op.key)
    return stead.Outcome.done(receipt) if receipt else stead.Outcome.not_found()


# -- the workflow --------------------------------------------------------------------
@app.workflow(version=1)
async def refund_order(run: stead.Run, order_id: str, amount: int) -> dict[str, Any]:
    request = {"order_id": order_id, "amount": amount, "reason": "charged twice"}
    decision = await run.llm("decide", MODEL, [
        {"role": "system", "content": "You handle refund requests. Use the tools."},
        {"role": "user", "content": json.dumps(request)},
    ])  # asked once, ever: a resumed run gets the recorded answer
    if [c.name for c in decision.tool_calls] != ["check_eligibility"]:
        return {"order_id": order_id, "refunded": False, "reason": decision.text}
    eligibility = await run.step("check_eligibility", check_eligibility, order_id, amount)
    if not eligibility["eligible"]:
        return {"order_id": order_id, "refunded": False, "reason": "not eligible"}

    facts = await run.state.get()
    if facts.get("refund_dispatched"):
        return {"order_id": order_id, "refunded": False, "reason": "already refunded"}
    facts = await run.state.update(
        {"status": "awaiting_user_confirmation", "refund_dispatched": False},
        expect_version=facts.version)
    w = await run.wait("user_confirmation", schema=Confirmation, expires_in=dt.timedelta(hours=48),
                       bind={"order_id": order_id, "amount": amount,
                             "state_version": facts.version})
    await run.effect("send_confirmation_link", send_confirmation_link,
                     CUSTOMER, w, w.bind, idempotent=True)
    answer = await w  # suspends: no lease, no worker, nothing in memory
    if not answer.approved:
        await run.state.update({"status": "declined", "user_confirmation": "declined"},
                               expect_version=facts.version)
        return {"order_id": order_id, "refunded": False, "reason": "declined by the customer"}

    # The order-123 rule: the accepted confirmation is a fact of the task
    # first, then eligibility is checked again under the policy now, and only
    # then is the refund sent.
    facts = await run.state.update({"status": "confirmed", "user_confirmation": "accepted"},
                                   expect_version=facts.version)
    again = await run.step("recheck_eligibility", check_eligibility, order_id, amount)
    if not again["eligible"]:
        await run.state.update({"status": "not_eligible"}, expect_version=facts.version)
        return {"order_id": order_id, "refunded": False, "reason": "no longer eligible"}
    receipt = await run.effect("dispatch_refund", dispatch_refund, order_id, amount,
                               check=find_refund)
    await run.state.update({"status": "refunded", "refund_dispatched": True,
                            "refund": receipt["refund"]}, expect_version=facts.version)
    return {"order_id": order_id, "refunded": True, "refund": receipt["refund"],
            "amount": amount}


async def approve(client: stead.Client, run_id: str, message: Mapping[str, Any], *,
                  event_id: str, approved: bool = True,
                  amount: int | None = None) -> stead.Delivery:
    """What the confirmation page does when the customer clicks: deliver the
    answer with the link's wait id and token and the values the customer saw
    (`amount` overrides the amount, as a tampered page would)."""
    body = message["body"]
    bound = dict(body["bound"])
    if amount is not None:
        bound["amount"] = amount
    return await client.deliver(run_id, wait_id=body["wait_id"], token=body["token"],
                                event_id=event_id, payload={"approved": approved},
                                bind=bound)
