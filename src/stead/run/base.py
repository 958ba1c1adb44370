"""`Part`: what each part of `Run` reads (the attempt's `Execution`, the
run's row), and the task state and streams every part shares."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stead.execution import Execution
from stead.records import RunRow
from stead.run import recorder
from stead.workflow import streams
from stead.workflow.state import TaskState

if TYPE_CHECKING:
    from stead.conversations import keeping
    from stead.workflow import workspaces


class Part:
    """The base of each part `Run` is composed from."""

    def __init__(self, execution: Execution, row: RunRow) -> None:
        self._x = execution
        self.id = row.run_id
        self.task_id = row.task_id
        self.workflow = row.workflow
        self.version = row.version
        self.epoch = row.epoch
        self._row = row
        self._streams: dict[str, streams.Stream] = {}
        # Made by the run's first `run.workspace(...)`: a run without one
        # never loads the workspaces' modules.
        self._saves: workspaces.StepSaves | None = None
        # Made by the run's first model call whose conversation is kept.
        self._keeper: keeping.Keeper | None = None
        self._recorder = recorder.Recorder(execution, row.run_id)

    def stream(self, name: str) -> streams.Stream:
        """The run's durable stream `name`, for a screen to follow
        (`Client.read_stream`, the dashboard): `await run.stream("answer").append(v)`;
        a model adapter feeds it its deltas with `on_text=run.stream("answer")`.
        A replayed append is not appended again (see `stead.workflow.streams`)."""
        found = self._streams.get(name)
        if found is None:
            found = self._streams[name] = streams.Stream(self._x, name)
        return found

    @property
    def state(self) -> TaskState:
        """The versioned facts of this run's task (see `stead.Facts`)."""
        return TaskState(self._x, self._task_key)

    @property
    def _task_key(self) -> str:
        return self.task_id if self.task_id is not None else f"run:{self.id}"
