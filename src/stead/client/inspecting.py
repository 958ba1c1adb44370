"""Reading runs from outside a worker: a run and its children, its result
(waited for), runs listed and searched, a run's journal, resumes, waits,
events, streams, task state, lineage, migrations, snapshots and intents."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterable
from typing import Any

from stead import bounds, errors, records, searches, tenants
from stead.client import listing
from stead.client.base import Base
from stead.client.info import RunInfo
from stead.records import MigrationRow, Record, ResumeRecord, RunStatus, WaitState
from stead.stream_records import StreamEntry
from stead.workflow import streams, workspaces
from stead.workflow.state import Facts


def _status(value: str) -> RunStatus:
    try:
        return RunStatus(value)
    except ValueError:
        raise errors.SteadError(
            f"unknown status {value!r}; one of: {', '.join(RunStatus)}") from None



def _waiting(timeout: float | None, poll: float) -> None:
    if timeout is not None:
        bounds.seconds(timeout, "timeout", zero=True)
    bounds.seconds(poll, "poll")



class Inspecting(Base):
    """What `Client` reads of runs; it changes nothing."""

    async def get(self, run_id: str) -> RunInfo:
        return RunInfo.from_row(await self.store.get_run(run_id))

    async def children(self, run_id: str, *, limit: int = 100) -> list[RunInfo]:
        """The runs `run_id` started with `run.child` (live or ended), oldest
        first. Raises `UnknownRun` if there is no such run."""
        bounds.integer(limit, "limit", least=1)
        await self.store.get_run(run_id)
        return [RunInfo.from_row(r) for r in await self.store.children(run_id, limit)]

    async def result(self, run_id: str, *, timeout: float | None = None,
                     poll: float = 0.05) -> Any:
        """Wait for the run to end; return its result or raise `RunFailed`."""
        _waiting(timeout, poll)

        async def wait() -> RunInfo:
            while True:
                info = await self.get(run_id)
                if info.done or info.status in records.STOPPED:
                    return info
                await asyncio.sleep(poll)

        info = await asyncio.wait_for(wait(), timeout)
        if info.status != RunStatus.COMPLETED:
            error = info.error or {}
            kind = (errors.DeadlineExceeded if error.get("type") == "DeadlineExceeded"
                    else errors.RunFailed)
            raise kind(run_id, info.status, error.get("message"))
        return info.result

    async def wait_for(
        self, run_id: str, statuses: str | Iterable[str], *,
        timeout: float | None = None, poll: float = 0.05,
    ) -> RunInfo:
        """Wait until the run is in one of `statuses` (`RunStatus` members or
        their values) and return it as it is then. Raises `StatusNotReached`
        after `timeout` seconds, or at once when the run ends in another status."""
        _waiting(timeout, poll)
        wanted = frozenset(
            _status(s) for s in ([statuses] if isinstance(statuses, str) else statuses))
        if not wanted:
            raise errors.SteadError("wait_for needs at least one status")
        shown = " or ".join(sorted(wanted))
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            info = await self.get(run_id)
            if info.status in wanted:
                return info
            if info.done:
                raise errors.StatusNotReached(run_id, shown, info.status,
                                              f"it ended as {info.status}")
            if deadline is not None and loop.time() >= deadline:
                raise errors.StatusNotReached(run_id, shown, info.status,
                                              f"still not there after {timeout} s")
            await asyncio.sleep(poll if deadline is None else
                                max(0.0, min(poll, deadline - loop.time())))

    async def list_runs(self, *, status: str | None = None, workflow: str | None = None,
                        limit: int = 100, stranded: bool = False,
                        grace: float = listing.STRANDED_AFTER,
                        tenant: str | None = None) -> list[RunInfo]:
        """Runs, newest first (with `tenant`: that tenant's alone). `stranded=True`:
        only runnable runs whose
        version no worker has served (hosted or migrated) for `grace`
        seconds, oldest first, each with `hosted_at`; their status is
        unchanged, and a worker serving the version takes them as any other."""
        return await listing.list_runs(self.store, status=status, workflow=workflow,
                                       limit=limit, stranded=stranded, grace=grace,
                                       tenant=tenant)

    async def lineage(self, run_id: str) -> records.Lineage:
        """Where the run came from (a fork of, or the successor of, another)
        and the runs that came from it."""
        await self.store.get_run(run_id)
        parent, children = await self.store.lineage(run_id)
        return records.Lineage(parent, tuple(children))

    async def backlog(self) -> list[records.Backlog]:
        """What workers could take, by `workflow@version` (see `Store.backlog`)."""
        return await self.store.backlog()

    async def wait(self, wait_id: str) -> records.WaitRow | None:
        """One wait, in any state (None: there is none by that id)."""
        return await self.store.get_wait(wait_id)

    async def waits(self, *, run_id: str | None = None, state: str | None = WaitState.OPEN,
                    limit: int = 100) -> list[records.WaitRow]:
        """Waits (by default the open ones), oldest first."""
        return await self.store.list_waits(run_id=run_id, state=state, limit=limit)

    async def events(self, run_id: str) -> list[records.EventRow]:
        """Every event delivered to the run, with its verdict."""
        return await self.store.list_events(run_id)

    def read_stream(self, run_id: str, name: str, *, after: int = 0,
                    poll: float = streams.POLL_SLOW) -> AsyncIterator[StreamEntry]:
        """The entries of the run's stream `name` after offset `after`, in
        order, as they are appended, until the stream is closed or the run
        ends (`async for entry in client.read_stream(run_id, "answer")`). To
        reconnect, pass the last offset seen: nothing is missed or seen twice.
        An entry of kind `superseded` says that the entries it names belong to
        a call's try that died or failed (see `stead.workflow.streams`)."""
        return streams.tail(self.store, run_id, name, after, poll=poll)

    async def search_runs(
        self, *, status: str | None = None, workflow: str | None = None,
        version: int | None = None, task_id: str | None = None, queue: str | None = None,
        tenant: str | None = None, since: float | None = None, until: float | None = None,
        text: str | None = None,
        after: searches.Cursor | None = None, limit: int = 100,
    ) -> list[RunInfo]:
        """Runs, newest first, filtered by each criterion given (`since`,
        `until`: creation time, epoch seconds; `text`: the start of a run id,
        a piece of a task id or workflow), after the run `after` names."""
        bounds.integer(limit, "limit", least=1)
        if version is not None:
            bounds.version(version)
        tenants.check(tenant)
        rows = await self.store.search_runs(searches.RunSearch(
            status=None if status is None else _status(status), workflow=workflow,
            version=version, task_id=task_id, queue=queue, tenant=tenant, since=since,
            until=until,
            text=text, after=after, limit=limit))
        return [RunInfo.from_row(r) for r in rows]

    async def count_runs(self) -> dict[RunStatus, int]:
        """How many runs are in each status."""
        return await self.store.count_runs()

    async def run_of_task(self, task_id: str) -> RunInfo | None:
        """The live run of `task_id`, if there is one."""
        row = await self.store.live_run_of_task(task_id)
        return None if row is None else RunInfo.from_row(row)

    async def state_history(self, task_key: str, limit: int = 100) -> list[records.StateRow]:
        """A task's facts as stored, newest version first, each with the run
        that wrote it and when (`updated_at`); the key of a run without a task
        is `run:RUN_ID`."""
        bounds.integer(limit, "limit", least=1)
        return await self.store.state_history(task_key, limit)

    async def task_state(self, task_id: str) -> Facts:
        """The current facts of a task (version 0 and no data if none yet)."""
        return Facts.from_row(await self.store.read_state(task_id))

    async def journal(self, run_id: str) -> list[Record]:
        await self.store.get_run(run_id)
        return await self.store.load_journal(run_id)

    async def journal_page(self, run_id: str, *, start: int = 0,
                           limit: int = 200) -> list[Record]:
        """At most `limit` of the run's records from seq `start` on, by seq."""
        return await self.store.journal_page(run_id, start, limit)

    async def journal_size(self, run_id: str) -> tuple[int, int]:
        """How many records the run's journal holds, and its last seq (-1: none)."""
        return await self.store.journal_size(run_id)

    async def resumes(self, run_id: str) -> list[ResumeRecord]:
        return await self.store.list_resumes(run_id)

    async def workers(self) -> list[records.HostRow]:
        """Each worker's last heartbeat per version it serves, latest first."""
        return await self.store.worker_hosts()

    async def migrations(self, run_id: str) -> list[MigrationRow]:
        """The migrations applied to the run (and rolled back), oldest first."""
        await self.store.get_run(run_id)
        return await self.store.list_migrations(run_id)

    async def archived_journal(self, run_id: str, migration: int) -> list[Record]:
        """The journal the run had before its migration number `migration`
        (kept, never replayed; `rollback` puts the last one back)."""
        await self.store.get_run(run_id)
        return await self.store.archived_journal(run_id, migration)

    async def snapshots(self, run_id: str) -> list[records.SnapshotRow]:
        """Every snapshot of the run's workspaces, in journal order."""
        await self.store.get_run(run_id)
        return await self.store.list_snapshots(run_id)

    async def restore_workspace(self, run_id: str, name: str, dest: str | os.PathLike[str],
                                *, seq: int | None = None) -> records.SnapshotRow:
        """Restore the latest snapshot of the run's workspace `name` (or the
        one saved at journal `seq`) into `dest`, a directory that must not
        exist yet; checked against its hash (`WorkspaceMismatch` if it does
        not match, leaving nothing behind). Returns the snapshot restored."""
        return await workspaces.restore_to(self.store, run_id, name, dest, seq)

    async def workspace_patch(self, run_id: str, name: str, *, seq: int | None = None
                              ) -> bytes:
        """The uncommitted patch (`git diff --binary HEAD`) the latest snapshot
        of the run's workspace `name` (or the one at journal `seq`) recorded:
        `git apply` it on that commit. `WorkspaceError` if it holds none."""
        return await workspaces.patch_of(self.store, run_id, name, seq)

    async def intents(self, run_id: str) -> list[records.IntentRow]:
        """Every version of the run's intent, oldest first, with who and why."""
        await self.store.get_run(run_id)
        return await self.store.list_intents(run_id)
