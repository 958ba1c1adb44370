"""Replay checks in pytest: what `stead replay-check` does, as functions a
test calls on exported histories (`stead runs export RUN > run.json`, or
`Client.export_run`).

    from stead.testing import assert_replays, check_migration

    def test_v2_interprets_production_histories():
        assert_replays(app, load_exports("tests/histories"))

    def test_refund_v1_to_v2(stored_v1_run):
        check_migration(app, stored_v1_run)      # migrated, then replayed by v2

    async def test_refund_v1_to_v2_in_an_async_test(stored_v1_run):
        await check_migration_async(app, stored_v1_run)

Both run the workflow dry: nothing is called, nothing is written.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Coroutine, Iterable
from pathlib import Path
from typing import Any, TypeVar

from stead import dryrun, errors
from stead.app import App
from stead.exports import StoredRun

T = TypeVar("T")


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` from sync code, or from a test already on an event loop: a
    dry replay touches no store and no loop of the caller's, so there it runs
    on a loop of its own in a thread, which the call waits for (the caller's
    loop is held meanwhile: an async test awaits the async twin instead,
    `replay_check` or `check_migration_async`)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="stead check") as pool:
        return pool.submit(asyncio.run, coro).result()


def load_exports(folder: str | Path) -> list[StoredRun]:
    """Every run export (*.json) in `folder`, sorted by file name."""
    return [StoredRun.read(p)
            for p in sorted(Path(folder).glob("*.json"))]


async def replay_check(app: App, runs: Iterable[StoredRun]) -> list[dryrun.Replayed]:
    """Replay each run dry against `app` (migrating it first where the app
    does not host its version but registers a migration)."""
    return await dryrun.replay_all(app, runs)


def assert_replays(app: App, runs: Iterable[StoredRun]) -> list[dryrun.Replayed]:
    """`replay_check`, failing the test with one line per run `app` cannot
    interpret (position, expected and actual call)."""
    results = _run(replay_check(app, runs))
    if any(r.finding is not None for r in results):
        raise AssertionError(dryrun.summary(results))
    return results


async def check_migration_async(app: App, stored: StoredRun, *, to: int | None = None
                                ) -> dryrun.Replayed:
    """The async form of `check_migration`."""
    path = dryrun.path_to(app, stored.run.workflow, stored.run.version, to)
    try:
        migrated, _ = dryrun.migrated(app, stored, path, "check_migration")
    except errors.MigrationRefused as exc:
        raise AssertionError(f"the migration of run {stored.run.run_id} is refused: {exc}"
                             ) from exc
    [replayed] = await dryrun.replay_all(app, [migrated])
    if replayed.finding is not None:
        raise AssertionError(
            f"after its migration to {migrated.code}, {replayed.finding.line()}: "
            f"{replayed.finding.message}")
    return replayed


def check_migration(app: App, stored: StoredRun, *, to: int | None = None) -> dryrun.Replayed:
    """Migrate `stored` with the migrations `app` registers from its version
    (up to `to`, default as far as they lead), in memory, then replay the
    migrated journal dry against the target version: nothing is called or
    written. Fails (AssertionError) if the migration is refused or the
    target version cannot interpret what it made; returns the replay."""
    return _run(check_migration_async(app, stored, to=to))
