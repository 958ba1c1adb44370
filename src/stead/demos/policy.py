"""`stead demo policy`: a refund loop under a policy and authority that change
while it waits.

1. worker A runs the refund under a grant of up to 5000 (policy refunds@7)
   that lasts a few seconds (days, in life); the run waits for the
   customer's approval of 1500;
2. worker A is SIGKILLed;
3. meanwhile the refund policy drops its limit to 1000 (refunds@8), the grant
   expires, and the customer's approval arrives and is accepted while no
   worker runs;
4. worker B takes the run over: its revalidation pauses it before anything is
   asked or sent, and the resume record names the policy versions;
5. one operator decision, narrowing the grant to 1000, clears that pause;
6. the run goes on, and stops before its next model call: every grant it
   holds has expired (the authority lapsed), naming the grant;
7. ops renews the grant: the model proposes the next step under refunds@8
   (1000, not the 1500 asked) and the refund of 1000 goes through, once;
8. the record, the payment service's own ledger, the checks.
"""

from __future__ import annotations

import asyncio
import json
import signal
from typing import Any

from stead.client import Client, RunInfo
from stead.demos.narrate import Checks, Tail
from stead.demos.procs import Stage, until
from stead.examples import policy_agent, services
from stead.intent import Intent
from stead.records import RunStatus
from stead.store import open_store
from stead.views import context_view, timeline
from stead.workflow.waits import Accepted

APP = "stead.examples.policy_agent:app"
ORDER, ASKED, LIMIT = "123", 1500, 1000
GRANT_SECONDS = 2.0  # how long the first grant lasts: the wait outlives it


async def tell(stage: Stage) -> tuple[bool, str | None]:
    stage.echo("stead demo policy: a refund loop whose policy and authority change while it "
               "waits.")
    stage.echo(f"  folder    {stage.root}{'' if stage.kept else ' (temporary)'}")
    stage.echo(f"  database  {stage.db}\n")
    store = await open_store(stage.db)
    try:
        return await _story(stage, Client(store, policy_agent.app))
    finally:
        await store.close()


def _said(info: RunInfo) -> str:
    return str((info.error or {}).get("message", "")).split(". Decide")[0]


async def _story(stage: Stage, client: Client) -> tuple[bool, str | None]:
    echo, checks = stage.echo, Checks(stage.echo)
    payments, policy = services.Payments(stage.services), services.RefundPolicy(stage.services)
    model = services.ModelCalls(stage.services)
    policy.set(5000, "refunds@7")
    info = await client.start(policy_agent.refund, ORDER, ASKED, intent=policy_agent.intent(
        5000, "refunds@7", expires_in=GRANT_SECONDS))
    run_id = info.run_id
    tail = Tail(client, run_id, echo)
    echo(f"[1] the customer asks for a refund of {ASKED} for order {ORDER}; the run may refund "
         f"up to 5000 under refunds@7, for {GRANT_SECONDS:g} s")
    a = await stage.worker("A", APP)
    tail.labels[1] = "A"

    async def status_is(*wanted: str) -> bool:
        return (await client.get(run_id)).status in wanted

    await until("the run to wait for the approval", lambda: status_is(RunStatus.WAITING),
                every=tail.pump)
    echo("    the run waits for the customer (status waiting, no worker held)")

    echo("[2] worker A is killed (SIGKILL)")
    code_a = await a.signal(signal.SIGKILL)
    echo(f"    worker A is gone (exit {code_a})")

    echo(f"[3] meanwhile the refund policy drops its limit to {LIMIT} (refunds@8), the grant "
         "expires,")
    policy.set(LIMIT, "refunds@8")
    expires_at = _expires_at(await client.intents(run_id))
    await asyncio.sleep(max(0.0, expires_at - client.store.clock.now()) + 0.05)
    approval = await client.deliver(run_id, kind="approval", event_id="approval-1",
                                    payload={"approved": True}, bind={"order_id": ORDER})
    echo(f"    and the customer's approval arrives: {type(approval).__name__}")

    echo("[4] worker B takes the run over and revalidates it before it acts:")
    b = await stage.worker("B", APP)
    tail.labels.update(dict.fromkeys(range(2, 100), "B"))  # the only worker from here on
    await until("the run to pause", lambda: status_is(RunStatus.PAUSED), every=tail.pump)
    first = await client.get(run_id)
    echo(f"    run {first.status}: {_said(first)}")
    revalidation = (await client.resumes(run_id))[-1].details.intent or {}
    asked_then = len(model.calls())
    refunds_paused = len(payments.refunds())
    echo(f"    the model was asked {asked_then} time(s); the payment service's ledger: "
         f"{refunds_paused} refund(s)")

    echo(f"[5] one decision: ops narrows the grant to {LIMIT}")
    await client.renew_grant(run_id, "dispatch_refund", scope={"order_id": ORDER,
                                                               "max_amount": LIMIT},
                             by="ops@shop", why=f"the refund limit is {LIMIT} now")
    await until("the run to stop again", lambda: status_is(
        RunStatus.PAUSED, RunStatus.COMPLETED, RunStatus.FAILED), every=tail.pump)
    lapsed = await client.get(run_id)
    echo(f"[6] run {lapsed.status} before its next model call: {_said(lapsed)}")
    asked_lapsed = len(model.calls())

    echo("[7] ops renews the grant for an hour")
    await client.renew_grant(run_id, "dispatch_refund", expires_in=3600, by="ops@shop",
                             why="approved for an hour")
    await until("the run to finish", lambda: status_is(RunStatus.COMPLETED, RunStatus.PAUSED,
                                                       RunStatus.FAILED), every=tail.pump)
    done = await client.get(run_id)
    echo(f"    run {done.status}: {done.result}")
    code_b = await b.signal(signal.SIGTERM)

    journal, resumes = await client.journal(run_id), await client.resumes(run_id)
    echo("[8] the record\n")
    echo(timeline.render_run(done, journal, resumes))
    echo(context_view.render(await client.intents(run_id), resumes, journal,
                          client.store.clock.now()) + "\n")
    refunds = payments.refunds()
    echo(f"the payment service's own ledger: {len(refunds)} refund(s) "
         f"{[r['amount'] for r in refunds.values()]}\n")

    diff = revalidation.get("diff") or {}
    proposals = [c for c in model.calls() if c.get("purpose") == "propose"]
    checks.check(code_a == -signal.SIGKILL, f"worker A was SIGKILLed while the run waited "
                                            f"(exit {code_a})")
    checks.check(isinstance(approval, Accepted), "the approval was accepted while no worker ran")
    checks.check(first.status == RunStatus.PAUSED and (first.error or {}).get("cause") == "policy"
                 and str(LIMIT) in _said(first)
                 and diff.get("policy_version") == ["refunds@7", "refunds@8"],
                 "the takeover paused the run under the policy changed during the wait; its "
                 "resume record names refunds@7 → refunds@8")
    checks.check(refunds_paused == 0 and asked_then == 0,
                 "nothing was asked or refunded while the run was paused")
    checks.check(lapsed.status == RunStatus.PAUSED
                 and (lapsed.error or {}).get("cause") == "grants",
                 "one decision cleared the policy's pause: the run went on and did not pause "
                 "for the policy again")
    checks.check((lapsed.error or {}).get("grant") == "dispatch_refund" and asked_lapsed == 0,
                 "with every grant expired, the run paused before its next model call, naming "
                 "the grant dispatch_refund; the model was not asked")
    checks.check(len(proposals) == 1 and _proposed(journal) == LIMIT,
                 f"renewed, the model proposed the next step under refunds@8: refund {LIMIT}, "
                 f"not the {ASKED} asked (asked {len(proposals)} time(s))")
    checks.check(done.status == RunStatus.COMPLETED and len(refunds) == 1
                 and [r["amount"] for r in refunds.values()] == [LIMIT],
                 f"the {LIMIT} refund went through once")
    checks.check(code_b == 0, f"worker B stopped cleanly on SIGTERM (exit {code_b})")
    return checks.report(), run_id


def _expires_at(intents: list[Any]) -> float:
    grants = Intent.loads(intents[-1].intent).grants
    return max(g.expires_at or 0.0 for g in grants)


def _proposed(journal: list[Any]) -> int | None:
    """The amount the model's recorded proposal refunds."""
    for rec in journal:
        if rec.name == "propose" and rec.status == "ok":
            calls = json.loads(rec.payload).get("tool_calls") or []
            return int(calls[0]["arguments"]["amount"]) if calls else None
    return None
