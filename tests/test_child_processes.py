"""A child run is started exactly once across a SIGKILL of the parent's
worker at its start: just before the write that journals the child's id in
the parent (and creates the child, in the same transaction) commits, and
just after. Real processes (tests/workers/crash_worker.py), both stores."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

import stead
from tests.workers.procs import KILLED, SLOW, Workers

# Process-level, crash or long property tests: `pytest --full` (CI) runs them.
pytestmark = pytest.mark.slow


@pytest.fixture
async def store(workers: Workers) -> AsyncIterator[stead.Store]:
    s = await stead.open_store(workers.db_url)
    yield s
    await s.close()


async def _children(store: stead.Store, parent: str) -> list[stead.RunInfo]:
    runs = await stead.Client(store).list_runs(workflow="leaf", limit=1000)
    return [r for r in runs if r.parent_id == parent]


@pytest.mark.slow
@pytest.mark.parametrize("crash", ["before:1:leaf0", "after:1:leaf0"])
async def test_a_child_is_started_exactly_once_across_a_sigkill(
    workers: Workers, store: stead.Store, crash: str,
) -> None:
    client = stead.Client(store)
    run_id = (await client.start("family", 3, version=1)).run_id
    crashed = workers.start("--lease", "1.0", "--crash", crash)
    assert await workers.exit_code(crashed) == KILLED, workers.output(crashed)

    # Both or neither: each child that exists is journaled in the parent, and
    # each child journaled exists.
    at_crash = await store.load_journal(run_id)
    named = {json.loads(r.payload)["run_id"] for r in at_crash if r.kind == "child"}
    kids = await _children(store, run_id)
    assert named == {k.run_id for k in kids}
    assert ("leaf0" in {r.name for r in at_crash}) == crash.startswith("after")
    assert not any(k.done for k in kids)  # (the dead worker may have claimed one)

    fresh = workers.start("--lease", "1.0", "--until-done")
    assert await workers.exit_code(fresh) == 0, workers.output(fresh)
    assert await client.result(run_id, timeout=5 * SLOW) == [100, 101, 102]
    kids = await _children(store, run_id)
    assert len(kids) == 3 and {k.status for k in kids} == {"completed"}
    assert {k.run_id for k in kids} >= named  # the one started before the crash is kept
    assert workers.step_names(run_id) == {"leaf0": 1, "leaf1": 1, "leaf2": 1}
    journal = await store.load_journal(run_id)
    assert [r.seq for r in journal] == list(range(len(journal)))
    calls = [(r.addr, r.attempt, r.status) for r in journal]
    assert len(calls) == len(set(calls)), calls  # a child's start and its end, once each
    assert journal[: len(at_crash)] == at_crash
    assert sorted(r.status for r in journal if r.kind == "child") == ["ok"] * 3 + ["open"] * 3
