"""`Run.child` and `Run.continue_as_new`: the runs a run starts, a child it
awaits and the successor it ends in."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any, NoReturn

from stead import bounds, codec, records, run_ids
from stead.execution import Continued
from stead.run.base import Part
from stead.workflow import children


class Runs(Part):
    """The run's children and its successor."""

    # -- child runs ---------------------------------------------------------------
    async def child(
        self, workflow: children.Target, *args: Any, task_id: str | None = None,
        name: str | None = None, deadline: dt.timedelta | float | None = None,
        **kwargs: Any,
    ) -> Any:
        """Start a child run of `workflow` with these arguments and return its
        result once it ends (a failed, cancelled or terminated child raises
        `ChildFailed`). The child's id is journaled in this run in the
        transaction that creates it, so a takeover never starts it twice; its
        outcome is journaled here too. While the child runs, this run holds
        no lease when it has nothing else to do. Fan out with
        `asyncio.gather(run.child(...), run.child(...))`. `task_id` is the
        child's task; `name` names the call in the journal (default: the
        workflow's name); `deadline` is the child's, from when it starts."""
        bounds.optional_text(task_id, "a child's task_id")
        bounds.optional_text(name, "a child's name")
        seconds = None if deadline is None else bounds.seconds(deadline, "a child's deadline")
        return await children.Child(self._x, workflow, args, kwargs, task_id=task_id,
                                    name=name, deadline=seconds).run()

    async def continue_as_new(self, *args: Any, **kwargs: Any) -> NoReturn:
        """End this run and start its successor: the same workflow and
        version, the same task, these arguments, and an empty journal. For a
        loop that would otherwise grow its journal without bound (an agent's
        turns): pass on what the next run needs in the arguments.

        One transaction ends the run (completed, its result
        `{"continued_as": SUCCESSOR}`) and creates the successor, linked to it
        (`Client.lineage`): a crash keeps both or neither, so a successor is
        never lost nor made twice. Never returns. The successor inherits the
        intent in force, with what is left of its budget."""
        x = self._x
        x.check_live()
        text = codec.dumps({"args": list(args), "kwargs": dict(kwargs)},
                           what=f"the input of workflow {self.workflow!r}")
        if x.check_input is not None:
            x.check_input(text)
        successor = run_ids.new(x.clock.now())
        intent = self._inherited_intent()
        new = records.NewRun(
            run_id=successor, workflow=self.workflow, version=self.version,
            task_id=self.task_id, input=text, intent=intent,
            intent_why=f"continued from run {self.id}",
            # The same queue, priority and dedup key: the chain is one piece of work.
            queue=self._row.queue, priority=self._row.priority,
            dedup_key=self._row.dedup_key, deadline=self._row.deadline)
        result = codec.dumps({"continued_as": successor}, what="a continuation")
        await x.write((), lambda batch, resume: x.store.continue_run(
            x.fence, batch, resume, result, new,
            batch[-1].seq + 1 if batch else x.length))
        raise Continued(successor)

    def _inherited_intent(self) -> str | None:
        """The intent in force, its budget lowered by what this run spent."""
        ctx = self._x.guard
        if ctx is None or ctx.intent is None:
            return None
        budget, spent = ctx.intent.budget, ctx.ledger
        if budget is not None:
            from stead.intent import Budget

            def left(limit: float | None, used: float) -> Any:
                return None if limit is None else max(type(limit)(0), limit - type(limit)(used))

            # The successor's clock starts when it is created: it gets the
            # seconds this run has not used.
            budget = Budget(model_calls=left(budget.model_calls, spent.model_calls),
                            tokens=left(budget.tokens, spent.tokens),
                            effects=left(budget.effects, spent.effects),
                            spend=left(budget.spend, spent.spend),
                            seconds=None if budget.seconds is None else max(
                                0.0, budget.seconds - ctx.elapsed(self._x.clock.now())))
        return dataclasses.replace(ctx.intent, budget=budget).dumps()
