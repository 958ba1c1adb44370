"""The requests a run's model calls sent, as stored (`conversation_parts`,
schema 34): written with the call's record in one fenced transaction, read
back for `stead runs show --conversation` and the run page, copied with a
fork's journal, deleted with the run.

A model call's record (kind `llm`, status `ok`) keeps its completion's JSON
and, under `REQUEST`, `{"messages": N, "head": NAME, "params": NAME}`: how
many messages the call sent, the name of the last one, and the name of its
parameters. A message's name is the sha256 (its first `NAME_CHARS` hex
characters) of its canonical JSON after the name of the message before it
(its `parent`), so a name stands for the whole list up to it, and a
conversation that only grows shares every part of the last call's list:
each call adds its new messages and a record of fixed size.

A model call an SDK makes through one of stead's integrations
(`stead.contrib`) is journaled as a step holding the SDK's own answer; that
step's payload keeps, under `MODEL`, what a model call's record keeps: the
answer's text, tool calls and usage, and the `REQUEST`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from stead.store.seam import FencedWrite, Flow, Journal, execute, fence_params, one, rows, stale

if TYPE_CHECKING:  # annotations only: a store that lists runs need not build them
    from stead.records import Record

# The key of a model call's payload that names its request's parts.
REQUEST = "request"
# The key of a step's payload under which an SDK's model call keeps its
# answer as a model call's record holds it (see the module's docstring).
MODEL = "stead_model"
_MODEL_TEXT = f'"{MODEL}"'


@dataclasses.dataclass(frozen=True, slots=True)
class Part:
    """A message (or a request's parameters) as stored: its name, the name of
    the message before it (None: first, or parameters), its JSON text."""

    name: str
    parent: str | None
    body: str


# Hex characters of a name kept: 128 bits, among the parts of one run.
NAME_CHARS = 32


def named(parent: str | None, body: str) -> str:
    """The name of a part whose JSON text is `body`, after `parent`."""
    return hashlib.sha256(f"{parent or ''}\n{body}".encode()).hexdigest()[:NAME_CHARS]


def request_of(payload: Mapping[str, Any]) -> dict[str, Any] | None:
    """The request a model call's decoded payload names (None: its
    conversation was not kept, or the record is older than schema 34)."""
    found = payload.get(REQUEST)
    if not isinstance(found, dict) or not isinstance(found.get("params"), str):
        return None
    head = found.get("head")
    if head is not None and not isinstance(head, str):
        return None
    return found


def answer_of(kind: str, status: str, payload: str) -> dict[str, Any] | None:
    """The answer a record holds as a model call's record does (its text,
    tool calls, usage, and `REQUEST` when kept): an answered model call's
    payload, or what an SDK's model call keeps in its step's under `MODEL`.
    None for any other record (a step's payload is decoded only when its
    text names `MODEL`)."""
    if status != "ok" or kind not in ("llm", "step") or (
            kind == "step" and _MODEL_TEXT not in payload):
        return None
    try:
        data = json.loads(payload)
    except ValueError:
        return None
    if kind == "step":
        data = data.get(MODEL) if isinstance(data, dict) else None
    return data if isinstance(data, dict) else None


def heads(records: Iterable[Record]) -> list[str]:
    """The parts the model calls among `records` name: each request's last
    message and its parameters (the messages before a head follow from it)."""
    found: list[str] = []
    for r in records:
        data = answer_of(r.kind, r.status, r.payload)
        request = request_of(data) if data is not None else None
        if request is not None:
            found += [request["params"], *([request["head"]] if request["head"] else [])]
    return list(dict.fromkeys(found))


def save(write: FencedWrite, parts: Sequence[Part],
         settle: Callable[[], Flow[None]] | None = None) -> Flow[None]:
    """Store `parts` the run lacks and journal `write`, under its fence: a
    stale worker stores nothing. A part is stored with, or after, every part
    before it in its list, so a stored name always has its whole list. With
    `settle` (the call's spend reservation settled, which journals `write`
    itself), in the same transaction."""
    if (yield one("fence", fence_params(write.fence))) is None:
        raise stale(write.fence)
    run_id = write.fence.run_id
    for p in parts:
        yield execute("insert_conversation_part", {
            "run_id": run_id, "name": p.name, "parent": p.parent, "body": p.body})
    if settle is not None:
        yield from settle()
        return
    yield Journal(write, checked=True)


def read(run_id: str) -> Flow[dict[str, Part]]:
    """Every part the run stores, by name."""
    found = yield rows("conversation_parts", {"run_id": run_id})
    return {str(r["name"]): Part(str(r["name"]), None if r["parent"] is None
                                   else str(r["parent"]), str(r["body"])) for r in found}


def copy(parent_id: str, run_id: str, named_parts: Sequence[str]) -> Flow[None]:
    """Copy to run `run_id` the parts of `parent_id` that `named_parts` name,
    with the messages before each (a fork's journal prefix names them). Read
    and written again rather than copied in SQL: a sealed part is bound to
    its run (`stead.payloads`), and is sealed again for the fork. The order
    of the inserts does not matter: the transaction stores all or none."""
    if not named_parts:
        return
    parts = yield from read(parent_id)
    wanted: dict[str, Part] = {}
    for name in named_parts:
        node: str | None = name
        while node is not None and node not in wanted and node in parts:
            wanted[node] = parts[node]
            node = parts[node].parent
    for p in wanted.values():
        yield execute("insert_conversation_part", {
            "run_id": run_id, "name": p.name, "parent": p.parent, "body": p.body})
