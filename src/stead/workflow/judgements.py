"""The policy's judgement of one live action (an effect; a model call when
the app asks for it: `App(policy_on=...)`), and its audit: a `decision`
record in the journal, riding along with the action's own write (or with
the write that stops the run), so `stead runs show` lists every decision
made before an action (see docs/architecture.md §8)."""

from __future__ import annotations

from typing import Any

from stead import codec, guard, policy
from stead.execution import Execution
from stead.policy import Action, Continue
from stead.records import RecordKind, RecordStatus
from stead.store.seam import FencedWrite


async def judge(x: Execution, action: Action) -> guard.Halt | None:
    """Ask the policy about `action` (nothing without one); store a revision
    it makes, journal the decision, and return what stops the run, if
    anything."""
    ctx = x.guard
    if ctx is None or ctx.policy is None:
        return None
    with x.busy():
        row = await x.store.read_state(ctx.task_key)
        state = {} if row is None else codec.loads(row.data)
        decision, version = await ctx.decide(state, action)
    now = x.clock.now()
    if isinstance(decision, Continue) and decision.intent is not None:
        text = decision.intent.anchored(now).dumps()
        revised, _ = await x.write((), lambda batch, resume: x.store.revise_intent(
            x.fence.run_id, lambda _current, _run: text, author=f"policy {version}",
            why=decision.reason or "revised by the policy",
            write=FencedWrite(x.fence, batch, resume)))
        ctx.adopt(revised)
    current = policy.snapshot(ctx.intent, ctx.version, version, now)
    audit = {**policy.decision_json(decision, version or "", current, now),
             "action": action.to_json(), "intent_version": ctx.version}
    ctx.decisions += 1
    x.buffer(x.record(f"decision@{x.fence.epoch}.{ctx.decisions}", 1, RecordKind.DECISION,
                      action.name, action.digest or "", RecordStatus.OK,
                      codec.dumps(audit, what="a decision")))
    halt = guard.halted(decision, version or "", action)
    if halt is None:
        return None
    proposal: dict[str, Any] = {k: audit[k] for k in ("proposed", "proposed_diff") if k in audit}
    return guard.Halt(halt.status, {**halt.error, **proposal})
