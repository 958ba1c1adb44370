"""`stead demo` (the default story): order 123 (see docs/architecture.md).

1. worker A runs the refund agent: the model decides to check eligibility,
   the check runs, the order moves to `awaiting_user_confirmation`, a wait
   bound to order 123, the amount and the state version is opened and the
   confirmation link is sent; the run suspends;
2. worker A is SIGKILLed (the deploy);
3. while no worker runs, a tampered answer is rejected and the customer's
   approval is stored and accepted;
4. worker B resumes: the model's decision is reused; the accepted
   confirmation is committed to the task state, then eligibility is re-checked,
   and only then is the refund dispatched, once, with its idempotency key;
5. the approval is redelivered: `Duplicate`;
6. the timeline, the resume record, the payment service's own ledger, checks.
"""

from __future__ import annotations

import json
import signal

from stead import records
from stead.client import Client, RunInfo
from stead.demos.narrate import Checks, Tail, compact, resume_lines
from stead.demos.procs import Stage, until
from stead.examples import refund_agent, services
from stead.records import RecordKind, RecordStatus, RejectReason, RunStatus, Verdict
from stead.store import open_store
from stead.views import timeline
from stead.workflow import waits
from stead.workflow.state import Facts

APP = "stead.examples.refund_agent:app"
ORDER, AMOUNT, TAMPERED = "123", 4200, 9000


def verdict(d: waits.Delivery) -> str:
    if isinstance(d, waits.Rejected):
        return f"Rejected: {d.reason.replace('_', ' ')}" + (f" ({d.detail})" if d.detail else "")
    if isinstance(d, waits.Duplicate):
        return "Duplicate (this event was accepted before)"
    return "Accepted"


async def tell(stage: Stage) -> tuple[bool, str | None]:
    stage.echo("stead demo: the order-123 refund survives a deploy while it waits for the "
               "customer.")
    stage.echo(f"  folder    {stage.root}{'' if stage.kept else ' (temporary)'}")
    stage.echo(f"  database  {stage.db}")
    stage.echo(f"  services  {stage.services} (the fake payment service, mailbox, model)\n")
    store = await open_store(stage.db)
    try:
        return await _story(stage, Client(store, refund_agent.app))
    finally:
        await store.close()


async def _story(stage: Stage, client: Client) -> tuple[bool, str | None]:
    echo, checks = stage.echo, Checks(stage.echo)
    mailbox, payments = services.Mailbox(stage.services), services.Payments(stage.services)
    info = await client.start(refund_agent.refund_order, ORDER, AMOUNT, task_id="order-123")
    run_id = info.run_id
    tail = Tail(client, run_id, echo)
    echo(f"[1] order {ORDER}: the customer asks for a refund of {AMOUNT / 100:.2f}")
    a = await stage.worker("A", APP)
    tail.labels[1] = "A"
    echo(f"    run {run_id} (refund_order@1, task order-123); worker A (pid {a.pid}) "
         "claims it:")

    async def waiting() -> bool:
        return bool(mailbox.messages()) and (await client.get(run_id)).status == RunStatus.WAITING

    await until("the run to wait for the customer", waiting, every=tail.pump)
    facts = await client.task_state("order-123")
    message = mailbox.messages()[0]
    body = message["body"]
    echo("    the run waits (status waiting): it holds no lease and no worker")
    echo(f"    task state  v{facts.version} {compact(facts.data)}")
    echo(f"    mailbox     \"{message['subject']}\": a link to wait {body['wait_id'][:8]}… "
         f"with token {body['token'][:10]}…")

    echo("[2] the deploy: worker A is killed (SIGKILL)")
    code_a = await a.signal(signal.SIGKILL)
    checks.check(code_a == -signal.SIGKILL,
                 f"worker A was killed by SIGKILL while the run waited (exit {code_a})")
    echo(f"    worker A is gone (exit {code_a}); no worker runs")

    echo("[3] the customer's answer arrives while no worker runs")
    tampered = await refund_agent.approve(client, run_id, message, event_id="approval-forged",
                                          amount=TAMPERED)
    echo(f"    a tampered copy (amount {TAMPERED}):     {verdict(tampered)}")
    approval = await refund_agent.approve(client, run_id, message, event_id="approval-1")
    no_worker = a.proc.returncode is not None and len(stage.workers) == 1
    woken = await client.get(run_id)
    echo(f"    the approval (event approval-1):  {verdict(approval)}")
    echo(f"    stored, the wait consumed, the run woken: status {woken.status}, no worker yet")

    echo("[4] worker B (a new process) resumes the run: it replays the journal, doing "
         "nothing in it again,")
    echo("    and goes on live from where it ends:")
    b = await stage.worker("B", APP)
    tail.labels[2] = "B"

    async def settled() -> bool:
        return (await client.get(run_id)).status not in (RunStatus.PENDING, RunStatus.RUNNING)

    await until("the run to finish", settled, every=tail.pump)
    info = await client.get(run_id)
    echo(f"    run {info.status}: {compact(info.result)}")
    code_b = await b.signal(signal.SIGTERM)

    echo("[5] the queue redelivers the approval (event approval-1, again)")
    again = await refund_agent.approve(client, run_id, message, event_id="approval-1")
    echo(f"    {verdict(again)}: nothing happens twice")

    journal = await client.journal(run_id)
    resumes = await client.resumes(run_id)
    echo("[6] the record\n")
    echo(timeline.render_run(info, journal, resumes) + "\n")
    for line in resume_lines(resumes[0], journal) if resumes else []:
        echo(line)
    pids = {w.pid: w.worker_id for w in stage.workers}
    calls, refunds = payments.calls(), payments.refunds()
    echo(f"\nthe payment service's own ledger ({stage.services / 'payments.json'})")
    for c in calls:
        echo(f"  call    {c['op']:<6}  order {c.get('order_id', '-')}  amount "
             f"{c.get('amount', '-')}  key {c['key']}  from {pids.get(c['pid'], c['pid'])}")
    for key, r in refunds.items():
        echo(f"  refund  {r['refund']}  order {r['order_id']}  amount {r['amount']}  key {key}")
    echo(f"  {len(refunds)} refund(s)\n")

    facts_now = await client.task_state("order-123")
    verdicts = sorted(str(e.verdict) for e in await client.events(run_id))
    _checks(checks, stage, info, journal, resumes, facts_now, verdicts,
            (tampered, approval, again), no_worker=no_worker, code_b=code_b)
    return checks.report(), run_id


def _checks(checks: Checks, stage: Stage, info: RunInfo, journal: list[records.Record],
            resumes: list[records.ResumeRecord], facts_now: Facts, verdicts: list[str],
            deliveries: tuple[waits.Delivery, waits.Delivery, waits.Delivery], *,
            no_worker: bool, code_b: int | None) -> None:
    tampered, approval, again = deliveries
    payments = services.Payments(stage.services)
    pid_a = stage.workers[0].pid
    asked = services.ModelCalls(stage.services).calls()
    by_name = {(r.name, r.status): r for r in journal}
    wait_done = by_name.get(("user_confirmation", RecordStatus.OK))
    first = by_name.get(("check_eligibility", RecordStatus.OK))
    recheck = by_name.get(("recheck_eligibility", RecordStatus.OK))
    intent = by_name.get(("dispatch_refund", RecordStatus.INTENT))
    key = json.loads(intent.payload).get("key") if intent is not None else None
    refund_calls = [c for c in payments.calls() if c["op"] == "refund"]
    checks.check(isinstance(tampered, waits.Rejected)
                 and tampered.reason == RejectReason.BOUND_VALUE_MISMATCH
                 and tampered.detail == "amount",
                 f"the tampered approval was refused: {verdict(tampered)}")
    checks.check(isinstance(approval, waits.Accepted) and no_worker,
                 f"the approval was stored and accepted while no worker ran ({verdict(approval)})")
    checks.check(len(asked) == 1 and asked[0]["pid"] == pid_a,
                 f"the model was asked once, by worker A; worker B reused its recorded decision "
                 f"(asked {len(asked)} time(s))")
    checks.check(first is not None and first.epoch == 1 and recheck is not None
                 and recheck.epoch == 2 and wait_done is not None and recheck.seq > wait_done.seq,
                 "eligibility was checked by worker A before the wait and re-checked by worker B "
                 "after it")
    confirmed = next((r for r in journal if r.kind == RecordKind.STATE and r.name == "update"
                      and wait_done is not None and r.seq > wait_done.seq), None)
    accepted = confirmed is not None and json.loads(confirmed.payload)["data"].get(
        "user_confirmation") == "accepted"
    checks.check(accepted and confirmed is not None and recheck is not None
                 and intent is not None and confirmed.seq < recheck.seq < intent.seq,
                 "the order-123 rule: the accepted confirmation was committed to the task state "
                 "first, then eligibility re-checked, and only then the refund sent")
    checks.check(len(refund_calls) == 1 and len(payments.refunds()) == 1 and key is not None
                 and refund_calls[0]["key"] == key,
                 f"the refund was dispatched once, with its idempotency key {key}: the payment "
                 f"service got {len(refund_calls)} refund call(s)")
    checks.check(isinstance(again, waits.Duplicate) and len(payments.refunds()) == 1,
                 "the redelivered approval was a duplicate and changed nothing: still one refund")
    checks.check(len(resumes) == 1 and resumes[0].worker_id == "worker-B"
                 and resumes[0].epoch == 2 and resumes[0].reused == resumes[0].from_seq > 0,
                 "one takeover: worker B at epoch 2 resumed from the end of the journal, reusing "
                 f"{resumes[0].reused if resumes else 0} record(s)")
    result = info.result if isinstance(info.result, dict) else {}
    checks.check(info.status == RunStatus.COMPLETED and result.get("refunded") is True
                 and facts_now.data.get("status") == "refunded"
                 and facts_now.data.get("refund_dispatched") is True,
                 f"the run completed, refunded; task state: {compact(facts_now.data)}")
    checks.check(verdicts == [Verdict.ACCEPTED, Verdict.REJECTED],
                 f"every delivered event is stored with its verdict ({', '.join(verdicts)})")
    checks.check(code_b == 0, f"worker B stopped cleanly on SIGTERM (exit {code_b})")

