"""One worker's attempt at one run (`Execution`): the fence it writes under
and the journal it replays (`fence`), the buffer of records that ride along
with the next commit (`writes`), and its parked branches and suspension
(`parking`); `exits` holds what unwinds a workflow, `options` what the
worker decides for it."""

from __future__ import annotations

from stead.execution.exits import Continued, Drain, Frontier, Stop
from stead.execution.options import ExecutionOptions, Judge
from stead.execution.parking import Parking


class Execution(Parking):
    """A worker's attempt at a run, as every part of `Run` sees it."""


__all__ = ["Continued", "Drain", "Execution", "ExecutionOptions", "Frontier", "Judge", "Stop"]
