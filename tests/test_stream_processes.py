"""Durable streams across a real SIGKILL, on both stores: a worker dies in
the middle of a model's streamed answer, a fresh worker process makes the
call again, and a reader that reconnects from its offset sees every entry
once, in order: the partial answer, the note that it was superseded, the
new answer, the end."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

import stead
from tests.workers.procs import DEADLINE, KILLED
from tests.workers.stream_worker import WORDS, answer, app

# Process-level, crash or long property tests: `pytest --full` (CI) runs them.
pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).with_name("workers") / "stream_worker.py"
ROOT = Path(__file__).parent.parent


def _start(db_url: str, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, str(SCRIPT), "--db", db_url, *extra], stdout=out,
            stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(ROOT)})


async def _read(client: stead.Client, run_id: str, after: int,
                until: int | None = None) -> list[stead.StreamEntry]:
    """Entries after `after`: `until` of them, or all until the stream ends."""
    got: list[stead.StreamEntry] = []
    async for entry in client.read_stream(run_id, "answer", after=after, poll=0.01):
        got.append(entry)
        if until is not None and len(got) == until:
            break
    return got


async def test_a_reader_sees_every_value_once_in_order_across_a_sigkill_mid_answer(
    db_url: str, tmp_path: Path,
) -> None:
    store = await stead.open_store(db_url)
    try:
        client = stead.Client(store, app)
        info = await client.start(answer, "what is it?")
        first = _start(db_url, tmp_path / "first.log", "--hang-after", "3")
        try:
            before = await asyncio.wait_for(_read(client, info.run_id, 0, until=3), DEADLINE)
        finally:
            first.kill()
        assert first.wait(DEADLINE) == KILLED
        # The reader was cut off with the worker; it reconnects from its offset.
        second = _start(db_url, tmp_path / "second.log")
        after = await asyncio.wait_for(_read(client, info.run_id, before[-1].offset), DEADLINE)
        assert second.wait(DEADLINE) == 0, (tmp_path / "second.log").read_text()

        seen = before + after
        assert [e.offset for e in seen] == list(range(1, len(seen) + 1))  # each once, in order
        assert [(e.kind, e.value) for e in seen] == [
            *[("value", w) for w in WORDS[:3]],
            ("superseded", {"call": "1", "offsets": [1, 3], "count": 3}),  # the call at address 1
            *[("value", w) for w in WORDS],
            ("closed", None),
        ]
        # A reader starting now sees the died try's deltas flagged.
        again = await _read(client, info.run_id, 0)
        assert [e.superseded for e in again] == [True] * 3 + [False] * (len(WORDS) + 2)
        assert await client.result(info.run_id, timeout=DEADLINE) == "".join(WORDS)
        # The status appended before the crash was replayed, not appended again.
        status = [e async for e in client.read_stream(info.run_id, "status")]
        assert [e.value for e in status] == ["thinking", "done", None]
    finally:
        await store.close()
