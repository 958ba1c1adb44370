"""What the SDK integrations share to keep a model call's conversation
(`Run.model_step`): the messages stead's own calls keep, in the Chat
Completions shape (a system message, user messages, an assistant message with
its `tool_calls`, one tool message per tool result), and the answer as a
completion's JSON has it (`text`, `tool_calls`, `usage`). Each integration
reads its SDK's own types into these (its `_conversation` module).

Content that is not text (an image, a file, audio) is kept as what it is and
its size, never its bytes: the conversation is for a person to read, and a
message longer than a journaled value is stored as its size and hash anyway
(`stead.conversations.keeping`)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic_core import to_jsonable_python

from stead.conversations.keeping import Said

__all__ = ["Said", "answer", "assistant", "content", "jsonable", "system", "text", "tool",
           "tool_call", "user"]

Message = dict[str, Any]


def _type_name(value: Any) -> str:
    return f"<{type(value).__qualname__}>"


def jsonable(value: Any) -> Any:
    """`value` as JSON values: an object with no JSON form by its type's
    name, bytes by their size."""
    if isinstance(value, bytes | bytearray):
        return {"bytes": len(value)}
    return to_jsonable_python(value, fallback=_type_name, bytes_mode="base64")


def text(value: Any) -> str:
    """`value` as text: itself if it is one, else its JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(jsonable(value), ensure_ascii=False, sort_keys=True)


def system(said: str) -> Message:
    return {"role": "system", "content": said}


def user(content: Any) -> Message:
    return {"role": "user", "content": content}


def tool_call(call_id: str | None, name: str, arguments: Any) -> dict[str, Any]:
    """One call in an assistant message's `tool_calls`: its arguments as the
    text the model gave (JSON), as Chat Completions has them."""
    return {"id": call_id or "", "type": "function",
            "function": {"name": name, "arguments": text(arguments)}}


def assistant(said: str, calls: Sequence[dict[str, Any]] = ()) -> Message:
    message: Message = {"role": "assistant", "content": said or None}
    if calls:
        message["tool_calls"] = list(calls)
    return message


def tool(call_id: str | None, content: Any, name: str | None = None) -> Message:
    message: Message = {"role": "tool", "tool_call_id": call_id or "", "content": text(content)}
    if name:
        message["name"] = name
    return message


def content(parts: Sequence[Any]) -> Any:
    """A message's content from its parts (each a text or another part's
    JSON): the text alone when all of them are text, else the parts, text
    as `{"type": "text", "text": ...}`."""
    if all(isinstance(p, str) for p in parts):
        return "\n".join(parts)
    return [{"type": "text", "text": p} if isinstance(p, str) else p for p in parts]


def answer(said: str, calls: Iterable[tuple[str | None, str, Any]], input_tokens: Any,
           output_tokens: Any, model: str = "", stop_reason: str = "") -> dict[str, Any]:
    """A model's answer as a completion's JSON has it: its text, its tool
    calls (`(id, name, arguments)`, arguments as an object or its JSON text)
    and its tokens."""
    found = []
    for call_id, name, arguments in calls:
        call: dict[str, Any] = {"id": call_id or "", "name": name}
        if isinstance(arguments, str):
            try:
                parsed = json.loads(arguments) if arguments else {}
            except ValueError:
                parsed = None
            call["arguments"] = parsed if isinstance(parsed, dict) else {}
            call["raw_arguments"] = arguments
        else:
            given = jsonable(arguments)
            call["arguments"] = given if isinstance(given, dict) else {}
        found.append(call)
    return {"text": said, "tool_calls": found,
            "usage": {"input_tokens": _count(input_tokens), "output_tokens": _count(output_tokens)},
            "model": model, "stop_reason": stop_reason}


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
