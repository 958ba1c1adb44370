"""`Run`: the context a workflow sees. Every `run.*` call is journaled; on
replay the journal answers and nothing is called again.

`Run` is composed from one part per capability: `steps` (steps and model
calls, through `recorder`), `acts` (effects and workspaces), `waiting` (waits
and timers), `runs` (children and the successor), `intents` and `values`
(`now`, `uuid`, `random`); `base` holds what every part reads."""

from __future__ import annotations

from stead.run.acts import Acts
from stead.run.intents import Intents
from stead.run.runs import Runs
from stead.run.steps import Steps
from stead.run.values import Values
from stead.run.waiting import Waiting


class Run(Steps, Acts, Waiting, Runs, Intents, Values):
    """Passed to every workflow as its first argument."""


__all__ = ["Run"]
