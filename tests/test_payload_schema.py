"""Event payloads are checked against a wait's schema with `jsonschema`."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest

import stead
from stead import codec, errors, schema_check
from stead.workflow.waits import sign


class Confirmation(pydantic.BaseModel):
    approved: bool
    amount: int = pydantic.Field(ge=0)
    tags: list[str] = []


def _schema_text(schema: Any) -> str:
    return codec.dumps(codec.json_schema(schema), what="schema")


def test_payloads_are_checked_with_jsonschema_in_one_line_each() -> None:
    text = _schema_text(Confirmation)
    assert schema_check.problems({"approved": True, "amount": 3}, text) == []
    problems = schema_check.problems({"approved": "yes", "amount": -1, "tags": [1]}, text)
    assert problems == ["$.amount: -1 is less than the minimum of 0",
                        "$.approved: 'yes' is not of type 'boolean'",
                        "$.tags[0]: 1 is not of type 'string'"]
    assert schema_check.problems({"amount": 1}, text) == ["$: 'approved' is a required property"]
    # What the hand-written subset did not know, such as formats of 2020-12 keywords.
    dependent = codec.dumps({"type": "object", "dependentRequired": {"a": ["b"]}}, what="s")
    assert schema_check.problems({"a": 1}, dependent) == ["$: 'b' is a dependency of 'a'"]
    with pytest.raises(errors.SteadError, match="not a valid JSON Schema"):
        schema_check.check('{"type": 12}')


async def test_a_wait_schema_can_be_a_dict(store: stead.Store) -> None:
    app = stead.App("ops")

    @app.workflow()
    async def confirm(run: stead.Run) -> Any:
        w = await run.wait("approval", schema={"type": "object", "required": ["ok"],
                                               "properties": {"ok": {"type": "boolean"}}})
        return await w

    client = stead.Client(store, app)
    run_id = (await client.start("confirm")).run_id
    await stead.Worker(app, store).run_until_idle()
    [w] = await client.waits(run_id=run_id)
    token = sign((await store.keyring()).current, run_id, w.wait_id)
    bad = await client.deliver(run_id, event_id="e1", wait_id=w.wait_id, payload={"ok": 1},
                               token=token)
    assert isinstance(bad, stead.Rejected) and bad.reason == "invalid_payload"
    assert bad.detail == "$.ok: 1 is not of type 'boolean'"
    good = await client.deliver(run_id, event_id="e2", wait_id=w.wait_id,
                                payload={"ok": True}, token=token)
    assert isinstance(good, stead.Accepted)
    await stead.Worker(app, store).run_until_idle()
    assert await client.result(run_id) == {"ok": True}
