"""A proposal: the next action an agent loop asks its model for
(`run.propose`), a model call marked `fresh="on_resume"` (see
docs/architecture.md §8).

A plain crash reuses it. After a change (goal, instructions, plan, grants,
policy version, world) the proposal not acted on yet is asked again; one
something acted on since (an effect, a wait, a state change) is history.
Asked live, the model sees the loop's messages and one more system message
that says what holds now: the intent's goal, the task state and the budget
left. That message is sent, never part of the call's digest, so a replay
matches the call the loop made.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from stead import codec
from stead.execution import Execution
from stead.llm.model import Completion, Model


class Proposing:
    """`model`, asked with what holds now appended (see the module's docstring)."""

    def __init__(self, model: Model, x: Execution, task_key: str) -> None:
        self.model, self.name = model, model.name
        self._x, self._task_key = x, task_key
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
        return await self.model.complete(
            [*messages, {"role": "system", "content": f"What holds now: {now}"}], **params)
