"""Spend: a model call reserves its estimate before it is sent, settles to its
usage after, releases on failure; a replayed call costs nothing; a run's
budget in tokens and model cost pauses it before the call that would pass
it (see `stead.spend`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

import stead
from stead.spend import Price, ReservationState
from tests.helpers import Crash, crash_then_resume

USAGE = stead.Usage(input_tokens=100, output_tokens=20)


class Counted:
    """A model answering with a fixed usage; fails the calls listed in `fail`."""

    name = "counted"

    def __init__(self, fail: Sequence[int] = ()) -> None:
        self.calls = 0
        self.fail = set(fail)

    async def complete(self, messages: Sequence[Mapping[str, Any]],
                       **params: Any) -> stead.Completion:
        self.calls += 1
        if self.calls in self.fail:
            raise ConnectionError("the provider dropped the call")
        return stead.Completion(text=f"answer {self.calls}", model=self.name, usage=USAGE)


def _budget(**kw: Any) -> stead.Intent:
    return stead.Intent(goal="think", budget=stead.Budget(**kw))


async def test_each_live_call_reserves_then_settles_to_its_usage(fstore: stead.Store) -> None:
    model, app = Counted(), stead.App("spend")
    await fstore.set_price("counted", Price(input=1.0, output=3.0))

    @app.workflow()
    async def think(run: stead.Run) -> list[str]:
        return [(await run.llm(f"q{i}", model, [{"role": "user", "content": "hi"}],
                               max_tokens=50)).text for i in range(2)]

    client = stead.Client(fstore, app)
    info = await client.start(think, intent=_budget(tokens=10_000))
    await stead.Worker(app, fstore).run_until_idle()
    assert await client.result(info.run_id) == ["answer 1", "answer 2"]
    held = await fstore.reservations(info.run_id)
    assert [r["state"] for r in held] == [ReservationState.SETTLED] * 2
    assert [r["tokens"] for r in held] == [120, 120]
    assert held[0]["cost"] == pytest.approx((100 * 1.0 + 20 * 3.0) / 1e6)


async def test_a_call_whose_estimate_passes_the_run_budget_pauses_unsent(
        fstore: stead.Store) -> None:
    model, app = Counted(), stead.App("spend")

    @app.workflow()
    async def think(run: stead.Run) -> list[str]:
        return [(await run.llm(f"q{i}", model, [{"role": "user", "content": "hi"}],
                               max_tokens=70)).text for i in range(5)]

    client = stead.Client(fstore, app)
    # Each call is estimated at 70 output tokens and 9 input tokens (its 35
    # characters of JSON over four); each settles at 120: the third call's
    # estimate (79) on top of 240 would pass 300.
    info = await client.start(think, intent=_budget(tokens=300))
    await stead.Worker(app, fstore).run_until_idle()
    row = await client.get(info.run_id)
    assert row.status == "paused", row.error
    assert row.error["cause"] == "spend" and row.error["unit"] == "tokens"
    assert row.error["scope"] == "run" and "nothing was sent" in row.error["message"]
    assert "budget.tokens" in row.error["message"]
    assert model.calls == 2
    held = await fstore.reservations(info.run_id)
    assert [r["state"] for r in held] == [ReservationState.SETTLED] * 2


async def test_a_failed_attempt_is_released_and_each_retry_reserves_again(
        fstore: stead.Store) -> None:
    model, app = Counted(fail=[1, 2]), stead.App("spend")

    @app.workflow()
    async def think(run: stead.Run) -> str:
        answer = await run.llm("q", model, [{"role": "user", "content": "hi"}],
                               retry=stead.Retry(attempts=3, backoff=0.0))
        return answer.text

    client = stead.Client(fstore, app)
    info = await client.start(think, intent=_budget(tokens=10_000))
    await stead.Worker(app, fstore).run_until_idle()
    assert await client.result(info.run_id) == "answer 3"
    held = await fstore.reservations(info.run_id)
    assert [(r["attempt"], r["state"]) for r in held] == [
        (1, ReservationState.RELEASED), (2, ReservationState.RELEASED),
        (3, ReservationState.SETTLED)]


async def test_a_replayed_call_reserves_nothing(fstore: stead.Store,
                                                clock: stead.FakeClock) -> None:
    model, app = Counted(), stead.App("spend")
    crashed: list[bool] = []

    def crash_once() -> None:
        if not crashed:
            crashed.append(True)
            raise Crash()

    @app.workflow()
    async def think(run: stead.Run) -> str:
        answer = await run.llm("q", model, [{"role": "user", "content": "hi"}])
        await run.step("crash", crash_once)
        return answer.text

    client = stead.Client(fstore, app)
    info = await client.start(think, intent=_budget(tokens=10_000))
    await crash_then_resume(app, fstore, clock)
    assert await client.result(info.run_id) == "answer 1"
    assert model.calls == 1
    held = await fstore.reservations(info.run_id)
    assert [(r["attempt"], r["state"], r["tokens"]) for r in held] == [
        (1, ReservationState.SETTLED, 120)]


async def test_a_cost_budget_pauses_on_a_model_without_a_price(fstore: stead.Store) -> None:
    model, app = Counted(), stead.App("spend")

    @app.workflow()
    async def think(run: stead.Run) -> str:
        return (await run.llm("q", model, [{"role": "user", "content": "hi"}])).text

    client = stead.Client(fstore, app)
    info = await client.start(think, intent=_budget(model_cost=1.0))
    await stead.Worker(app, fstore).run_until_idle()
    row = await client.get(info.run_id)
    assert row.status == "paused" and row.error["unit"] == "price", row.error
    assert "stead tenants price counted" in row.error["message"]
    assert model.calls == 0
