"""An export carries the conversation its run's model calls sent: `runs
export` → `runs import` shows the same turns with `runs show
--conversation`, sealed in the export when encryption is on, and `db prune
--export` keeps it too; an export's parts are checked at the door. On both
stores."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import stead
from stead.cli import main
from stead.conversations import transcript
from stead.exports import StoredRun
from stead.records import RunExport
from tests.test_conversations import SYSTEM, _agent_run, _whole

EMAIL = "alice@example.com"


def _shown(db_url: str, run_id: str) -> list[Any]:
    out = CliRunner().invoke(main, ["--db", db_url, "runs", "show", run_id,
                                    "--conversation", "--json"])
    assert out.exit_code == 0, out.output
    shown: list[Any] = json.loads(out.output)
    return shown


async def _prune(store: stead.Store, run_id: str) -> list[RunExport]:
    exported: list[RunExport] = []
    report = await stead.prune(store, 1.0, now=store.clock.now() + 10, export=exported.extend)
    assert report.deleted == 1 and [r.run.run_id for r in exported] == [run_id]
    assert await store.conversation_parts(run_id) == {}
    return exported


def test_export_then_import_shows_the_same_conversation(db_url: str, tmp_path: Path) -> None:
    run_id = _agent_run(db_url, 3)
    before = _shown(db_url, run_id)
    assert [c["kept"] for c in before] == ["kept"] * 4
    out = CliRunner().invoke(main, ["--db", db_url, "runs", "export", run_id])
    assert out.exit_code == 0, out.output
    (tmp_path / "run.json").write_text(out.output)
    # 2 messages, then 2 more each turn (assistant, tool), and the parameters once.
    assert len(json.loads(out.output)["conversation"]) == 2 + 2 * 3 + 1

    async def prune() -> list[RunExport]:
        store = await stead.open_store(db_url)
        try:
            return await _prune(store, run_id)
        finally:
            await store.close()

    pruned = asyncio.run(prune())
    # `db prune --export` carries them as well.
    assert len(pruned[0].conversation) == 9
    assert pruned[0].to_json()["conversation"][0].keys() == {"name", "parent", "body"}
    done = CliRunner().invoke(main, ["--db", db_url, "runs", "import",
                                     str(tmp_path / "run.json")])
    assert done.exit_code == 0, done.output
    after = _shown(db_url, run_id)
    assert after == before
    assert after[0]["new"][0] == SYSTEM


@pytest.mark.parametrize("sealed", [True, False], ids=["encrypted", "clear"])
async def test_a_sealed_export_carries_the_conversation_sealed(db_url: str,
                                                               sealed: bool) -> None:
    store = await stead.open_store(db_url, payloads=sealed)
    try:
        app = stead.App("sealed")
        model = stead.ScriptedModel(["noted", "again"])

        @app.workflow(version=1)
        async def ask(run: stead.Run) -> str:
            messages: list[Any] = [{"role": "user", "content": f"I am {EMAIL}"}]
            said = await run.llm("ask", model, messages, user=EMAIL)
            messages += [{"role": "assistant", "content": said.text},
                         {"role": "user", "content": "and?"}]
            return (await run.llm("ask", model, messages, user=EMAIL)).text

        client = stead.Client(store, app)
        info = await client.start(ask, task_id="cust-1")
        await stead.Worker(app, store).run_until_idle()
        before = await transcript.read(store, info.run_id)
        exported = await store.export_json(await client.export_run(info.run_id))
        text = json.dumps(exported)
        assert len(exported["conversation"]) == 4
        assert (EMAIL in text) is not sealed
        await _prune(store, info.run_id)
        opened = await store.open_export(exported)
        await client.import_run(StoredRun.from_json(opened))
        after = await transcript.read(store, info.run_id)
        assert [c.kept for c in after] == [transcript.Kept.YES] * 2
        assert _whole(after) == _whole(before)
        assert after[1].params == {"user": EMAIL}
    finally:
        await store.close()


def _export_with(parts: list[Any]) -> dict[str, Any]:
    run = {"run_id": "r1", "workflow": "w", "version": 1, "task_id": None,
           "status": "pending", "input": '{"args": [], "kwargs": {}}', "result": None,
           "error": None, "epoch": 0, "lease_owner": None, "lease_expires_at": None,
           "created_at": 1.0, "updated_at": 1.0}
    return {"format": "stead.run/1", "run": run, "journal": [], "waits": [], "state": None,
            "conversation": parts}


@pytest.mark.parametrize(("part", "said"), [
    ({"name": "x" * 32, "parent": None, "body": "{}"}, "not 32 hex characters"),
    ({"name": "a" * 32, "parent": "b" * 31, "body": "{}"}, "parent is"),
    ({"name": "a" * 32, "parent": None, "body": "{not json"}, "body is not JSON"),
    ({"name": "a" * 32, "parent": None}, "lacks ['body']"),
    ({"name": "a" * 32, "parent": None, "body": "{}", "more": 1}, "unknown fields"),
    ("a part", "is str, not an object"),
])
def test_an_exports_conversation_is_checked(part: Any, said: str) -> None:
    with pytest.raises(stead.errors.InvalidInput, match=r"conversation part 0") as caught:
        StoredRun.from_json(_export_with([part]))
    assert said in str(caught.value)


def test_a_part_named_twice_is_refused_and_an_export_without_parts_still_reads() -> None:
    part = {"name": "a" * 32, "parent": None, "body": '{"role": "user"}'}
    with pytest.raises(stead.errors.InvalidInput, match="part 1 repeats name"):
        StoredRun.from_json(_export_with([part, part]))
    data = _export_with([])
    del data["conversation"]
    stored = StoredRun.from_json(data)
    assert stored.conversation == () and "conversation" not in stored.to_json()
    assert StoredRun.from_json(_export_with([part])).conversation[0].body == '{"role": "user"}'
