"""A run's conversation read back, turn by turn: for each model call, the
messages it sent that no call before it had sent (the rest it shares with an
earlier call: `earlier` counts them), its parameters, and its answer.

Walking from a call's last message back to the first one already shown
costs only that call's new messages, so reading a whole run is linear in
what it stores, as storing it was. A call whose request was not kept
(`App(keep_conversation=False)`, a record older than schema 34) shows its
answer alone; one whose parts are not stored here (its task was forgotten,
or the run was imported from an export written before exports carried
them) says so.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Iterable, Mapping
from typing import Any

from stead.payloads import is_forgotten
from stead.records import Record, RecordKind, RecordStatus
from stead.store import Store
from stead.store.transactions.conversations import (
    MODEL,
    Part,
    answer_of,
    request_of,
)


class Kept(enum.StrEnum):
    """Whether a call's request can be read."""

    YES = "kept"
    NO = "not kept"
    GONE = "gone"


@dataclasses.dataclass(frozen=True, slots=True)
class Call:
    """One model call as the conversation shows it."""

    record: Record
    kept: Kept
    sent: int  # how many messages the call sent
    earlier: int  # how many of them an earlier call sent too
    new: tuple[Any, ...]  # the others, in order (decoded JSON)
    params: Any  # the request's parameters (decoded JSON), or None
    answer: Mapping[str, Any]  # the completion's JSON

    @property
    def text(self) -> str:
        return str(self.answer.get("text") or "")

    @property
    def tool_calls(self) -> list[Mapping[str, Any]]:
        calls = self.answer.get("tool_calls")
        return [c for c in calls if isinstance(c, Mapping)] if isinstance(calls, list) else []


def _decoded(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def calls(records: Iterable[Record], parts: Mapping[str, Part]) -> list[Call]:
    """The model calls among `records` (in seq order) that answered, each
    with what it sent that no call before it had: `run.llm`'s, and the steps
    holding an SDK's model calls."""
    shown: set[str] = set()
    out = []
    for r in records:
        if r.status != RecordStatus.OK or r.kind not in (RecordKind.LLM, RecordKind.STEP):
            continue
        if is_forgotten(r.payload):  # its task was forgotten (`stead tasks forget`)
            if r.kind == RecordKind.LLM:  # a step's no longer says it was a model call
                out.append(Call(r, Kept.GONE, 0, 0, (), None, {}))
            continue
        # A model call's record, or the step of an SDK's model call (`stead.contrib`).
        found = answer_of(r.kind, r.status, r.payload)
        if found is None and r.kind == RecordKind.STEP:
            continue
        answer = found if found is not None else {}
        request = request_of(answer)
        if request is None:
            out.append(Call(r, Kept.NO, 0, 0, (), None, answer))
            continue
        count = int(request.get("messages") or 0)
        new: list[str] = []
        node = request["head"]
        missing = False
        while node is not None and node not in shown and len(new) < count:
            part = parts.get(node)
            if part is None:
                missing = True
                break
            new.append(part.body)
            shown.add(node)
            node = part.parent
        params = parts.get(request["params"])
        if missing or params is None:
            out.append(Call(r, Kept.GONE, count, 0, (), None, answer))
            continue
        new.reverse()
        out.append(Call(r, Kept.YES, count, count - len(new),
                        tuple(_decoded(b) for b in new), _decoded(params.body), answer))
    return out


async def read(store: Store, run_id: str) -> list[Call]:
    """Run `run_id`'s model calls, turn by turn: its answered model calls and
    steps (`Store.journal_model_calls`), the steps holding an SDK's model
    calls among them."""
    records = await store.journal_model_calls(run_id)
    if not any(r.kind == RecordKind.LLM or (r.kind == RecordKind.STEP and MODEL in r.payload)
               for r in records):
        return []
    return calls(records, await store.conversation_parts(run_id))


def role(message: Any) -> str:
    """Who said `message`: its `role` (OpenAI, Anthropic, LiteLLM), its
    `type` (a Responses API item), else `message`."""
    if isinstance(message, Mapping):
        for key in ("role", "type"):
            if isinstance(message.get(key), str):
                return str(message[key])
    return "message"


def content(message: Any) -> str:
    """What `message` says, as text: its content when it is text, its parts'
    text joined, else its JSON (tool calls, tool results, images by reference)."""
    if isinstance(message, Mapping):
        said = message.get("content")
        if isinstance(said, str) and len(message) <= 2:
            return said
        if isinstance(said, list) and all(
                isinstance(p, Mapping) and isinstance(p.get("text"), str) for p in said) \
                and len(message) <= 2:
            return "\n".join(str(p["text"]) for p in said)
        rest = {k: v for k, v in message.items() if k != "role"}
        return json.dumps(rest, ensure_ascii=False, sort_keys=True, default=str)
    return message if isinstance(message, str) else json.dumps(message, default=str)
