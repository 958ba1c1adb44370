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
