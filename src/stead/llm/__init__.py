"""The models a run asks through `run.llm`: the `Model` protocol, the
normalised `Completion`, and a scripted model. stead does not decide what to
say: it records what the model said, so a resumed run never asks again."""

from stead.errors import ScriptExhausted
from stead.llm.model import Completion, Model, ToolCall, Usage
from stead.llm.scripted import ScriptedModel

__all__ = ["Completion", "Model", "ScriptExhausted", "ScriptedModel", "ToolCall", "Usage"]
