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
from agents.usage import deserialize_usage, serialize_usage
from pydantic import BaseModel


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


def load(data: dict[str, Any]) -> ModelResponse:
    output = _Output.construct(output=data.get("output", [])).output
    return ModelResponse(
        output=list(output), usage=deserialize_usage(data.get("usage") or {}),
        response_id=data.get("response_id"), request_id=data.get("request_id"),
        raw_usage=data.get("raw_usage"),
    )
