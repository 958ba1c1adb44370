"""Keeping the requests a run's model calls send: `Keeper` names each
message of a call's list (`stead.store.transactions.conversations`) and
knows which names the run stores already; `ModelCall` adds the request to
the call's record and stores the parts the run lacks in the same fenced
transaction as the record.

Naming a list costs only its new messages: a conversation that grows is
compared with the copies of the messages already named (`digests.frozen`,
one `==` run in C), as `digests.Digests` does for the call's digest. A
message is stored as its canonical JSON with the run's wait tokens masked,
so what the journal refuses to hold (`codec.Secrets`) is not kept here
either. What is stored never enters the call's digest: replay matches as it
did before the conversation was kept.

An SDK's model call (`stead.contrib`) is a step holding the SDK's answer:
`Said` says, in the shape stead's own calls keep, what it sent and what its
answer says, and `StepCall` keeps both in the step's payload under `MODEL`
(see `stead.store.transactions.conversations`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from stead import codec, digests
from stead.execution import Execution
from stead.records import Record
from stead.store.transactions.conversations import MODEL, REQUEST, Part, named, request_of

if TYPE_CHECKING:
    from stead.store.transactions.spend import Settlement

# Conversations remembered per run: an agent and its sub-agents.
CHAINS = 8


@dataclasses.dataclass(slots=True)
class _Chain:
    copies: list[Any]  # frozen copies of the messages named in `names`
    names: list[str]
    bodies: list[str]  # what is stored of each


def _bounded(body: str, limit: int) -> str:
    """`body`, or in place of one longer than `limit` characters (a message
    holding a whole document) what it was: its size and its hash."""
    if len(body) <= limit:
        return body
    return json.dumps({"stead_omitted": "longer than the largest value a run journals",
                       "chars": len(body), "sha256": hashlib.sha256(body.encode()).hexdigest()})


class Keeper:
    """One run's conversations as its attempt names and stores them. A
    message or parameters longer than `limit` characters of JSON are stored
    as their size and hash (`_bounded`)."""

    def __init__(self, mask: Callable[[str], str], limit: int) -> None:
        self._mask = mask
        self._limit = limit
        # Names the run stores: what this attempt committed, and the heads
        # and parameters of the calls it replayed (a stored message's list
        # before it is stored too).
        self.stored: set[str] = set()
        self._chains: list[_Chain] = []

    def known(self, payload: Mapping[str, Any]) -> None:
        """A model call's record, replayed or written: its parts are stored."""
        request = request_of(payload)
        if request is not None:
            self.stored.add(request["params"])
            if request["head"]:
                self.stored.add(request["head"])

    def _chain(self, messages: list[Any]) -> _Chain:
        """The chain naming `messages`: one remembered whose messages start
        `messages`, extended; else a new one."""
        for i, chain in enumerate(self._chains):
            done = len(chain.copies)
            if len(messages) >= done and digests.unchanged(messages[:done], chain.copies):
                del self._chains[i]
                break
        else:
            chain, done = _Chain([], [], []), 0
        new = messages[done:]
        parent = chain.names[-1] if chain.names else None
        for m in new:
            body = _bounded(self._mask(codec.canonical(m)), self._limit)
            parent = named(parent, body)
            chain.names.append(parent)
            chain.bodies.append(body)
        chain.copies.extend(digests.frozen(new))
        self._chains.insert(0, chain)
        del self._chains[CHAINS:]
        return chain

    def request(self, messages: Sequence[Any], params: Mapping[str, Any]
                ) -> tuple[dict[str, Any], list[Part]]:
        """The request as its record names it, and the parts of it the run
        does not store yet, each after its parent."""
        chain = self._chain(list(messages))
        params_body = _bounded(self._mask(codec.canonical(dict(params))), self._limit)
        params_name = named(None, params_body)
        count = len(chain.names)
        have = next((i for i in range(count - 1, -1, -1) if chain.names[i] in self.stored), -1)
        parts = [Part(chain.names[i], chain.names[i - 1] if i else None, chain.bodies[i])
                 for i in range(have + 1, count)]
        if params_name not in self.stored:
            parts.append(Part(params_name, None, params_body))
        head = chain.names[-1] if count else None
        return {"messages": count, "head": head, "params": params_name}, parts


class ModelCall:
    """One live model call's request, kept: `encode` adds it to the
    completion's JSON, `commit` stores its new parts with the record (the
    `saves` of `Recorder.call`)."""

    def __init__(self, x: Execution, keeper: Keeper, model: Any, messages: Sequence[Any],
                 params: Mapping[str, Any]) -> None:
        self._x = x
        self._keeper = keeper
        self._model = model
        self._messages = messages
        self._sent: list[Any] = []
        self._params = params
        self._parts: list[Part] = []

    def sending(self) -> None:
        """The live attempt starts: the list as it is sent (another branch may
        append to the workflow's list while the model answers)."""
        self._sent = list(self._messages)

    def encode(self, data: dict[str, Any]) -> dict[str, Any]:
        """`data` (a completion's JSON) with the request the model was sent:
        the list as `sending` saw it, or what a model that adds to it says it
        sent (`run.propose` appends what holds now: `Proposing.stead_sent`)."""
        told = getattr(self._model, "stead_sent", None)
        sent = (told() if callable(told) else None) or self._sent
        request, self._parts = self._keeper.request(sent, self._params)
        return {**data, REQUEST: request}

    def replayed(self, addr: str) -> None:
        """Nothing rides with a replayed call: its parts are stored."""

    async def commit(self, addr: str, rec: Record, started: Record,
                     outcome: Settlement | None = None) -> None:
        await _saved(self._x, self._keeper, self._parts, rec, started, outcome)


async def _saved(x: Execution, keeper: Keeper, parts: list[Part], rec: Record,
                 started: Record, outcome: Settlement | None) -> None:
    """Journal `rec` and store `parts` in one fenced transaction."""
    await x.write([rec], lambda batch, resume: x.store.save_model_call(
        x.fence, batch, resume, parts, outcome), drop=started)
    keeper.stored.update(p.name for p in parts)


@dataclasses.dataclass(frozen=True, slots=True)
class Said:
    """An SDK's model call, in the shape stead's own calls keep, each part
    made only when the call is asked live: `request()` the list of messages
    it sends (Chat Completions messages: system, user, assistant with its
    `tool_calls`, tool) and its parameters (model, settings, tools);
    `answer(result)` what the step's result says, as a completion's JSON
    does (`text`, `tool_calls` of `id`, `name` and `arguments`, `usage`)."""

    request: Callable[[], tuple[Sequence[Any], Mapping[str, Any]]]
    answer: Callable[[Any], Mapping[str, Any]]


class StepCall:
    """One live SDK model call's step: `encode` adds the answer as
    `Said.answer` reads it under `MODEL`, and the request too when the
    conversation is kept (a `keeper`), whose parts `commit` then stores with
    the step's record (the `saves` of `Recorder.call`)."""

    def __init__(self, x: Execution, keeper: Keeper | None, said: Said) -> None:
        self._x = x
        self._keeper = keeper
        self._said = said
        self._sent: list[Any] = []
        self._params: Mapping[str, Any] = {}
        self._parts: list[Part] = []

    def sending(self) -> None:
        """The live attempt starts: the request as it is sent."""
        if self._keeper is not None:
            messages, self._params = self._said.request()
            self._sent = list(messages)

    def encode(self, data: Any) -> Any:
        """`data` (the step's result) with the answer, and the request."""
        if not isinstance(data, dict):  # nothing to add a key to: the result as it is
            return data
        answer = dict(self._said.answer(data))
        if self._keeper is not None:
            answer[REQUEST], self._parts = self._keeper.request(self._sent, self._params)
        return {**data, MODEL: answer}

    def replayed(self, addr: str) -> None:
        """Nothing rides with a replayed call: its parts are stored."""

    async def commit(self, addr: str, rec: Record, started: Record,
                     outcome: Settlement | None = None) -> None:
        assert self._keeper is not None  # a `saves` only when the conversation is kept
        await _saved(self._x, self._keeper, self._parts, rec, started, outcome)


def model_of(data: Any) -> tuple[Any, dict[str, Any] | None]:
    """A step's decoded result without what `StepCall` added, and that."""
    if isinstance(data, dict) and isinstance(data.get(MODEL), dict):
        rest = dict(data)
        return rest, rest.pop(MODEL)
    return data, None
