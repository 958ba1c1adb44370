"""A pydantic-ai model request as the conversation keeps it: the messages it
sends (`ModelRequest`s of system prompts, user prompts and tool returns, with
their instructions; `ModelResponse`s of text and tool calls), read from
pydantic-ai's JSON into Chat Completions messages, and the answer (a
`ModelResponse` in pydantic-ai's JSON codec) into its text and tool calls
(`stead.contrib._conversation`).

pydantic-ai sends the model the instructions of the last request: they are
kept as a system message where they first appear, and again where they
change, so a longer conversation shares the messages of a shorter one."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic_ai.durable_exec import ModelRequestId
from pydantic_ai.messages import ModelMessagesTypeAdapter

from stead.contrib import _conversation as conv
from stead.contrib._conversation import Message, Said


def _item(item: Any) -> Any:
    """A user prompt's item: its text, or what it is (a file by its URL or
    media type, never its bytes)."""
    if isinstance(item, str):
        return item
    if isinstance(item, Mapping):
        kind = item.get("kind")
        if "data" in item:
            return {"type": kind, "media_type": item.get("media_type")}
        return {"type": kind, **{k: item[k] for k in ("url", "media_type") if item.get(k)}}
    return conv.jsonable(item)


def _request(message: Mapping[str, Any], instructions: list[str]) -> list[Message]:
    out: list[Message] = []
    given = message.get("instructions")
    if isinstance(given, str) and given and (not instructions or instructions[-1] != given):
        instructions.append(given)
        out.append(conv.system(given))
    for part in message.get("parts") or ():
        if not isinstance(part, Mapping):
            continue
        kind, said = part.get("part_kind"), part.get("content")
        if kind == "system-prompt":
            out.append(conv.system(conv.text(said)))
        elif kind == "user-prompt":
            out.append(conv.user(said if isinstance(said, str)
                                 else conv.content([_item(i) for i in said or ()])))
        elif part.get("tool_call_id") and part.get("tool_name") and kind in (
                "tool-return", "retry-prompt", "builtin-tool-return"):
            out.append(conv.tool(part["tool_call_id"], said, str(part["tool_name"])))
        else:  # a retry answering no tool call, a part of a kind added later
            out.append(conv.user(said if isinstance(said, str) else conv.jsonable(
                {k: v for k, v in part.items() if k != "timestamp"})))
    return out


def _said(parts: Sequence[Any]) -> tuple[str, list[tuple[str | None, str, Any]]]:
    """The text and tool calls of a response's parts."""
    said, calls = [], []
    for part in parts:
        if not isinstance(part, Mapping):
            continue
        if part.get("part_kind") == "text":
            said.append(str(part.get("content") or ""))
        elif part.get("part_kind") == "tool-call":
            calls.append((part.get("tool_call_id"), str(part.get("tool_name")),
                          part.get("args") or {}))
    return "".join(said), calls


def messages(given: Sequence[Any]) -> list[Message]:
    out: list[Message] = []
    instructions: list[str] = []
    for message in ModelMessagesTypeAdapter.dump_python(list(given), mode="json"):
        if message.get("kind") == "request":
            out += _request(message, instructions)
        else:
            said, calls = _said(message.get("parts") or ())
            out.append(conv.assistant(said, [conv.tool_call(*c) for c in calls]))
    return out


def answer(data: Any) -> dict[str, Any]:
    """A journaled model request's result (a `ModelResponse`, or one with
    the events streamed before pydantic-ai 2.60) as a completion's JSON."""
    response = data.get("response") if isinstance(data.get("response"), Mapping) else data
    said, calls = _said(response.get("parts") or ())
    usage = response.get("usage") or {}
    return conv.answer(said, calls, usage.get("input_tokens"), usage.get("output_tokens"),
                       str(response.get("model_name") or ""),
                       str(response.get("finish_reason") or ""))


def said(operation_id: ModelRequestId, cache_key: tuple[object, ...]) -> Said | None:
    """What a model request keeps (None: its parameters are not the ones
    pydantic-ai's model request projects, `(model_id, messages, settings,
    parameters, run context)`)."""
    if len(cache_key) < 4 or not isinstance(cache_key[1], list):
        return None
    sent, settings, parameters = cache_key[1], cache_key[2], cache_key[3]

    def request() -> tuple[list[Message], dict[str, Any]]:
        params = {"model": operation_id.model_name,
                  "settings": settings or None,
                  "tools": [_tool(t) for t in getattr(parameters, "function_tools", ())],
                  "output_tools": [_tool(t) for t in getattr(parameters, "output_tools", ())]}
        return messages(sent), conv.jsonable({k: v for k, v in params.items()
                                              if v not in (None, [])})

    return Said(request, answer)


def _tool(tool: Any) -> dict[str, Any]:
    return {k: v for k, v in (("name", getattr(tool, "name", None)),
                              ("description", getattr(tool, "description", None)),
                              ("parameters", getattr(tool, "parameters_json_schema", None)))
            if v is not None}
