"""An Agents SDK model call as the conversation keeps it: the Responses API
input items the agent sends (its instructions first) read into Chat
Completions messages, an answer's output items into its text and tool calls
(`stead.contrib._conversation`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from stead.contrib import _conversation as conv
from stead.contrib._conversation import Message

# The content parts that are text, as the Responses API names them.
_TEXT = ("input_text", "output_text", "text")


def _parts(content: Any) -> Any:
    if not isinstance(content, list):
        return content
    return conv.content([p["text"] if isinstance(p, Mapping) and p.get("type") in _TEXT
                         and isinstance(p.get("text"), str)
                         else {k: v for k, v in p.items() if k not in ("image_url", "file_data")}
                         if isinstance(p, Mapping) else p for p in content])


def _said(content: Any) -> str:
    """The text of an assistant message's content (its refusals too)."""
    if isinstance(content, str):
        return content
    found = [str(p.get("text") or p.get("refusal") or "") for p in content or ()
             if isinstance(p, Mapping)]
    return "\n".join(t for t in found if t)


def messages(instructions: str | None, given: str | Sequence[Any]) -> list[Message]:
    """The messages of one request: `instructions` as the system message,
    then each input item; an assistant message and the function calls after
    it are one assistant message, as the model answered them."""
    out: list[Message] = [conv.system(instructions)] if instructions else []
    items = [{"role": "user", "content": given}] if isinstance(given, str) else given
    for raw in items:
        item = conv.jsonable(raw)
        if not isinstance(item, dict):
            out.append(conv.user(conv.text(item)))
            continue
        kind, role = item.get("type"), item.get("role")
        last = out[-1] if out else None
        if kind == "function_call":
            call = conv.tool_call(item.get("call_id"), str(item.get("name")),
                                  item.get("arguments") or "")
            if last is not None and last["role"] == "assistant" and last.get("open"):
                last.setdefault("tool_calls", []).append(call)
            else:
                out.append({**conv.assistant("", [call]), "open": True})
        elif kind == "function_call_output":
            out.append(conv.tool(item.get("call_id"), _parts(item.get("output"))))
        elif role == "assistant":
            out.append({**conv.assistant(_said(item.get("content"))), "open": True})
        elif role in ("user", "system", "developer"):
            out.append({"role": role, "content": _parts(item.get("content"))})
        else:  # reasoning, a hosted tool's call: kept as the item it is
            out.append({k: v for k, v in item.items() if k != "encrypted_content"})
    for m in out:
        m.pop("open", None)
    return out


def answer(data: dict[str, Any], model: str) -> dict[str, Any]:
    """A journaled `ModelResponse` (`_responses.dump`) as a completion's JSON."""
    said, calls = [], []
    for item in data.get("output") or ():
        if not isinstance(item, Mapping):
            continue
        if item.get("type") == "message":
            said.append(_said(item.get("content")))
        elif item.get("type") == "function_call":
            calls.append((item.get("call_id"), str(item.get("name")), item.get("arguments") or ""))
    usage = data.get("usage") or {}
    return conv.answer("\n".join(t for t in said if t), calls, usage.get("input_tokens"),
                       usage.get("output_tokens"), model)
