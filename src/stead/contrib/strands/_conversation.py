"""A Strands model call as the conversation keeps it: the agent's messages
(Bedrock-shaped content blocks: text, toolUse, toolResult, ...) and its
system prompt read into Chat Completions messages, the answer's message into
its text and tool calls (`stead.contrib._conversation`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from stead.contrib import _conversation as conv
from stead.contrib._conversation import Message

# Blocks that carry bytes (an image, a document, a video): kept as their
# kind and format, not their bytes.
_MEDIA = ("image", "document", "video")


def _block(block: Mapping[str, Any]) -> Any:
    """A content block that is neither a tool use nor a tool result: its text,
    or what it is."""
    if isinstance(block.get("text"), str):
        return block["text"]
    for kind in _MEDIA:
        if isinstance(block.get(kind), Mapping):
            return {"type": kind, "format": block[kind].get("format")}
    if isinstance(block.get("json"), Mapping | list):
        return conv.text(block["json"])
    reasoning = block.get("reasoningContent")
    if isinstance(reasoning, Mapping):
        return {"type": "reasoning", "text": (reasoning.get("reasoningText") or {}).get("text")}
    return conv.jsonable(block)


def _result(result: Mapping[str, Any]) -> Any:
    """A tool result's content: its blocks' text, joined."""
    parts = [_block(c) for c in result.get("content") or () if isinstance(c, Mapping)]
    said = conv.content(parts)
    return said if result.get("status", "success") == "success" else {
        "status": result.get("status"), "content": said}


def message(given: Mapping[str, Any]) -> list[Message]:
    """One Strands message as Chat Completions messages: an assistant's
    text and tool uses as one; a user's tool results each as a tool message,
    then what else it says."""
    blocks = [b for b in given.get("content") or () if isinstance(b, Mapping)
              and "cachePoint" not in b]
    if given.get("role") == "assistant":
        said = [_block(b) for b in blocks if "toolUse" not in b]
        calls = [conv.tool_call(b["toolUse"].get("toolUseId"), str(b["toolUse"].get("name")),
                                b["toolUse"].get("input")) for b in blocks if "toolUse" in b]
        return [conv.assistant(conv.text(conv.content(said)) if said else "", calls)]
    out = [conv.tool(b["toolResult"].get("toolUseId"), _result(b["toolResult"]))
           for b in blocks if "toolResult" in b]
    rest = [_block(b) for b in blocks if "toolResult" not in b]
    if rest or not out:
        out.append({"role": str(given.get("role") or "user"), "content": conv.content(rest)})
    return out


def messages(system_prompt: str | Sequence[Mapping[str, Any]] | None,
             given: Sequence[Mapping[str, Any]]) -> list[Message]:
    """The system prompt (text, or its content blocks) and the messages."""
    said = system_prompt if isinstance(system_prompt, str) or system_prompt is None \
        else conv.text(conv.content([_block(b) for b in system_prompt
                                     if isinstance(b, Mapping) and "cachePoint" not in b]))
    out = [conv.system(said)] if said else []
    for m in given:
        out += message(m)
    return out


def answer(data: dict[str, Any], model: str) -> dict[str, Any]:
    """A journaled stop (`_model.dump`) as a completion's JSON."""
    blocks = [b for b in (data.get("message") or {}).get("content") or ()
              if isinstance(b, Mapping)]
    said = [b["text"] for b in blocks if isinstance(b.get("text"), str)]
    calls = [(b["toolUse"].get("toolUseId"), str(b["toolUse"].get("name")),
              b["toolUse"].get("input")) for b in blocks if isinstance(b.get("toolUse"), Mapping)]
    usage = data.get("usage") or {}
    return conv.answer("\n".join(said), calls, usage.get("inputTokens"),
                       usage.get("outputTokens"), model, str(data.get("stop_reason") or ""))
