"""JSON in and out: typed values survive the journal, digests are stable, and
what JSON cannot hold (NaN, sets, bytes, arbitrary objects) is refused before
anything is written."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import enum
import math
import uuid
from decimal import Decimal
from typing import Any

import pydantic
import pytest

import stead
from stead import codec
from tests.helpers import Gate, run_until_gate


class Order(pydantic.BaseModel):
    id: str
    amount: Decimal
    placed: dt.datetime
    tags: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Point:
    x: int
    y: float
    label: str | None = None


@dataclasses.dataclass(frozen=True)
class Event:
    id: uuid.UUID
    at: dt.datetime
    where: Point
    orders: list[Order]


class Reading(pydantic.BaseModel):
    value: float


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


IST = dt.timezone(dt.timedelta(hours=5, minutes=30))
ORDER = Order(id="o-1", amount=Decimal("12.50"), placed=dt.datetime(2024, 5, 1, 9, 30, tzinfo=IST),
              tags=("vip", "eu"))
POINT = Point(1, 2.5, "here")
EVENT = Event(uuid.UUID(int=42), dt.datetime(2024, 5, 1, tzinfo=dt.UTC), POINT, [ORDER, ORDER])
WHEN = dt.datetime(2024, 5, 1, 12, 0, 1, 250, tzinfo=dt.UTC)


# Step functions with declared return types, at module level so that their
# annotations resolve (this file uses `from __future__ import annotations`).
async def make_order() -> Order:
    await asyncio.sleep(0)
    return ORDER


def make_orders() -> list[Order]:
    return [ORDER, ORDER.model_copy(update={"id": "o-2"})]


def make_point() -> Point:
    return POINT


async def make_event() -> Event:
    return EVENT


def make_when() -> dt.datetime:
    return WHEN


def make_naive() -> dt.datetime:
    return dt.datetime(2024, 1, 2, 3, 4, 5)


def make_day() -> dt.date:
    return dt.date(2024, 2, 29)


def make_id() -> uuid.UUID:
    return uuid.UUID(int=7)


def make_pair() -> tuple[int, str, bool]:
    return (1, "a", True)


def make_color() -> Color:
    return Color.BLUE


def make_by_id() -> dict[int, Point]:
    return {1: POINT, 2: Point(3, 4.0)}


def make_nothing() -> Point | None:
    return None


def make_untyped():  # type: ignore[no-untyped-def]  # no annotation: the JSON form comes back
    return {"at": WHEN, "pair": (1, 2)}


EXPECTED: dict[str, Any] = {
    "order": ORDER,
    "orders": make_orders(),
    "point": POINT,
    "event": EVENT,
    "when": WHEN,
    "naive": make_naive(),
    "day": make_day(),
    "id": make_id(),
    "pair": make_pair(),
    "color": Color.BLUE,
    "by_id": make_by_id(),
    "nothing": None,
    "untyped": {"at": WHEN.isoformat(), "pair": [1, 2]},
}
MAKERS: dict[str, Any] = {
    "order": make_order, "orders": make_orders, "point": make_point, "event": make_event,
    "when": make_when, "naive": make_naive, "day": make_day, "id": make_id,
    "pair": make_pair, "color": make_color, "by_id": make_by_id, "nothing": make_nothing,
    "untyped": make_untyped,
}



def _same_typed(a: Any, b: Any) -> None:
    """Equal, and of the same type all the way down (1 == 1.0 and (1,) != [1]
    would hide a lossy round trip)."""
    assert type(a) is type(b), (a, b)
    assert a == b
    if isinstance(a, dt.datetime):
        assert a.utcoffset() == b.utcoffset()
    if isinstance(a, list | tuple):
        for x, y in zip(a, b, strict=True):
            _same_typed(x, y)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            _same_typed(k, next(kb for kb in b if kb == k))
            _same_typed(a[k], b[k])
    elif dataclasses.is_dataclass(a) and not isinstance(a, type):
        for f in dataclasses.fields(a):
            _same_typed(getattr(a, f.name), getattr(b, f.name))
    elif isinstance(a, pydantic.BaseModel):
        for name in type(a).model_fields:
            _same_typed(getattr(a, name), getattr(b, name))


# -- typed round trips ------------------------------------------------------------
async def test_typed_step_results_and_inputs_are_equal_live_and_on_replay(
    fstore: stead.Store,
) -> None:
    app = stead.App("t")
    gate = Gate()
    seen: list[dict[str, Any]] = []
    inputs: list[tuple[Order, dt.datetime, tuple[uuid.UUID, ...]]] = []

    def one() -> int:
        return 1

    @app.workflow()
    async def wf(run: stead.Run, order: Order, when: dt.datetime,
                 ids: tuple[uuid.UUID, ...]) -> int:
        inputs.append((order, when, ids))
        got = {name: await run.step(name, fn) for name, fn in MAKERS.items()}
        seen.append(got)
        await run.step("gate", gate.step)
        return await run.step("last", one)

    client = stead.Client(fstore, app)
    info = await client.start(wf, ORDER, WHEN, (uuid.UUID(int=1), uuid.UUID(int=2)))
    await run_until_gate(app, fstore, gate)
    assert len(seen) == 1  # live, then released at the gate
    journal = await client.journal(info.run_id)
    assert [r.name for r in journal] == [*MAKERS, "gate"]

    await stead.Worker(app, fstore).run_until_idle()
    assert await client.result(info.run_id, timeout=5) == 1
    assert len(seen) == 2  # ... and replayed from the journal
    live, replayed = seen
    for name, expected in EXPECTED.items():
        _same_typed(live[name], expected)
        _same_typed(replayed[name], expected)
    for got in inputs:
        _same_typed(got, (ORDER, WHEN, (uuid.UUID(int=1), uuid.UUID(int=2))))
    resumes = await client.resumes(info.run_id)
    assert [r.reused for r in resumes] == [len(MAKERS) + 1]


async def test_a_step_without_a_declared_type_gets_the_json_form_live_too(
    fstore: stead.Store,
) -> None:
    """Live and replay see the *decoded* value, so a lossy encoding can never make
    the two differ: without a declared type both get plain JSON."""
    app = stead.App("t")
    got: list[Any] = []

    @app.workflow()
    async def wf(run: stead.Run) -> None:
        got.append(await run.step("untyped", lambda: {"at": WHEN, "ids": (uuid.UUID(int=3),)}))

    client = stead.Client(fstore, app)
    info = await client.start(wf)
    await stead.Worker(app, fstore).run_until_idle()
    await client.result(info.run_id, timeout=5)
    assert got == [{"at": WHEN.isoformat(), "ids": [str(uuid.UUID(int=3))]}]


def test_codec_converts_json_back_to_declared_types() -> None:
    for name, fn in MAKERS.items():
        value = asyncio.run(fn()) if asyncio.iscoroutinefunction(fn) else fn()
        text = codec.dumps(value, what=name)
        _same_typed(codec.decode(text, codec.return_type(fn)), EXPECTED[name])
    # Encoding is canonical enough to be idempotent through its own decode.
    text = codec.dumps(EVENT, what="event")
    assert codec.dumps(codec.decode(text, Event), what="again") == text


# -- digests ------------------------------------------------------------------------
def test_digest_ignores_dict_key_order_at_every_depth() -> None:
    a = {"order": {"id": "1", "lines": [{"sku": "x", "qty": 2}]}, "amount": 5}
    b = {"amount": 5, "order": {"lines": [{"qty": 2, "sku": "x"}], "id": "1"}}
    assert codec.digest([a], {"x": 1, "y": 2}) == codec.digest([b], {"y": 2, "x": 1})
    # ... but not list order, values or types.
    assert codec.digest([1, 2], {}) != codec.digest([2, 1], {})
    assert codec.digest([{"a": 1}], {}) != codec.digest([{"a": 2}], {})
    assert codec.digest(["1"], {}) != codec.digest([1], {})
    # Rich values digest as their JSON form, whatever their field order.
    assert codec.digest([POINT], {}) == codec.digest([{"y": 2.5, "label": "here", "x": 1}], {})


def test_digest_format_is_pinned() -> None:
    """Journals store these digests: changing how they are computed makes every
    open checkpoint incompatible. Change this value only with a migration."""
    assert codec.digest(["T-1", {"b": 2, "a": 1}], {"k": None}) == (
        "9a401330dcce1cfc131b4ae91a420df3"
    )


async def test_replay_with_dicts_built_in_another_key_order_is_not_non_determinism(
    fstore: stead.Store,
) -> None:
    app = stead.App("t")
    gate = Gate()
    attempts: list[int] = []
    calls: list[dict[str, int]] = []

    def total(payload: dict[str, int], **extra: int) -> int:
        calls.append(payload)
        return sum(payload.values()) + sum(extra.values())

    @app.workflow()
    async def wf(run: stead.Run) -> int:
        attempts.append(1)
        keys = ["a", "b", "c"] if len(attempts) == 1 else ["c", "a", "b"]
        payload = {k: ord(k) for k in keys}
        extra: dict[str, Any] = {"x": 1, "y": 2} if len(attempts) == 1 else {"y": 2, "x": 1}
        first = await run.step("total", total, payload, **extra)
        await run.step("gate", gate.step)
        return first + await run.step("again", total, payload)

    client = stead.Client(fstore, app)
    info = await client.start(wf)
    await run_until_gate(app, fstore, gate)
    await stead.Worker(app, fstore).run_until_idle()
    assert await client.result(info.run_id, timeout=5) == 2 * (97 + 98 + 99) + 3
    assert len(attempts) == 2
    assert len(calls) == 2  # `total` ran once live, and `again` once after the resume


# -- what JSON cannot hold ------------------------------------------------------------
@pytest.mark.parametrize(
    "value",
    [float("nan"), float("inf"), -math.inf, {"a": [1.0, float("nan")]},
     Point(1, float("nan")), Reading(value=float("nan"))],
    ids=["nan", "inf", "-inf", "nested-nan", "dataclass-nan", "model-nan"],
)
def test_nan_and_infinity_are_refused(value: Any) -> None:
    with pytest.raises(stead.SerializationError, match="cannot be stored as JSON"):
        codec.dumps(value, what="the value")
    with pytest.raises(stead.SerializationError):
        codec.digest([value], {})


@pytest.mark.parametrize(
    ("value", "type_name"),
    [({1, 2}, "set"), (b"bytes", "bytes"), (object(), "object"), (1 + 2j, "complex")],
)
def test_values_json_cannot_hold_are_refused_by_name(value: Any, type_name: str) -> None:
    with pytest.raises(stead.SerializationError, match=f"{type_name} is not JSON-serialisable"):
        codec.dumps(value, what="the value")


async def test_nan_from_a_step_fails_the_run_at_that_step_with_nothing_written(
    fstore: stead.Store,
) -> None:
    app = stead.App("t")

    def nan() -> float:
        return float("nan")

    @app.workflow()
    async def returns_nan(run: stead.Run) -> float:
        await run.step("fine", lambda: 1.5)
        return await run.step("nan", nan)

    @app.workflow()
    async def passes_nan(run: stead.Run) -> float:
        return await run.step("takes", lambda x: x, float("nan"))

    @app.workflow()
    async def ends_nan(run: stead.Run) -> float:
        return float("nan")

    client = stead.Client(fstore, app)
    ids = {wf.name: (await client.start(wf)).run_id
           for wf in (returns_nan, passes_nan, ends_nan)}
    await stead.Worker(app, fstore).run_until_idle()

    got = {name: await client.get(run_id) for name, run_id in ids.items()}
    for info in got.values():
        assert info.status == "failed"
        assert info.error is not None and info.error["type"] == "SerializationError"
    assert "the result of step 'nan'" in got["returns_nan"].error["message"]  # type: ignore[index]
    assert "arguments" in got["passes_nan"].error["message"]  # type: ignore[index]
    assert "the result of workflow 'ends_nan'" in got["ends_nan"].error["message"]  # type: ignore[index]
    assert [r.name for r in await client.journal(ids["returns_nan"])] == ["fine"]
    assert await client.journal(ids["passes_nan"]) == []
    assert await client.journal(ids["ends_nan"]) == []
