"""Contracts: `contract=` on a step, an effect or a model call is folded into
its digest, so a body changed under the same name and arguments stops the
run (naming the call and both contracts) instead of reusing a result the new
body would not give; an unchanged contract is reused as always."""

from __future__ import annotations

from typing import Any

import pytest

import stead
from stead import digests

KINDS = ("step", "effect", "llm")


class CountingModel(stead.ScriptedModel):
    def __init__(self, calls: list[str]) -> None:
        super().__init__(["4200"])
        self.asked = calls

    async def complete(self, messages: Any, **params: Any) -> stead.Completion:
        self.asked.append(messages[-1]["content"])
        return await super().complete(messages, **params)


def _app(kind: str, contract: str | None, calls: list[str]) -> stead.App:
    app = stead.App("shop")

    def price(order_id: str) -> int:
        calls.append(order_id)
        return 4200

    def charge(op: stead.Operation, order_id: str) -> int:
        calls.append(order_id)
        return 4200

    @app.workflow(name="quote", version=1)
    async def quote(run: stead.Run, order_id: str) -> Any:
        if kind == "step":
            value: Any = await run.step("price", price, order_id, contract=contract)
        elif kind == "effect":
            value = await run.effect("price", charge, order_id, contract=contract)
        else:
            answer = await run.llm("price", CountingModel(calls),
                                   [{"role": "user", "content": order_id}], contract=contract)
            value = answer.text
        event = await (await run.wait("go", token=False))
        return {"value": value, "event": event}

    return app


async def _waiting(store: stead.Store, kind: str, contract: str | None,
                   calls: list[str]) -> str:
    app = _app(kind, contract, calls)
    info = await stead.Client(store, app).start("quote", "123")
    await stead.Worker(app, store).run_until_idle()
    assert (await stead.Client(store).get(info.run_id)).status == "waiting"
    return info.run_id


async def _resume(store: stead.Store, app: stead.App, run_id: str) -> stead.RunInfo:
    client = stead.Client(store, app)
    await client.deliver(run_id, event_id="e1", kind="go", payload={"go": True})
    await stead.Worker(app, store).run_until_idle()
    return await client.get(run_id)


@pytest.mark.parametrize("kind", KINDS)
async def test_a_changed_contract_stops_the_run_naming_the_call_and_both_contracts(
    store: stead.Store, kind: str,
) -> None:
    calls: list[str] = []
    run_id = await _waiting(store, kind, "v1", calls)
    info = await _resume(store, _app(kind, "v2", calls), run_id)
    assert info.status == "incompatible_checkpoint"
    assert info.error is not None
    message = info.error["message"]
    assert f"{kind} 'price'" in message and "contract 'v1'" in message
    assert "contract 'v2'" in message
    assert calls == ["123"]  # nothing called again under the new contract


@pytest.mark.parametrize("kind", KINDS)
async def test_an_unchanged_contract_is_reused(store: stead.Store, kind: str) -> None:
    calls: list[str] = []
    run_id = await _waiting(store, kind, "v1", calls)
    info = await _resume(store, _app(kind, "v1", calls), run_id)
    assert info.status == "completed", info.error
    assert info.result["value"] in (4200, "4200")
    assert calls == ["123"]  # replayed from the journal, not called again


async def test_a_contract_added_where_there_was_none_is_a_change(store: stead.Store) -> None:
    calls: list[str] = []
    run_id = await _waiting(store, "step", None, calls)
    info = await _resume(store, _app("step", "v2", calls), run_id)
    assert info.status == "incompatible_checkpoint"
    assert info.error is not None and "contract None" in info.error["message"]


@pytest.mark.parametrize("bad", ["", "a#b", "x" * 65, "tab\there", 2])
def test_a_contract_is_a_short_printable_word(bad: Any) -> None:
    with pytest.raises(ValueError, match="contract"):
        digests.contracted("abc", bad)


def test_a_contract_folds_into_the_digest_and_back_out() -> None:
    assert digests.contracted("abc", None) == "abc"
    assert digests.contract_of(digests.contracted("abc", "v2")) == ("abc", "v2")
    assert digests.contract_of("abc") == ("abc", None)
