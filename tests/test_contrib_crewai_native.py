"""stead.contrib.crewai over CrewAI's native OpenAI and Anthropic clients,
offline: the provider is an httpx `MockTransport` given to the SDK's client
(`http_client=`), answering the clerk's turns as JSON or, when the crew's
LLM streams, as server-sent events. A crew killed after its first tool ran
resumes without asking a recorded turn again; the SDK parses the recorded
answer on replay as it parsed it live. Skipped where CrewAI is missing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("crewai")


import stead
from stead.contrib import crewai as sc
from stead.records import RecordKind
from tests.helpers import crash_then_resume
from tests.workers import crewai_app
from tests.workers.crewai_native import Answer, anthropic_answer, native, openai_answer

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.filterwarnings("ignore:Items? .* the `ReadOnly` qualifier:UserWarning")]

@pytest.fixture(autouse=True)
def _folder(sdk_dir: Path) -> Path:
    return sdk_dir


@pytest.mark.parametrize("stream", [False, True], ids=["json", "streamed"])
@pytest.mark.parametrize(("provider", "answer"), [("openai", openai_answer),
                                                  ("anthropic", anthropic_answer)],
                         ids=["openai", "anthropic"])
async def test_a_native_clients_crew_killed_in_its_first_tool_asks_no_recorded_turn_again(
    fstore: stead.Store, clock: stead.FakeClock, provider: str, answer: Answer, stream: bool,
) -> None:
    llm = native(provider, answer, stream)
    app = stead.App(f"native-{provider}")
    lookup = crewai_app.dying_lookup()  # its worker dies after it ran, once

    @app.workflow(version=1)
    async def refund_order(run: stead.Run) -> str:
        crew = crewai_app.crew(lookup, llm=llm)
        return str((await sc.kickoff(run, crew, {"order_id": "123"})).raw)

    client = stead.Client(fstore, app)
    info = await client.start(refund_order)
    await crash_then_resume(app, fstore, clock)
    run = await client.get(info.run_id)
    assert run.status == "waiting", run.error  # for the refund's approval
    asked = "asked (streamed)" if stream else "asked"
    assert crewai_app.lines("model.log") == [asked, asked]  # the first turn asked once
    assert crewai_app.lines("tools.log") == ["lookup 123", "lookup 123"]
    models = [stead.Completion.from_json(json.loads(r.payload))
              for r in await client.journal(info.run_id)
              if r.kind == RecordKind.LLM and r.status == "ok"
              and json.loads(r.payload)["raw"]["http"]["status"] == 200]  # not the token counts
    assert [m.provider for m in models] == [provider, provider]
    assert models[0].usage.input_tokens == 30 and models[0].request_id in ("req_1", "req_s")
    if not stream:  # the tool calls, read from the answer as the SDK parsed it
        assert [[c.name for c in m.tool_calls] for m in models] == [["lookup_order"],
                                                                     ["refund"]]
    [w] = await client.waits(run_id=info.run_id)
    assert isinstance(await client.deliver(info.run_id, wait_id=w.wait_id, event_id="ok",
                                           payload={"approved": True},
                                           bind=json.loads(w.bind)), stead.Accepted)
    await stead.Worker(app, fstore).run_until_idle()
    assert await client.result(info.run_id) == "Refunded order 123: rf_123."
    assert crewai_app.lines("model.log") == [asked] * 3
    assert crewai_app.lines("ledger.log") == ["123 4200 refund-123"]
