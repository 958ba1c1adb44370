"""An ADK model call as the conversation keeps it: the request's contents
(`types.Content` of role `user` or `model`, their parts text, function calls
and function responses) and its system instruction read into Chat Completions
messages, the answer's content into its text and tool calls
(`stead.contrib._conversation`). A journaled answer is ADK's JSON by alias
(`functionCall`), a request's read here by field name (`function_call`): each
part is read both ways."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from stead.contrib import _conversation as conv
from stead.contrib._conversation import Message

# Parts that carry bytes or a file: kept as their kind and type, not their bytes.
_MEDIA = (("inline_data", "inlineData"), ("file_data", "fileData"))


def _field(part: Mapping[str, Any], snake: str, camel: str) -> Any:
    found = part.get(snake)
    return found if found is not None else part.get(camel)


def _other(part: Mapping[str, Any]) -> Any:
    """A part that is neither a function call nor its response: its text
    (a thought's marked so), or what it is."""
    if isinstance(part.get("text"), str):
        return {"type": "thought", "text": part["text"]} if part.get("thought") else part["text"]
    for snake, camel in _MEDIA:
        media = _field(part, snake, camel)
        if isinstance(media, Mapping):
            return {"type": snake, "mime_type": _field(media, "mime_type", "mimeType")}
    return conv.jsonable(part)


def content(given: Mapping[str, Any]) -> list[Message]:
    """One `types.Content` as Chat Completions messages: the model's text and
    function calls as one assistant message; a user's function responses each
    as a tool message, then what else it says."""
    parts = [p for p in given.get("parts") or () if isinstance(p, Mapping)]
    if given.get("role") == "model":
        said = [_other(p) for p in parts if _field(p, "function_call", "functionCall") is None]
        calls = [conv.tool_call(c.get("id"), str(c.get("name")), c.get("args") or {})
                 for c in (_field(p, "function_call", "functionCall") for p in parts)
                 if isinstance(c, Mapping)]
        return [conv.assistant(conv.text(conv.content(said)) if said else "", calls)]
    out = [conv.tool(r.get("id"), r.get("response"), str(r.get("name")))
           for r in (_field(p, "function_response", "functionResponse") for p in parts)
           if isinstance(r, Mapping)]
    rest = [_other(p) for p in parts
            if _field(p, "function_response", "functionResponse") is None]
    if rest or not out:
        out.append(conv.user(conv.content(rest)))
    return out


def system(instruction: Any) -> str | None:
    """The text of a request's system instruction (a string, a `Content`, or parts)."""
    if instruction is None or isinstance(instruction, str):
        return instruction or None
    found = conv.jsonable(instruction)
    parts = found.get("parts") if isinstance(found, Mapping) else found
    if not isinstance(parts, list):
        return conv.text(found)
    return "\n".join(p if isinstance(p, str) else str(p.get("text") or "")
                     for p in parts if isinstance(p, str | Mapping)) or None


def messages(instruction: Any, contents: Sequence[Mapping[str, Any]]) -> list[Message]:
    said = system(instruction)
    out = [conv.system(said)] if said else []
    for c in contents:
        out += content(c)
    return out


def answer(data: dict[str, Any], model: str) -> dict[str, Any]:
    """A journaled `LlmResponse` (ADK's JSON by alias) as a completion's JSON."""
    parts = [p for p in (data.get("content") or {}).get("parts") or ()
             if isinstance(p, Mapping)]
    said = [p["text"] for p in parts if isinstance(p.get("text"), str) and not p.get("thought")]
    calls = [(c.get("id"), str(c.get("name")), c.get("args") or {})
             for c in (_field(p, "function_call", "functionCall") for p in parts)
             if isinstance(c, Mapping)]
    usage = _field(data, "usage_metadata", "usageMetadata") or {}
    return conv.answer("".join(said), calls,
                       _field(usage, "prompt_token_count", "promptTokenCount"),
                       _field(usage, "candidates_token_count", "candidatesTokenCount"), model,
                       str(_field(data, "finish_reason", "finishReason") or ""))
