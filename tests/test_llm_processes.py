"""Each SDK adapter's two-tool agent in real worker processes: SIGKILLed once
its first tool's result is durable, finished by a fresh worker with no new
request for the recorded turn, no tool run twice, and each turn's typed
response equal to the SDK's own parse of it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import stead
from stead.records import RecordKind
from tests import sdk_agents
from tests.sdk_agents import PROVIDERS
from tests.workers.agent_worker import app
from tests.workers.procs import KILLED, check_journal

# Process-level, crash or long property tests: `pytest --full` (CI) runs them.
pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).with_name("workers") / "agent_worker.py"
ROOT = Path(__file__).parent.parent


def _worker(db_url: str, tmp: Path, *extra: str) -> int:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--db", db_url, "--http-log", str(tmp / "http.log"),
         "--tool-log", str(tmp / "tools.log"), *extra],
        env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, timeout=60)
    assert proc.returncode in (0, KILLED), proc.stdout.decode() + proc.stderr.decode()
    return proc.returncode


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.slow
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_killed_agent_resumes_without_asking_or_acting_again(
        provider: str, db_url: str, tmp_path: Path) -> None:
    store = await stead.open_store(db_url)
    try:
        client = stead.Client(store, app)
        info = await client.start("agent", provider)
        assert _worker(db_url, tmp_path, "--crash-after-tool", "get_weather") == KILLED
        assert _lines(tmp_path / "tools.log") == ["get_weather Paris"]
        assert len(_lines(tmp_path / "http.log")) == 1
        assert _worker(db_url, tmp_path) == 0
        assert await client.result(info.run_id) == "It is 18 C and 14:05 in Paris."
        # The fresh worker asked only for the turn the journal did not hold.
        assert len(_lines(tmp_path / "http.log")) == 2
        assert _lines(tmp_path / "tools.log") == ["get_weather Paris", "get_time Paris"]
        journal = await client.journal(info.run_id)
        check_journal(journal)
        completions = [stead.Completion.from_json(json.loads(r.payload))
                       for r in journal if r.kind == RecordKind.LLM]
        for completion, original in zip(completions, await sdk_agents.originals(provider),
                                        strict=True):
            assert sdk_agents.typed(provider, completion) == original
        [resume] = await client.resumes(info.run_id)
        assert resume.epoch == 2 and resume.reused == 2
    finally:
        await store.close()


@pytest.mark.slow
async def test_a_takeover_span_links_to_the_attempt_a_sigkill_cut_short(
        sqlite_url: str, tmp_path: Path) -> None:
    store = await stead.open_store(sqlite_url)
    try:
        client = stead.Client(store, app)
        info = await client.start("agent", "openai_chat")
        spans = tmp_path / "spans.jsonl"
        assert _worker(sqlite_url, tmp_path, "--crash-after-tool", "get_weather",
                       "--spans", str(spans)) == KILLED
        assert _worker(sqlite_url, tmp_path, "--spans", str(spans)) == 0
        journal = await client.journal(info.run_id)
    finally:
        await store.close()
    first, second = (json.loads(r.payload)["span_id"] for r in journal
                     if r.kind == RecordKind.TRACE)
    found = [json.loads(line) for line in _lines(spans)]
    # The killed attempt's own span never ended, but what it exported names it as
    # parent: the span context its trace record kept is that attempt's.
    done_before_kill = [s for s in found if s["parent"] == first]
    assert {s["name"] for s in done_before_kill} == {"chat gpt-4o-mini",
                                                      "stead.step tool:get_weather"}
    [attempt] = [s for s in found if s["name"].startswith("stead.run")]
    assert attempt["span_id"] == second and attempt["links"] == [first]
    assert attempt["attributes"]["stead.run.epoch"] == 2
    # The takeover asked only for the second turn: one model span, after the link.
    assert [s["name"] for s in found if s["parent"] == second].count("chat gpt-4o-mini") == 1
