"""Incremental digests of growing list arguments (`stead.digests`): always the
bytes `codec.digest` computes from scratch, whatever happens to the list."""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import stead
from stead import codec, digests, errors
from stead.workflow.waits import Token
from tests import stress
from tests.helpers import Crash, crash_then_resume

# -- what the cache sees must not change what the digest is ----------------------
scalars = (
    st.none() | st.booleans() | st.integers(-2, 2) | st.sampled_from([0.0, -0.0, 1.0, 2.5])
    | st.text(max_size=4)
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.tuples(inner)
    | st.dictionaries(st.sampled_from(["a", "b", "role", "content"]), inner, max_size=3),
    max_leaves=8,
)
ops = st.one_of(
    st.tuples(st.just("append"), values),
    st.tuples(st.just("set"), st.integers(0, 99), st.sampled_from(["a", "b"]), values),
    st.tuples(st.just("drop"), st.integers(0, 99)),
    st.tuples(st.just("retype"), st.integers(0, 99)),
    st.tuples(st.just("truncate"), st.integers(0, 12)),
    st.tuples(st.just("copy")),
    st.tuples(st.just("replace"), st.lists(values, max_size=10)),
    st.tuples(st.just("params"), values),
    st.tuples(st.just("head"), st.sampled_from(["m1", "m2"])),
    st.tuples(st.just("poison"), st.integers(0, 99)),
)

# ==-equal values that encode differently: what `==` alone would miss.
ALIASES: dict[tuple[type, Any], Any] = {
    (int, 1): True, (bool, True): 1.0, (float, 1.0): 1,
    (int, 0): False, (bool, False): 0.0, (float, 0.0): -0.0,
}


def _containers(value: Any) -> list[dict[str, Any] | list[Any]]:
    """Every dict and list inside `value`, `value` included."""
    found: list[dict[str, Any] | list[Any]] = []
    if isinstance(value, dict | list):
        found.append(value)
    children = value.values() if isinstance(value, dict) else value \
        if isinstance(value, list | tuple) else ()
    for child in children:
        found.extend(_containers(child))
    return found


def _retype(history: list[Any], pick: int) -> None:
    """Swap one number inside `history`, in place, for an ==-equal other type."""
    spots = [(c, k) for c in _containers(history)
             for k in (c.keys() if isinstance(c, dict) else range(len(c)))
             if type(c[k]) in (int, float, bool)  # type: ignore[index]
             and (type(c[k]), c[k]) in ALIASES]  # type: ignore[index]
    if spots:
        c, k = spots[pick % len(spots)]
        c[k] = ALIASES[(type(c[k]), c[k])]  # type: ignore[index]


def _apply(op: tuple[Any, ...], history: list[Any], call: dict[str, Any]) -> list[Any]:
    kind = op[0]
    targets = _containers(history)[1:]  # inside old elements: changes in place
    if kind == "append":
        history.append(op[1])
    elif kind == "set" and targets:
        t = targets[op[1] % len(targets)]
        if isinstance(t, dict):
            t[op[2]] = op[3]
        else:
            t.append(op[3])
    elif kind == "drop" and targets:
        t = targets[op[1] % len(targets)]
        if isinstance(t, dict) and t:
            del t[next(iter(t))]
        elif t:
            t.pop()
    elif kind == "retype":
        _retype(history, op[1])
    elif kind == "truncate":
        del history[op[1]:]
    elif kind == "copy":
        return copy.deepcopy(history)
    elif kind == "replace":
        return list(op[1])
    elif kind == "params":
        call["params"] = {"p": op[1]}
    elif kind == "head":
        call["model"] = op[1]
    elif kind == "poison" and history:
        history[op[1] % len(history)] = {"bad": float("nan")}
    return history


def _check(cache: digests.Digests, model: str, history: list[Any], params: Any) -> None:
    """Each way the cache is asked gives what `codec.digest` gives, or fails as it does."""
    pairs = [
        (lambda: cache.llm("chat", model, history, params),
         lambda: codec.digest(model, list(history), params)),
        (lambda: cache.call("step", "s", [model, history, 1], params),
         lambda: codec.digest([model, history, 1], params)),
        (lambda: cache.call("effect", "e", [model], {"z": 0, "history": history, "a": 2}),
         lambda: codec.digest([model], {"z": 0, "history": history, "a": 2})),
    ]
    for fast, slow in pairs:
        try:
            expected = slow()
        except errors.SerializationError:
            with pytest.raises(errors.SerializationError):
                fast()
        else:
            assert fast() == expected


@settings(max_examples=stress.examples(300), deadline=None)
@given(start=st.lists(values, max_size=12), steps=st.lists(ops, max_size=25))
def test_the_cache_always_gives_the_digest_from_scratch(
    start: list[Any], steps: list[tuple[Any, ...]]
) -> None:
    cache = digests.Digests()
    history = start
    call: dict[str, Any] = {"model": "m1", "params": {}}
    for op in [("append", None), *steps]:
        history = _apply(op, history, call)
        _check(cache, call["model"], history, call["params"])


def test_a_conversation_is_hashed_from_its_snapshot() -> None:
    cache = digests.Digests()
    history: list[Any] = []
    for i in range(12):
        assert cache.llm("chat", "m", history, {}) == codec.digest("m", history, {})
        history.append({"role": "user", "content": f"turn {i}", "n": i})
    entry = cache._entries[("llm", "chat")]
    assert entry.state is not None and len(entry.prefix) == 11


def test_values_equal_under_eq_but_encoded_differently_are_told_apart() -> None:
    cache = digests.Digests()
    utc, plus_one = dt.UTC, dt.timezone(dt.timedelta(hours=1))

    @dataclasses.dataclass
    class Note:
        at: dt.datetime

    history: list[Any] = [{"at": dt.datetime(2026, 1, 1, 12, tzinfo=utc)},
                          Note(dt.datetime(2026, 1, 1, 12, tzinfo=utc)), "plain"]
    for _ in range(3):
        assert cache.llm("c", "m", history, {}) == codec.digest("m", history, {})
    history[0]["at"] = dt.datetime(2026, 1, 1, 13, tzinfo=plus_one)  # the same instant
    assert cache.llm("c", "m", history, {}) == codec.digest("m", history, {})
    history[1].at = dt.datetime(2026, 1, 1, 13, tzinfo=plus_one)
    assert cache.llm("c", "m", history, {}) == codec.digest("m", history, {})
    # A token is a str equal to its text, but enters digests as a reference.
    token = Token("stk_secret", "w1")
    history.append("stk_secret")
    assert cache.llm("c", "m", history, {}) == codec.digest("m", history, {})
    history[-1] = token
    assert cache.llm("c", "m", history, {}) == codec.digest("m", history, {})
    assert "stk_secret" not in codec.canonical(history)


def test_a_run_remembers_few_call_names() -> None:
    cache = digests.Digests(size=3)
    history = [{"n": i} for i in range(10)]
    for i in range(20):
        for _ in range(3):
            assert cache.llm(f"c{i}", "m", history, {}) == codec.digest("m", history, {})
    assert len(cache._entries) == 3


# -- a growing conversation survives a crash and replays ------------------------
class Chat:
    """Answers with the turn number; dies once, at turn `crash_at`."""

    name = "chat"

    def __init__(self, crash_at: int) -> None:
        self.crash_at = crash_at
        self.asked: list[int] = []

    async def complete(self, messages: Sequence[Mapping[str, Any]], **params: Any
                       ) -> stead.Completion:
        turn = len(messages)
        self.asked.append(turn)
        if turn == self.crash_at and self.asked.count(turn) == 1:
            raise Crash()
        return stead.Completion(text=f"reply {turn}", model=self.name)


def count(history: list[dict[str, Any]]) -> int:
    return len(history)


async def test_a_growing_conversation_replays_after_a_crash(
    fstore: stead.Store, clock: stead.FakeClock
) -> None:
    app = stead.App("t")
    model = Chat(crash_at=15)

    @app.workflow(version=1)
    async def agent(run: stead.Run, turns: int) -> list[Any]:
        history: list[dict[str, Any]] = [{"role": "system", "content": "be brief"}]
        for i in range(turns):
            reply = await run.llm("chat", model, history, temperature=0.5)
            history.append({"role": "assistant", "content": reply.text, "turn": i})
            if i == 5:
                history[1]["turn"] = 0.0  # an old message changes, in place
            seen = await run.step("count", count, history)
            history.append({"role": "user", "content": f"seen {seen}"})
        return history

    client = stead.Client(fstore, app)
    info = await client.start(agent, 20)
    await crash_then_resume(app, fstore, clock)
    result = await client.result(info.run_id)
    assert len(result) == 41 and result[-1] == {"role": "user", "content": "seen 40"}
    assert model.asked == [*range(1, 16, 2), *range(15, 40, 2)]
    journal = await client.journal(info.run_id)
    chats = [r for r in journal if r.kind == "llm"]
    assert len(chats) == 20
    # The journal holds the digests computed from scratch.
    history: list[Any] = [{"role": "system", "content": "be brief"}]
    for i, rec in enumerate(chats):
        assert rec.digest == codec.digest("chat", history, {"temperature": 0.5})
        history.append({"role": "assistant", "content": f"reply {len(history)}", "turn": i})
        if i == 5:
            history[1]["turn"] = 0.0
        history.append({"role": "user", "content": f"seen {len(history)}"})
