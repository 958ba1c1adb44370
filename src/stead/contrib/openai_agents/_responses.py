"""A model's answer (`agents.ModelResponse`) as JSON, and back.

The output items are kept as the provider's own JSON (`model_dump(mode="json")`)
and rebuilt the way openai's client parses a response: without validation
(`openai.BaseModel.construct`, which builds nested models by their `type`), so
an answer recorded before a newer openai release made a field required still
replays."""

from __future__ import annotations

from typing import Any

import openai
from agents import ModelResponse
from agents.items import TResponseOutputItem
from agents.tracing import get_trace_provider
from agents.usage import deserialize_usage, serialize_usage
from pydantic import BaseModel

from stead import warmups


class _Output(openai.BaseModel):
    output: list[TResponseOutputItem]


def _item(item: Any) -> Any:
    if isinstance(item, openai.BaseModel):  # the wire form: aliases, only the fields sent
        return item.to_dict(mode="json")
    return item.model_dump(mode="json") if isinstance(item, BaseModel) else item


def dump(response: ModelResponse) -> dict[str, Any]:
    return {
        "output": [_item(item) for item in response.output],
        "usage": serialize_usage(response.usage),
        "response_id": response.response_id,
        "request_id": response.request_id,
        "raw_usage": response.raw_usage,
    }


# A run's first model answer builds `_Output`'s schema and the type adapter
# of the output items' union (a tenth of a second, more on a busy machine):
# built before the worker's first claim instead, off the loop (`stead.warmups`).
_SAMPLE = {"output": [
    {"type": "message", "id": "m", "role": "assistant", "status": "completed",
     "content": [{"type": "output_text", "text": "", "annotations": []}]},
    {"type": "function_call", "id": "f", "call_id": "c", "name": "n", "arguments": "{}"},
], "usage": {}}


def _warm() -> None:
    _Output.model_rebuild()
    load(_SAMPLE)
    # The SDK's trace provider, made on a run's first trace: its exporter's
    # HTTP client builds an SSL context.
    get_trace_provider()


def load(data: dict[str, Any]) -> ModelResponse:
    output = _Output.construct(output=data.get("output", [])).output
    return ModelResponse(
        output=list(output), usage=deserialize_usage(data.get("usage") or {}),
        response_id=data.get("response_id"), request_id=data.get("request_id"),
        raw_usage=data.get("raw_usage"),
    )


warmups.register(_warm)
