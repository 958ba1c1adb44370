"""stead.contrib.mcp, in process: which tools are effects, from what the
server declares of them, and such a call journaled as an effect."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp import types

import stead
from stead.contrib import mcp as smcp
from stead.contrib.mcp import _calls
from tests.workers import agents_app, mcp_app

hints = st.one_of(st.none(), st.booleans())


@given(read_only=hints, destructive=hints, idempotent=hints)
def test_a_tool_is_an_effect_when_its_server_says_it_changes_things(
    read_only: bool | None, destructive: bool | None, idempotent: bool | None,
) -> None:
    tool = types.Tool(name="t", input_schema={"type": "object"},
                      annotations=types.ToolAnnotations(read_only_hint=read_only,
                                                        destructive_hint=destructive,
                                                        idempotent_hint=idempotent))
    found = _calls.side_effecting(tool)
    if destructive or read_only is False:
        assert found == smcp.Effect(idempotent=bool(idempotent))
    else:
        assert found is None
    assert _calls.side_effecting(types.Tool(name="t", input_schema={})) is None


@pytest.mark.usefixtures("sdk_dir")
async def test_an_annotated_destructive_tool_is_journaled_as_an_effect(
    store: stead.Store,
) -> None:
    client = stead.Client(store, mcp_app.app)
    info = await client.start(mcp_app.refund_as_annotated, "9", "k-9")
    await stead.Worker(mcp_app.app, store).run_until_idle()
    assert await client.result(info.run_id, timeout=5) == "refunded 4200 on order 9"
    journal = [(r.kind, r.status) for r in await store.load_journal(info.run_id)
               if r.name == "mcp tests.refund"]
    assert journal == [("effect", "intent"), ("effect", "ok")]  # its intent before it ran
    assert agents_app.lines("mcp.log") == ["refund 9 4200 k-9"]


@pytest.mark.usefixtures("sdk_dir")
async def test_a_side_effecting_tool_is_not_handed_to_an_agent_as_a_step(
    store: stead.Store,
) -> None:
    client = stead.Client(store, mcp_app.app)
    info = await client.start(mcp_app.every_tool_to_an_agent)
    await stead.Worker(mcp_app.app, store).run_until_idle()
    failed = await client.get(info.run_id)
    assert failed.status == "failed"
    # Raised inside the stdio client's task groups: stored as itself, not as the group.
    assert failed.error is not None and failed.error["type"] == "SteadError"
    assert failed.error["message"].startswith("MCP tool 'refund' is side-effecting")


@pytest.mark.usefixtures("sdk_dir")
async def test_a_check_answering_with_the_tools_result_completes_the_run(
    store: stead.Store,
) -> None:
    client = stead.Client(store, mcp_app.app)
    info = await client.start(mcp_app.refund_checked, "9", "tool_result")
    await stead.Worker(mcp_app.app, store).run_until_idle()
    assert await client.result(info.run_id, timeout=5) == {
        "text": "refunded 4200 on order 9", "error": False}
    assert len(agents_app.lines("mcp.log")) == 1


@pytest.mark.usefixtures("sdk_dir")
async def test_a_check_answering_with_the_services_own_json_is_refused_naming_the_shape(
    store: stead.Store,
) -> None:
    client = stead.Client(store, mcp_app.app)
    info = await client.start(mcp_app.refund_checked, "9", "own_json")
    await stead.Worker(mcp_app.app, store).run_until_idle()
    stopped = await client.get(info.run_id)
    assert stopped.status == "outcome_unknown", stopped.error  # to retry or reconcile
    assert stopped.error is not None and stopped.error["type"] == "InvalidCheckResult"
    assert "CallToolResult" in stopped.error["message"]
    assert [r.status for r in await store.load_journal(info.run_id)
            if r.name == "mcp tests.refund_and_hang"] == ["intent", "unknown"]
