"""A proposal: the next action an agent loop asks its model for
(`run.propose`), a model call marked `fresh="on_resume"` (see
docs/architecture.md §8).

A plain crash reuses it. After a change (goal, instructions, plan, grants,
policy version, world) the proposal not acted on yet is asked again; one
something acted on since (an effect, a wait, a state change) is history.
`again` is the rule replay applies to every `fresh` step or model call
(`acted_after`, `cut`; a changed fingerprint is cut the same way). Asked
live, the model sees the loop's messages and one more system message
that says what holds now: the intent's goal, the task state and the budget
left. That message is sent, never part of the call's digest, so a replay
matches the call the loop made.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from stead import codec
from stead.records import (
    Record,
    RecordKind,
    RecordStatus,
    ResumeClass,
    StaleCause,
    StaleOutcome,
)

if TYPE_CHECKING:
    from stead.execution import Execution
    from stead.llm.model import Completion, Model


async def again(x: Execution, addr: str, kind: RecordKind, name: str, digest: str,
                prior: Sequence[Record], fresh: str) -> bool:
    """Whether the recorded `fresh` answer `prior` is a proposal to make again
    now; if so, the journal is cut from it. Only the proposal not acted on yet
    (nothing that acted outside after it) is: one acted on is history,
    reused. The takeover's policy judges it here, where the run would act
    live again."""
    from stead.policy import Action

    start = prior[0].seq
    if acted_after(x, addr, start) is not None:
        return False
    recorded = codec.loads(prior[-1].payload) if kind == RecordKind.LLM else {}
    await x.before_live(Action(kind, name, None, {}, recorded.get("reason"), digest=digest))
    if fresh != "always" and not x.intent_changed:
        return False
    cut(x, start, name)
    return True


def acted_after(x: Execution, addr: str, start: int) -> Record | None:
    """The first record after seq `start` that acted outside (an effect, a
    wait, a state change, a timer, an intent) or that a concurrent branch's
    replay already returned; None if there is none."""
    return next((r for r in x.journal.tail(start) if r.seq > start and (
        r.kind in (RecordKind.EFFECT, RecordKind.WAIT, RecordKind.SLEEP, RecordKind.INTENT)
        or (r.kind == RecordKind.STATE and r.name != "get")
        or (r.addr != addr and x.journal.taken(r.addr)))), None)


def cut(x: Execution, start: int, name: str, cause: StaleCause = StaleCause.PROPOSAL,
        changed: Sequence[str] = ()) -> None:
    """Cut the journal from `start` on: the run goes on live from there. The
    resume record names the call, why, and what changed."""
    x.reran.append({"call": name, "seq": start, "cause": cause, "changed": list(changed),
                    "done": StaleOutcome.RERUN})
    x.classify(ResumeClass.REVALIDATE)
    x.journal.cut(start)
    x.buffer(x.record(f"cut@{start}", 1, RecordKind.CUT, "cut", "", RecordStatus.OK,
                      codec.dumps({"from_seq": start, "call": name}, what="a cut")))


class Proposing:
    """`model`, asked with what holds now appended (see the module's docstring)."""

    def __init__(self, model: Model, x: Execution, task_key: str) -> None:
        self.model, self.name = model, model.name
        self._x, self._task_key = x, task_key
        self._sent: list[Mapping[str, Any]] | None = None
        shape = getattr(model, "digest_params", None)
        if shape is not None:
            self.digest_params = shape

    async def now(self) -> dict[str, Any]:
        x = self._x
        row = await x.store.read_state(self._task_key)
        ctx = x.guard
        intent = None if ctx is None else ctx.intent
        return {"goal": None if intent is None else intent.goal,
                "task_state": {"version": 0 if row is None else row.version,
                               "data": {} if row is None else codec.loads(row.data)},
                "budget": None if ctx is None else ctx.budget_left()}

    async def complete(self, messages: Sequence[Mapping[str, Any]], **params: Any
                       ) -> Completion:
        now = json.dumps(await self.now(), sort_keys=True, default=str)
        self._sent = [*messages, {"role": "system", "content": f"What holds now: {now}"}]
        return await self.model.complete(self._sent, **params)

    def stead_sent(self) -> list[Mapping[str, Any]] | None:
        """The messages the model was last sent (None: not asked yet): what a
        kept conversation stores of this call."""
        return self._sent
