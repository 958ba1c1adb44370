"""What one `stead.contrib.openai_agents.run` shares with the models and tools
it journals: the workflow's `run` and the scope its calls are addressed in."""

from __future__ import annotations

import dataclasses

import stead
from stead.contrib._scope import Scope


@dataclasses.dataclass
class Session:
    run: stead.Run
    scope: Scope
    # Whether a model or a tool was called live in this run so far (the rest
    # came from the journal): the SDK's trace is shown from then on.
    went_live: bool = False

    def live(self) -> None:
        self.went_live = True
