"""`stead demo policy`: a refund whose policy changed while it waited.

1. worker A runs the refund under a grant of up to 5000 (policy refunds@7);
   the run waits for the customer's approval;
2. worker A is SIGKILLed;
3. meanwhile the refund policy drops its limit to 1000 (refunds@8), and the
   customer's approval arrives and is accepted while no worker runs;
4. worker B takes the run over: its revalidation pauses it before anything is
   sent, and the resume record names the policy versions and the limit;
5. a person resumes it with a narrowed grant (up to 1000): the refund of 1000
   goes through, once;
6. the record, the payment service's own ledger, the checks.
"""

from __future__ import annotations

import signal

from stead import decisions, timeline
from stead.client import Client
from stead.demos.narrate import Checks, Tail
from stead.demos.procs import Stage, until
from stead.examples import policy_agent, services
from stead.records import RunStatus
from stead.store import open_store
from stead.waits import Accepted

APP = "stead.examples.policy_agent:app"
ORDER, AMOUNT = "123", 1000


async def tell(stage: Stage) -> tuple[bool, str | None]:
    stage.echo("stead demo policy: a refund whose policy changed while it waited.")
    stage.echo(f"  folder    {stage.root}{'' if stage.kept else ' (temporary)'}")
    stage.echo(f"  database  {stage.db}\n")
    store = await open_store(stage.db)
    try:
        return await _story(stage, Client(store, policy_agent.app))
    finally:
        await store.close()


async def _story(stage: Stage, client: Client) -> tuple[bool, str | None]:
    echo, checks = stage.echo, Checks(stage.echo)
    payments, policy = services.Payments(stage.services), services.RefundPolicy(stage.services)
    policy.set(5000, "refunds@7")
    info = await client.start(policy_agent.refund, ORDER, AMOUNT,
                              intent=policy_agent.intent(5000, "refunds@7"))
    run_id = info.run_id
    tail = Tail(client, run_id, echo)
    echo(f"[1] refund {AMOUNT} for order {ORDER}, granted up to 5000 under refunds@7")
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

    echo("[3] meanwhile the refund policy drops its limit to 1000 (refunds@8),")
    policy.set(1000, "refunds@8")
    approval = await client.deliver(run_id, kind="approval", event_id="approval-1",
                                    payload={"approved": True}, bind={"order_id": ORDER})
    echo(f"    and the customer's approval arrives: {type(approval).__name__}")

    echo("[4] worker B takes the run over and revalidates it before replaying:")
    b = await stage.worker("B", APP)
    tail.labels[2] = "B"
    await until("the run to pause", lambda: status_is(RunStatus.PAUSED), every=tail.pump)
    paused = await client.get(run_id)
    message = str((paused.error or {}).get("message", ""))
    echo(f"    run {paused.status}: {message.split('. Decide')[0]}")
    revalidation = (await client.resumes(run_id))[-1].details.intent or {}
    refunds_paused = len(payments.refunds())
    echo(f"    the payment service's ledger: {refunds_paused} refund(s)")

    echo("[5] ops resumes it with a narrowed grant (up to 1000, refunds@8)")
    await client.resume(run_id, by="ops@shop", why="refund limit is 1000 now",
                        intent=policy_agent.intent(1000, "refunds@8"))
    tail.labels[4] = "B"
    await until("the run to finish", lambda: status_is(RunStatus.COMPLETED, RunStatus.PAUSED,
                                                       RunStatus.FAILED), every=tail.pump)
    done = await client.get(run_id)
    echo(f"    run {done.status}: {done.result}")
    code_b = await b.signal(signal.SIGTERM)

    journal, resumes = await client.journal(run_id), await client.resumes(run_id)
    echo("[6] the record\n")
    echo(timeline.render_run(done, journal, resumes))
    echo(decisions.render(await client.intents(run_id), resumes, journal,
                          client.store.clock.now()) + "\n")
    refunds = payments.refunds()
    echo(f"the payment service's own ledger: {len(refunds)} refund(s) "
         f"{[r['amount'] for r in refunds.values()]}\n")

    diff = revalidation.get("diff") or {}
    checks.check(code_a == -signal.SIGKILL, f"worker A was SIGKILLed while the run waited "
                                            f"(exit {code_a})")
    checks.check(isinstance(approval, Accepted), "the approval was accepted while no worker ran")
    checks.check(paused.status == RunStatus.PAUSED and "1000" in message
                 and diff.get("policy_version") == ["refunds@7", "refunds@8"],
                 "the takeover paused the run; its resume record names refunds@7 → refunds@8 "
                 "and the limit")
    checks.check(refunds_paused == 0, "nothing was refunded while the run was paused")
    checks.check(done.status == RunStatus.COMPLETED and len(refunds) == 1
                 and [r["amount"] for r in refunds.values()] == [AMOUNT],
                 f"resumed under the narrowed grant, the {AMOUNT} refund went through once")
    checks.check(code_b == 0, f"worker B stopped cleanly on SIGTERM (exit {code_b})")
    return checks.report(), run_id
