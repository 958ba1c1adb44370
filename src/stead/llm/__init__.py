"""The models a run asks through `run.llm`: the `Model` protocol, the
normalised `Completion`, a scripted model, and adapters for the OpenAI and
Anthropic SDKs and for LiteLLM (`OpenAIChat`, `OpenAIResponses`,
`AnthropicMessages`, `LiteLLM`, loaded when first named: each needs its SDK,
`pip install -e '.[openai]'`, `'.[anthropic]'` or `'.[litellm]'` in stead's
checkout). stead does not decide what to say: it records what the
model said, so a resumed run never asks again."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from stead.errors import ScriptExhausted
from stead.llm.model import Completion, Model, ToolCall, Usage
from stead.llm.scripted import ScriptedModel

if TYPE_CHECKING:
    from stead.llm.anthropic import AnthropicMessages
    from stead.llm.litellm import LiteLLM
    from stead.llm.openai import OpenAIChat, OpenAIResponses

_ADAPTERS = {"OpenAIChat": "openai", "OpenAIResponses": "openai",
             "AnthropicMessages": "anthropic", "LiteLLM": "litellm"}


def __getattr__(name: str) -> Any:
    # The SDKs are optional: an adapter's module is imported when it is named.
    if name in _ADAPTERS:
        module = importlib.import_module(f"stead.llm.{_ADAPTERS[name]}")
        return getattr(module, name)
    raise AttributeError(f"module 'stead.llm' has no attribute {name!r}")


__all__ = ["AnthropicMessages", "Completion", "LiteLLM", "Model", "OpenAIChat", "OpenAIResponses",
           "ScriptExhausted", "ScriptedModel", "ToolCall", "Usage"]
