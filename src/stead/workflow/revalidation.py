"""A takeover's revalidation: the diff since the last one, computed before
replay, and the policy's judgement of the step the run is about to take,
asked once, where the run first acts live (see docs/architecture.md §8).

Before replay `takeover.prepare` builds a `Revalidation`: it snapshots the
intent in force, the policy version and the world (the task state's version
and keys), diffs that against the baseline (the last resume record's
snapshot, with the world the run itself last saw in its journal) and says
whether anything changed (`policy.changed`), which decides whether a
`fresh` proposal is asked again. The policy itself is asked by `judge`, with
the pending `Action`: at the first live call after replay, or at the
proposal replay is about to make again. What it answers completes the
record; a run that ends without acting live keeps the decision "not asked".
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from stead import codec, guard, policy, worlds
from stead.execution import Execution, Stop
from stead.intent import Intent
from stead.policy import Action, Continue, Verdict
from stead.records import IntentRow, Record, RecordKind, RecordStatus, ResumeRecord, StateRow
from stead.store.base import Store
from stead.store.seam import FencedWrite


def baseline(first: IntentRow | None, last: ResumeRecord | None) -> dict[str, Any] | None:
    """The snapshot a takeover diffs against: the last resume record's (its
    world as it was then), else the first intent's (world unknown)."""
    if last is not None:
        found = (last.details.intent or {}).get("snapshot")
        if isinstance(found, Mapping):
            return dict(found)
    if first is None:
        return None
    return policy.snapshot(Intent.loads(first.intent), first.version, None, first.at)


def seen_world(before: Mapping[str, Any] | None, journal: Sequence[Record]
               ) -> dict[str, Any] | None:
    """The world the run last knew: the baseline's, or the task state the run
    itself last read or wrote, when that is newer (its own changes are not a
    change of the world)."""
    known = None if before is None else before.get("world")
    for r in reversed(journal):
        if r.kind == RecordKind.STATE and r.status == RecordStatus.OK:
            data = codec.loads(r.payload)
            if "version" not in data:
                continue
            if known is None or int(data["version"]) >= int(known.get("version") or 0):
                return worlds.world(int(data["version"]), dict(data.get("data") or {}))
            break
    return None if known is None else dict(known)


def cleared_pause(last: ResumeRecord | None, journal: Sequence[Record],
                  intents: Sequence[IntentRow]) -> dict[str, Any] | None:
    """The policy's pause a person's decision cleared: the last pause (a
    takeover's or one before an action) when an intent version came after
    it, with who wrote that version. Waived once (`Guard.decide`)."""
    found: dict[str, Any] | None = None
    if last is not None:
        revalidation = last.details.intent or {}
        decision = dict(revalidation.get("decision") or {})
        snap = revalidation.get("snapshot") or {}
        if decision.get("decision") == Verdict.PAUSE:
            found = {**decision, "at": last.at, "intent_version": snap.get("intent_version"),
                     "action": revalidation.get("action")}
    for r in reversed(journal):
        if r.kind == RecordKind.DECISION:
            data = codec.loads(r.payload)
            if data.get("decision") == Verdict.PAUSE and (found is None or r.at > found["at"]):
                found = {**data, "at": r.at}
            break
    if found is None or not intents:
        return None
    after = [i for i in intents if i.version > int(found.get("intent_version") or 0)]
    if not after:
        return None
    return {**found, "by": after[0].author, "decided_version": after[0].version}


class Revalidation:
    """The revalidation of one takeover (see the module's docstring)."""

    def __init__(self, store: Store, x: Execution, ctx: guard.Guard,
                 before: Mapping[str, Any] | None, state: StateRow | None,
                 seen: Mapping[str, Any] | None, registered: str | None) -> None:
        self.store, self.x, self.ctx = store, x, ctx
        self.before = None if before is None else {**before, "world": seen}
        self.state = {} if state is None else codec.loads(state.data)
        self.world = worlds.of_state(state)
        self._lock = asyncio.Lock()
        self._done = False
        self._stop: Stop | None = None
        after, change = self._diff(registered)
        x.intent_changed = policy.changed(change)
        x.revalidation = {"snapshot": after, "diff": change, "changed": x.intent_changed,
                          "decision": {"decision": str(Verdict.NOT_ASKED),
                                       "reason": "the run did not act live after replay",
                                       "policy_version": registered}}

    def _diff(self, version: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
        after = policy.snapshot(self.ctx.intent, self.ctx.version, version,
                                self.x.clock.now(), self.world)
        change = policy.diff(self.before, after)
        budget = self.ctx.budget_left()
        if budget is not None:
            change["budget"] = budget
        return after, change

    @property
    def pending(self) -> bool:
        return not self._done

    async def judge(self, action: Action | None) -> bool:
        """Ask the policy about `action`, once per takeover; True if this call
        asked it. Raises `Stop` (now and for every later caller) if the
        decision stops the run."""
        async with self._lock:
            if self._stop is not None:
                raise Stop(self._stop.status, self._stop.error)
            if self._done:
                return False
            self._done = True
            with self.x.busy():
                stop = await self._ask(action)
            if stop is not None:
                self._stop = stop
                raise Stop(stop.status, stop.error)
            return True

    async def _ask(self, action: Action | None) -> Stop | None:
        x, ctx = self.x, self.ctx
        decision, version = await ctx.decide(self.state, action)
        now = x.clock.now()
        if isinstance(decision, Continue) and decision.intent is not None:
            text = decision.intent.anchored(now).dumps()
            revised, _ = await self.store.revise_intent(
                x.fence.run_id, lambda _current, _run: text, author=f"policy {version}",
                why=decision.reason or "revised by the policy",
                write=FencedWrite(x.fence, (), None))
            ctx.adopt(revised)
        after, change = self._diff(version)
        x.intent_changed = policy.changed(change)
        x.revalidation = {
            "snapshot": after, "diff": change, "changed": x.intent_changed,
            "action": None if action is None else action.to_json(),
            "decision": policy.decision_json(decision, version or "", after, now)}
        halt = guard.halted(decision, version or "", action)
        if halt is None:
            return None
        return Stop(halt.status, {**halt.error, "diff": change,
                                  **_proposal(x.revalidation["decision"])})


def _proposal(decision: Mapping[str, Any]) -> dict[str, Any]:
    return {k: decision[k] for k in ("proposed", "proposed_diff") if k in decision}
