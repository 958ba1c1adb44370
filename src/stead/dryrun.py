"""Dry replays: a stored history replayed against the current code, writing
nothing and calling nothing, to learn before a deploy whether the new code
can interpret it (`stead replay-check`, `stead.testing.check_migration`).

The workflow runs on an `Execution` in dry mode: every call the journal
answers is replayed as a takeover would, and the first call it does not
answer (where a worker would go on live) ends the replay (`Frontier`). A run
the app does not host but can migrate is migrated in memory first, as the
version gate would. A finding says which run the code cannot interpret,
where (position and seq), and the call expected and the one made.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import Iterable
from typing import Any

from stead import errors, keys, takeover
from stead.app import App
from stead.clock import SystemClock
from stead.execution import Drain, Execution, ExecutionOptions, Frontier, Stop, exits
from stead.exports import StoredRun
from stead.migrations import Migration
from stead.records import Fence, FindingKind, MigrationPlan, Record, StaleCause
from stead.replay import Journal
from stead.run import Run
from stead.store import open_store
from stead.store.base import Store

# The store a dry replay's execution is handed (it never reads or writes it).
SCRATCH = "sqlite:///:memory:"

# Event loop turns without a replayed call after which sibling branches are
# taken as done replaying (they make no I/O in a dry replay).
_SETTLE_TURNS = 50


@dataclasses.dataclass(frozen=True)
class Finding:
    """A run the code cannot interpret, and why (`kind`)."""

    run_id: str
    code: str
    kind: FindingKind
    message: str
    addr: str | None = None
    seq: int | None = None
    expected: str | None = None
    actual: str | None = None

    def line(self) -> str:
        where = "" if self.addr is None and self.seq is None else (
            f" at position {self.addr or '?'}"
            + ("" if self.seq is None else f" (seq {self.seq})"))
        said = f": {self.message}" if self.expected is None else (
            f": expected {self.expected}, got {self.actual or 'nothing'}")
        return f"run {self.run_id} ({self.code}) {self.kind}{where}{said}"


@dataclasses.dataclass(frozen=True)
class Replayed:
    """What a dry replay of one run found: `finding` None means the code
    interprets the whole history; `reused` journal records were replayed,
    and `frontier` is where a worker would go on live (None: the workflow
    returned, or stopped on a recorded outcome). `changed_steps` names each
    step whose code changed since it was journaled and what a takeover does
    with it under the app's `changed_steps` ("step 'x' (seq 3) code a -> b:
    reused")."""

    run_id: str
    code: str
    finding: Finding | None
    reused: int
    frontier: str | None
    changed_steps: tuple[str, ...] = ()


def _keyring() -> keys.Keyring:
    # Replayed tokens are never revealed: a random key stands for the real
    # ones, so a history replays on a machine that has no keys.
    return keys.Keyring.from_secret(os.urandom(32))


async def _no_keys() -> keys.Keyring:
    return _keyring()


def _finding(stored: StoredRun, kind: FindingKind, message: str, **where: Any) -> Finding:
    return Finding(stored.run.run_id, stored.code, kind, message, **where)


def _migrated(app: App, stored: StoredRun) -> StoredRun | Finding:
    """The history as the version gate would make it for `app`."""
    row = stored.run
    try:
        app.get(row.workflow, row.version)
        return stored
    except errors.UnknownWorkflow as exc:
        path = app.migrations_path(row.workflow, row.version)
        if not path:
            return _finding(stored, FindingKind.UNHOSTED, f"{exc}, and no migration leads from "
                            f"{stored.code} to a version it hosts")
    try:
        return migrated(app, stored, path, "dry run")[0]
    except errors.MigrationRefused as exc:
        return _finding(stored, FindingKind.MIGRATION, str(exc))


def path_to(app: App, workflow: str, version: int, to: int | None) -> list[Migration]:
    """The migrations the app registers from `workflow@version` to `to`
    (None: as far as they go). `MigrationRefused` if none leads there."""
    path: list[Migration] = []
    while version != to:
        step = app.migration_from(workflow, version)
        if step is None or step in path:
            if to is None and path:
                break
            raise errors.MigrationRefused(
                f"app {app.name!r} registers no migration from {workflow}@{version}"
                + ("" if to is None else f" toward version {to}"))
        path.append(step)
        version = step.to_version
    if not path:
        raise errors.MigrationRefused(f"{workflow}@{version} is the version asked for already")
    return path


def migrated(app: App, stored: StoredRun, path: list[Migration], author: str
             ) -> tuple[StoredRun, list[MigrationPlan]]:
    """`stored` as `path` makes it, and the plans, written nowhere."""
    plans = []
    for migration in path:
        plan = takeover.plan_from(app, stored, migration, author)
        plans.append(plan)
        stored = takeover.planned(stored, plan)
    return stored, plans


async def replay(app: App, stored: StoredRun, store: Store) -> Replayed:
    """Replay `stored` against `app` without side effects. `store` is only
    handed to the execution (a dry one never reads or writes it): give a
    throwaway one, such as `sqlite:///:memory:`."""
    run_id, code = stored.run.run_id, stored.code
    target = _migrated(app, stored)
    if isinstance(target, Finding):
        return Replayed(run_id, code, target, 0, None)
    row = target.run
    wf = app.get(row.workflow, row.version)
    try:
        journal = Journal(row.run_id, target.journal)
        args, kwargs = takeover.decode_input(wf, row)
    except errors.CorruptRecord as exc:
        return Replayed(run_id, code, _finding(stored, FindingKind.CORRUPT, str(exc)), 0, None)
    x = Execution(
        store=store, fence=Fence(row.run_id, row.epoch, "dry-run"), journal=journal,
        clock=store.clock or SystemClock(), code_version=wf.key, takeover=False,
        options=ExecutionOptions(keyring=_no_keys, dry=True))
    x.matchers, x.tools, x.app_name = app.matchers, app.tools, app.name
    x.changed_steps = app.changed_steps
    body = x.start(wf.fn(Run(x, row), *args, **kwargs))
    try:
        await exits.unwrapped(body)
        returned = True
    # Where it would go live, stop for a person, or fail as it did before
    # (a failure the journal recorded replays as the same error): the replay ends.
    except (Frontier, Stop, Drain, Exception):
        returned = False
    # Branches of a gather may still be replaying: let them reach their end.
    seen, quiet = journal.reused, 0
    while quiet < _SETTLE_TURNS:
        await asyncio.sleep(0)
        quiet = quiet + 1 if journal.reused == seen else 0
        seen = journal.reused
    finding = _judge(stored, x, journal, returned)
    changed = tuple(f"step {e['call']!r} (seq {e['seq']}) {'; '.join(e['changed'])}: {e['done']}"
                    for e in x.reran if e.get("cause") == StaleCause.CODE)
    return Replayed(run_id, code, finding, journal.reused, x.frontier, changed)


def _judge(stored: StoredRun, x: Execution, journal: Journal, returned: bool
           ) -> Finding | None:
    bad = x.incompatible
    if bad is not None:
        return _finding(stored, FindingKind.INCOMPATIBLE, str(bad), addr=bad.addr, seq=bad.seq,
                        expected=bad.expected, actual=bad.actual)
    left = journal.untaken()
    if not left:
        return None
    first: Record = left[0]
    actual = "the workflow returned" if returned else (
        f"{x.frontier} (live)" if x.frontier else "nothing more")
    return _finding(
        stored, FindingKind.INCOMPATIBLE,
        f"run {stored.run.run_id}: the code no longer makes {len(left)} journaled call(s), "
        f"first {first.kind} {first.name!r} at seq {first.seq}",
        addr=first.addr, seq=first.seq, expected=f"{first.kind} {first.name!r}", actual=actual)


async def replay_all(app: App, runs: Iterable[StoredRun]) -> list[Replayed]:
    """`replay` each of `runs`, one after the other, on a throwaway store."""
    scratch = await open_store(SCRATCH)
    try:
        return [await replay(app, stored, scratch) for stored in runs]
    finally:
        await scratch.close()



def summary(results: list[Replayed]) -> str:
    """One line per run the code cannot interpret, then a count."""
    bad = [r.finding for r in results if r.finding is not None]
    lines = [f.line() for f in bad]
    lines += [f"run {r.run_id} ({r.code}): {c}" for r in results for c in r.changed_steps]
    lines.append(f"{len(results)} run(s) replayed, {len(bad)} the code cannot interpret")
    return "\n".join(lines)
