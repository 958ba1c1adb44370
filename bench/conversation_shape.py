"""The tool-calling conversation every contestant of `bench.conversation`
stores (standard library only: it runs in the peers' venv too). Each turn
the model answers with a 1 KB message that calls a tool, and the tool's
1 KB result is appended: a conversation of N turns holds 2N + 2 messages
(a system prompt, the question, then one call and one result per turn),
and its N + 1 model calls are sent 2, 4, ..., 2N + 2 of them."""

from __future__ import annotations

from typing import Any

from bench import common

SYSTEM = {"role": "system", "content": common.message(-2)}
QUESTION = {"role": "user", "content": common.message(-1)}


def call(turn: int) -> dict[str, Any]:
    """The assistant's message of `turn`: 1 KB of text and one tool call."""
    return {"role": "assistant", "content": common.message(2 * turn),
            "tool_calls": [{"id": f"call_{turn}", "type": "function",
                            "function": {"name": "lookup", "arguments": f'{{"n": {turn}}}'}}]}


def result(turn: int) -> dict[str, Any]:
    """The tool's answer to `turn`'s call: 1 KB."""
    return {"role": "tool", "tool_call_id": f"call_{turn}", "content": common.message(2 * turn + 1)}


def answer() -> dict[str, Any]:
    return {"role": "assistant", "content": common.message(10**6)}
