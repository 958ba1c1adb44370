"""`Client`: what is done to runs from outside a worker. Start them; read their
status, result, journal, waits and events; list, cancel, retry and reconcile
them; deliver events to their waits."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import json
import os
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import Any

from stead import (
    bounds,
    codec,
    dryrun,
    errors,
    forks,
    inputs,
    queues,
    records,
    revisions,
    searches,
    streams,
    takeover,
    waits,
    workspaces,
)
from stead.app import App, Workflow
from stead.exports import StoredRun
from stead.intent import Grant, Intent
from stead.records import (
    MigrationRow,
    Record,
    RecordKind,
    RecordStatus,
    ResumeRecord,
    RunRow,
    RunStatus,
    WaitState,
)
from stead.starts import Start
from stead.state import Facts
from stead.store.base import Store
from stead.stream_records import StreamEntry


@dataclasses.dataclass(frozen=True)
class RunInfo:
    """What a client sees of a run."""

    run_id: str
    workflow: str
    version: int
    task_id: str | None
    status: RunStatus
    epoch: int
    created_at: float
    updated_at: float
    lease_owner: str | None
    result: Any = None
    error: dict[str, Any] | None = None
    created: bool = False
    lease_expires_at: float | None = None
    # Listed as stranded (`list_runs(stranded=True)`): no live worker serves
    # its version; `hosted_at` is when one last did (None: none ever did).
    stranded: bool = False
    hosted_at: float | None = None
    parent_id: str | None = None  # the run that started this one (`run.child`)
    deadline: float | None = None
    cancel_requested: bool = False  # asked to stop at its next call boundary
    queue: str | None = None
    priority: int = 0
    # The arguments it was started with, as stored: {"args": [...], "kwargs": {...}}.
    input: Any = None

    @property
    def code(self) -> str:
        return f"{self.workflow}@{self.version}"

    @property
    def done(self) -> bool:
        return self.status in records.TERMINAL

    @property
    def outcome_unknown(self) -> records.UnknownOutcome | None:
        """For a run stopped as `outcome_unknown`: the effect it stopped on and
        what is known of it (decide it with `reconcile`); otherwise None."""
        if self.status != RunStatus.OUTCOME_UNKNOWN or not isinstance(self.error, dict):
            return None
        return records.UnknownOutcome.from_error(self.error)

    @classmethod
    def from_row(cls, row: RunRow, *, created: bool = False) -> RunInfo:
        return cls(
            run_id=row.run_id, workflow=row.workflow, version=row.version,
            task_id=row.task_id, status=row.status, epoch=row.epoch,
            created_at=row.created_at, updated_at=row.updated_at,
            lease_owner=row.lease_owner,
            result=None if row.result is None else _loads(row.result, row.run_id),
            error=None if row.error is None else _loads(row.error, row.run_id),
            created=created, lease_expires_at=row.lease_expires_at,
            parent_id=row.parent_id, deadline=row.deadline,
            cancel_requested=row.cancel_requested is not None, queue=row.queue,
            priority=row.priority, input=_loads(row.input, row.run_id),
        )


def _loads(text: str, run_id: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return {"type": "CorruptRecord", "message": f"run {run_id}: stored value is not JSON"}


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


def _unknown_effect(journal: list[Record], run_id: str, effect: str) -> Record:
    """The last record of the effect named (or keyed) `effect` whose outcome is
    unknown: intent, accepted or unknown is its last phase."""
    last: dict[str, Record] = {}
    keys: dict[str, str] = {}
    for r in journal:
        if r.kind != RecordKind.EFFECT:
            continue
        last[r.addr] = r
        if r.status == RecordStatus.INTENT:
            keys[r.addr] = str(_loads(r.payload, run_id).get("key", ""))
    # A reconciled effect is open again only while its run is stopped on it
    # (the decided result did not fit): resume_stopped checks that status.
    open_phases = (RecordStatus.INTENT, RecordStatus.ACCEPTED, RecordStatus.UNKNOWN,
                   RecordStatus.RECONCILED)
    found = [
        r for addr, r in last.items()
        if r.status in open_phases and effect in (r.name, keys.get(addr))
    ]
    if not found:
        raise errors.NotStopped(
            f"run {run_id} has no effect {effect!r} whose outcome is unknown"
        )
    if len(found) > 1:
        raise errors.SteadError(
            f"run {run_id} has {len(found)} effects named {effect!r} with unknown "
            f"outcomes; name one by its key: {', '.join(keys.get(r.addr, '?') for r in found)}"
        )
    return found[0]


# Stops that are stead's decision, not the workflow's: `retry` may undo them.
RETRYABLE = records.STOPPED - {RunStatus.PAUSED}  # a paused run is resumed, with who and why
# Failures that were the store's, not the workflow's (stead no longer fails a
# run for them: it leaves the run to be taken over).
_STORE_FAILURES = frozenset({"StoreError", "StoreUnavailable", "DatabaseMissing"})


def _failed_by_store(info: RunInfo) -> bool:
    return (info.status == RunStatus.FAILED and isinstance(info.error, dict)
            and info.error.get("type") in _STORE_FAILURES)


def _status(value: str) -> RunStatus:
    try:
        return RunStatus(value)
    except ValueError:
        raise errors.SteadError(
            f"unknown status {value!r}; one of: {', '.join(RunStatus)}") from None


# A runnable run no worker has served for this long is stranded (seconds).
STRANDED_AFTER = 60.0


@dataclasses.dataclass(frozen=True)
class MigrationReport:
    """What `Client.migrate` did or, with `dry_run`, would do: the versions,
    the journal's length before and after, the new input, and how the target
    version replays the migrated journal (`replay`, a dry replay: its
    `finding` is None when the code interprets all of it). `applied` are
    the stored migrations (empty for a dry run)."""

    run_id: str
    from_version: int
    to_version: int
    records_before: int
    records_after: int
    new_input: Any
    replay: dryrun.Replayed
    applied: tuple[MigrationRow, ...] = ()

    @property
    def ok(self) -> bool:
        return self.replay.finding is None


# What a client accepts of an event, by default: its payload and bound values
# as JSON, and each of its ids.
MAX_EVENT_BYTES = 256 * 1024
MAX_ID_CHARS = 256


class Client:
    """`max_event_bytes` caps an event's payload and bound values (as JSON);
    `lock_wait_after` bad tokens lock a wait (see `unlock_wait`)."""

    def __init__(self, store: Store, app: App | None = None, *,
                 max_event_bytes: int = MAX_EVENT_BYTES,
                 lock_wait_after: int = waits.LOCK_AFTER_BAD_TOKENS) -> None:
        if max_event_bytes < 1 or lock_wait_after < 1:
            raise ValueError("max_event_bytes and lock_wait_after must be at least 1")
        self.store = store
        self.app = app
        self.max_event_bytes = max_event_bytes
        self.lock_wait_after = lock_wait_after

    async def start(
        self,
        workflow: Workflow[Any, Any] | str,
        *args: Any,
        task_id: str | None = None,
        version: int | None = None,
        intent: Intent | None = None,
        deadline: dt.timedelta | float | None = None,
        queue: str | None = None,
        priority: int | None = None,
        dedup_key: str | None = None,
        **kwargs: Any,
    ) -> RunInfo:
        """Start a run of `workflow` with these arguments. With a `task_id`, a
        live run of that task is returned instead of starting a second one.
        `intent` is stored with the run as its intent's version 1 (grants with
        `expires_in` count from now). With a `queue` (declared by the app,
        `app.queue`), workers claim the run under the queue's limits, by
        `priority` (lower first; the queue must allow priorities); a live run
        of the queue holding the same `dedup_key` is returned instead. A run
        not ended `deadline` (seconds, or a timedelta) from now fails
        (`DeadlineExceeded`) at its next call boundary, a waiting one as the
        deadline passes."""
        new = self._new_run(Start(workflow, args, kwargs, task_id=task_id, version=version,
                                  queue=queue, priority=priority, dedup_key=dedup_key,
                                  intent=intent, deadline=deadline))
        row, created = await self.store.create_run(new)
        if not created and row.task_id == new.task_id and row.workflow != new.workflow:
            raise errors.SteadError(records.task_taken(new, row))
        return RunInfo.from_row(row, created=created)

    async def start_many(
        self, runs: Iterable[Start], *, batch: int = 1000,
    ) -> list[RunInfo]:
        """Start many runs, each a `Start` (the arguments of `start`), in one
        transaction per `batch` runs: a run, in order, for each (the live run
        of its task or dedup key, `created` False, if there is one). Every item
        is checked before anything is written: one that does not fit raises
        `InvalidStart` naming it, and nothing is started; a batch is stored
        whole or not at all."""
        if batch < 1:
            raise ValueError("batch must be at least 1")
        news = []
        for index, item in enumerate(runs):
            where = f"start #{index}"
            if not isinstance(item, Start):
                raise errors.InvalidStart(f"{where}: start_many takes stead.Start items, "
                                          f"not {type(item).__name__}")
            try:
                news.append(self._new_run(item))
            except errors.SteadError as exc:
                raise errors.InvalidStart(
                    f"{item.where or where}: {exc}; nothing was started") from exc
        infos: list[RunInfo] = []
        for at in range(0, len(news), batch):
            chunk = news[at:at + batch]
            made = await self.store.create_runs(chunk)
            infos += [RunInfo.from_row(row, created=created) for row, created in made]
        return infos

    def _new_run(self, start: Start) -> records.NewRun:
        """The run `start` asks for, checked: its workflow and arguments, its
        intent, its queue, priority and dedup key."""
        intent = start.intent
        seconds = None if start.deadline is None else bounds.seconds(start.deadline,
                                                                     "a run's deadline")
        if intent is not None and not isinstance(intent, Intent):
            raise errors.InvalidIntent("intent= takes a stead.Intent (see Intent.from_json)")
        if intent is not None and self.app is not None:
            self.app.check_intent(intent)
        wf: Workflow[Any, Any] | None = None
        workflow, version = start.workflow, start.version
        if version is not None:
            bounds.version(version)
        if isinstance(workflow, str):
            bounds.text(workflow, "a workflow name")
            if self.app is not None:
                wf = self.app.get(workflow, version)
                name, wf_version = wf.name, wf.version
            elif version is None:
                raise errors.UnknownWorkflow(
                    f"cannot start {workflow!r} by name without an app or an explicit version"
                )
            else:
                name, wf_version = workflow, version
        else:
            wf = workflow
            name, wf_version = workflow.name, workflow.version
        task_id = start.task_id
        bounds.optional_text(task_id, "a task_id")
        if isinstance(task_id, str) and not task_id.strip():
            raise errors.InvalidInput(
                f"task_id {task_id!r} is empty: give a business key (e.g. order-123), "
                "or no task_id at all"
            )
        self._check_queue(start)
        payload = inputs.encode(start.args, start.kwargs, workflow=name)
        if wf is not None:
            inputs.check(wf, payload)
        return records.NewRun(
            run_id=uuid.uuid4().hex, workflow=name, version=wf_version,
            task_id=task_id, input=payload,
            intent=None if intent is None else intent.anchored(self.store.clock.now()).dumps(),
            intent_why=(intent.reason if intent is not None and intent.reason
                        else "given at start"),
            intent_by=revisions.author(None) if intent is not None else "client",
            deadline=None if seconds is None else self.store.clock.now() + seconds,
            queue=start.queue, priority=start.priority or 0, dedup_key=start.dedup_key,
        )

    def _check_queue(self, start: Start) -> None:
        """A queue the app declares (any name without an app), a priority only
        in a queue that allows them, a dedup key only in a queue."""
        queue, priority, dedup = start.queue, start.priority, start.dedup_key
        if queue is not None and not queues.is_name(queue):
            raise errors.InvalidInput(f"queue= takes a queue's name (an identifier-like "
                                      f"word), not {queue!r}")
        if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
            raise errors.InvalidInput(f"priority= takes an integer (lower first), not {priority!r}")
        if priority is not None:
            bounds.integer(priority, "priority=", least=-bounds.MAX_INT32, most=bounds.MAX_INT32)
        if dedup is not None and (not isinstance(dedup, str) or not dedup.strip()):
            raise errors.InvalidInput(f"dedup_key= takes a non-empty string, not {dedup!r}")
        bounds.optional_text(dedup, "dedup_key=")
        if queue is None:
            if priority is not None or dedup is not None:
                raise errors.InvalidInput(
                    "priority= and dedup_key= need a queue= (without a queue, task_id= "
                    "returns the live run of a task)")
            return
        if self.app is None:
            return
        declared = self.app.get_queue(queue)
        if priority is not None and not declared.priority:
            raise errors.InvalidInput(
                f"queue {queue!r} takes no priorities: declare it with "
                f"app.queue({queue!r}, priority=True)")

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
                        grace: float = STRANDED_AFTER) -> list[RunInfo]:
        """Runs, newest first. `stranded=True`: only runnable runs whose
        version no worker has served (hosted or migrated) for `grace`
        seconds, oldest first, each with `hosted_at`; their status is
        unchanged, and a worker serving the version takes them as any other."""
        bounds.integer(limit, "limit", least=1)
        bounds.seconds(grace, "grace", zero=True)
        if stranded:
            found = await self.store.stranded_runs(grace, limit, workflow)
            return [dataclasses.replace(RunInfo.from_row(s.run), stranded=True,
                                        hosted_at=s.hosted_at) for s in found]
        if status is not None:
            try:
                status = RunStatus(status)
            except ValueError:
                raise errors.SteadError(
                    f"unknown status {status!r}; one of: {', '.join(RunStatus)}"
                ) from None
        rows = await self.store.list_runs(status=status, workflow=workflow, limit=limit)
        return [RunInfo.from_row(r) for r in rows]

    async def cancel(self, run_id: str) -> RunInfo:
        """Cancel a live run and its live child runs. A running run stops at
        its next call boundary (`RunInfo.cancel_requested` until then), in
        the worker that holds it or the one that takes it over, after an
        effect in flight has its outcome journaled; any other live run
        (pending, waiting, stopped for a person) is cancelled at once."""
        return RunInfo.from_row(await self.store.request_cancel(run_id))

    async def reconcile(
        self,
        run_id: str,
        effect: str,
        *,
        happened: Any = MISSING,
        not_happened: bool = False,
        compensate: Any = MISSING,
        by: str,
        why: str = "",
    ) -> RunInfo:
        """Decide the outcome of an effect that stopped its run as
        `outcome_unknown`: it `happened` (with this result), it did
        `not_happened` (send it), or it was compensated (`compensate=` what was
        done; the workflow sees `EffectCompensated`). The decision is journaled
        with who made it and why, and the run continues from it."""
        chosen = [happened is not MISSING, not_happened, compensate is not MISSING]
        if sum(chosen) != 1:
            raise errors.SteadError(
                "give exactly one decision: happened=RESULT, not_happened=True or "
                "compensate=DETAIL"
            )
        if not by:
            raise errors.SteadError("say who decides (by=...): the decision is audited")
        target = _unknown_effect(await self.journal(run_id), run_id, effect)
        if happened is not MISSING:
            payload = {"decision": "happened", "result": happened}
        elif not_happened:
            payload = {"decision": "not_happened", "result": None}
        else:
            payload = {"decision": "compensate", "result": compensate}
        payload |= {"by": by, "why": why}
        text = codec.dumps(payload, what="the reconcile decision")
        # One record per (address, attempt, phase): a second decision on the
        # same attempt takes the next attempt number.
        attempt = target.attempt + 1 if target.status == RecordStatus.RECONCILED else target.attempt
        record = target.evolve(status=RecordStatus.RECONCILED, payload=text, attempt=attempt)
        row = await self.store.resume_stopped(run_id, RunStatus.OUTCOME_UNKNOWN, record)
        return RunInfo.from_row(row)

    async def fork(self, run_id: str, *, at: int) -> RunInfo:
        """Start a new run whose journal is the first `at` records of run
        `run_id`'s (0: none, the journal's length: all of it): it replays them
        and goes on live from there, as a new run (its own task state, as the
        prefix last saw it; its own waits and effect keys; the intent in
        force). Refused with `ForkRefused` past an effect whose outcome the
        prefix does not know. The link is kept on both runs (`lineage`)."""
        bounds.integer(at, "at (a journal position)")
        parent = await self.store.get_run(run_id)
        journal = await self.store.load_journal(run_id)
        kept = forks.prefix(run_id, journal, at)
        opened: dict[str, records.WaitRow] = {}
        for rec in forks.unresolved_waits(kept):
            wait_id = str(codec.loads(rec.payload)["wait_id"])
            row = await self.store.get_wait(wait_id)
            if row is not None:
                opened[wait_id] = row
        version = forks.state_seen(kept)
        state = None
        if version > 0:
            state = await self.store.state_version(forks.task_key(parent), version)
            if state is None:
                raise errors.CorruptRecord(
                    f"run {run_id}: version {version} of its task state, which its journal "
                    "saw, is not in the task's history; it cannot be forked there")
        ring = await self.store.keyring() if opened else None
        plan = forks.plan(parent, kept, journal[at:], ring=ring, opened=opened, state=state,
                          intent=await self.store.latest_intent(run_id),
                          now=self.store.clock.now())
        return RunInfo.from_row(await self.store.fork_run(plan), created=True)

    async def lineage(self, run_id: str) -> records.Lineage:
        """Where the run came from (a fork of, or the successor of, another)
        and the runs that came from it."""
        await self.store.get_run(run_id)
        parent, children = await self.store.lineage(run_id)
        return records.Lineage(parent, tuple(children))

    async def retry(self, run_id: str) -> RunInfo:
        """Let a run that stead stopped be claimed again: one stopped as
        `incompatible_checkpoint` (once code that fits its journal is
        deployed), one stopped as `outcome_unknown` (its `check` is asked
        again; an effect with neither check nor idempotency stops it again), or
        one that failed on a store error rather than on the workflow's own
        exception. Nothing in the journal changes. A run the workflow itself
        failed, completed or cancelled is refused with `NotStopped`."""
        info = await self.get(run_id)
        if info.status not in RETRYABLE and not _failed_by_store(info):
            raise errors.NotStopped(
                f"run {run_id} is {info.status}"
                + (f" ({(info.error or {}).get('type', 'Error')} raised by the workflow)"
                   if info.status == RunStatus.FAILED else "")
                + (": a paused run is decided with resume or terminate (stead runs resume "
                   "RUN --by WHO --why WHY)" if info.status == RunStatus.PAUSED else
                   ": only a run stead stopped (incompatible_checkpoint, outcome_unknown, "
                   "or failed on a store error) can be retried; start a new run instead")
            )
        try:
            row = await self.store.resume_stopped(run_id, info.status, None)
        except errors.StoreError as exc:
            if info.status != RunStatus.FAILED or info.task_id is None:
                raise
            # A failed run gave its task up: another run of the task may be live now.
            raise errors.StoreError(
                f"could not retry run {run_id} ({exc}); if task {info.task_id!r} has "
                "a live run now, let it end or cancel it first"
            ) from exc
        return RunInfo.from_row(row)

    # -- events and waits -----------------------------------------------------
    async def deliver(
        self,
        run_id: str,
        *,
        event_id: str,
        payload: Any = None,
        wait_id: str | None = None,
        kind: str | None = None,
        bind: dict[str, Any] | None = None,
        token: str | None = None,
        task_id: str | None = None,
        operator: waits.Operator | None = None,
    ) -> waits.Delivery:
        """Deliver an event to the wait `wait_id` (or the open wait of `kind`) of
        `run_id`. It is stored whatever the verdict; the check against the wait's
        resume contract and the consumption of the wait are one transaction.
        Returns `Accepted`, `Duplicate` (this event_id was delivered before:
        nothing happens twice) or `Rejected(reason, detail)`.

        A wait bound to `policy_version` is also compared with the current
        policy version of this client's app (`Rejected(policy_changed)`, naming
        both, if they differ); a client without an app cannot know it, and
        compares the event's value with the wait's copy only.

        `task_id` (the business key the sender knows the run by) must be the
        run's task: otherwise `TaskMismatch` is raised and nothing is stored.

        `operator=Operator(by, why)` delivers in place of the token (the
        dashboard, a signed webhook): every other check applies, and who and
        why are stored with the event."""
        if operator is not None and token is not None:
            raise errors.InvalidInput("an event comes with the wait's token or from an "
                                      "operator, not both")
        if not event_id or not isinstance(event_id, str):
            raise errors.SteadError("an event needs an event_id (it is what makes "
                                    "redelivery safe)")
        for what, value in (("run_id", run_id), ("event_id", event_id), ("wait_id", wait_id),
                            ("kind", kind), ("token", token), ("task_id", task_id)):
            bounds.optional_text(value, f"the event's {what}")
            if isinstance(value, str) and what != "token" and len(value) > MAX_ID_CHARS:
                raise errors.InvalidInput(
                    f"the event's {what} is {len(value)} characters long; at most "
                    f"{MAX_ID_CHARS} are accepted")
        if task_id is not None:
            await self._check_task(run_id, task_id)
        secrets = codec.Secrets()
        if token and waits.key_of(token) is not None:  # the event is stored: not its token
            secrets.add(token, wait_id or kind or "?")
        payload_text = codec.dumps(payload, what="the event payload", secrets=secrets)
        bind_text = codec.dumps(bind or {}, what="the event's bound values", secrets=secrets)
        # Refused before anything is stored: an event is a message, not a file.
        size = len(payload_text) + len(bind_text)
        if size > self.max_event_bytes:
            raise errors.EventTooLarge(
                f"event {event_id[:64]!r} for run {run_id[:64]!r} is {codec.size(size)} as "
                f"JSON, over the limit of {codec.size(self.max_event_bytes)}; nothing was "
                "stored. Send a reference to large data instead (or raise the limit: "
                "Client(max_event_bytes=...))"
            )
        bind_json = codec.loads(bind_text)
        if not isinstance(bind_json, dict):
            raise errors.SteadError("bind is a dict of the values the wait is bound to")
        refused = None if token is None else waits.token_refusal(await self.store.keyring(),
                                                                 token)
        incoming = waits.Incoming(
            run_id=run_id, event_id=event_id, wait_id=wait_id, kind=kind,
            payload=codec.loads(payload_text), bind=bind_json, token=token,
            token_refused=refused,
            lock_after=self.lock_wait_after,
            policy=None if self.app is None else waits.Known(
                None if self.app.current_policy is None else self.app.current_policy.version),
            operator=operator,
        )
        event = records.EventRow(
            run_id=run_id, event_id=event_id, wait_id=wait_id, kind=kind,
            payload=payload_text, bind=codec.dumps(bind_json, what="bind"),
            verdict=None, reason=None, detail=None, received_at=0.0,
            delivered_by=None if operator is None else operator.by,
            delivered_why=None if operator is None else operator.why,
        )
        judgement, stored = await self.store.deliver(
            event, lambda ctx: waits.judge(incoming, ctx))
        return waits.to_delivery(event_id, judgement, stored)

    async def _check_task(self, run_id: str, task_id: str) -> None:
        """Refuse an event naming another task than its run's (an unknown run
        is judged, and stored, as such)."""
        try:
            run = await self.store.get_run(run_id)
        except errors.UnknownRun:
            return
        if run.task_id != task_id:
            raise errors.TaskMismatch(
                f"the event names task {task_id[:64]!r}, but run {run_id} is "
                + ("of no task" if run.task_id is None else f"of task {run.task_id!r}")
                + "; nothing was stored. Deliver it to the run of that task")

    async def revoke_wait(self, wait_id: str) -> None:
        """Revoke an open wait: deliveries to it are rejected, and the run wakes
        to `WaitRevoked`."""
        await self.store.revoke_wait(wait_id)

    async def unlock_wait(self, wait_id: str) -> records.WaitRow:
        """Unlock a wait that too many bad tokens locked: it accepts events
        again (with the right token), and its count of bad tokens starts over."""
        return await self.store.unlock_wait(wait_id)

    async def backlog(self) -> list[records.Backlog]:
        """What workers could take, by `workflow@version` (see `Store.backlog`)."""
        return await self.store.backlog()

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
        a call's try that died or failed (see `stead.streams`)."""
        return streams.tail(self.store, run_id, name, after, poll=poll)

    async def search_runs(
        self, *, status: str | None = None, workflow: str | None = None,
        version: int | None = None, task_id: str | None = None, queue: str | None = None,
        since: float | None = None, until: float | None = None, text: str | None = None,
        after: searches.Cursor | None = None, limit: int = 100,
    ) -> list[RunInfo]:
        """Runs, newest first, filtered by each criterion given (`since`,
        `until`: creation time, epoch seconds; `text`: the start of a run id,
        a piece of a task id or workflow), after the run `after` names."""
        bounds.integer(limit, "limit", least=1)
        if version is not None:
            bounds.version(version)
        rows = await self.store.search_runs(searches.RunSearch(
            status=None if status is None else _status(status), workflow=workflow,
            version=version, task_id=task_id, queue=queue, since=since, until=until,
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

    # -- deploys ---------------------------------------------------------------------
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

    async def export_run(self, run_id: str) -> StoredRun:
        """The run's history (row, journal, waits, task state): `dumps()` it
        to a file for `stead replay-check --from` or `import_run`."""
        row = await self.store.get_run(run_id)
        return await takeover.load_stored(self.store, row)

    async def import_run(self, stored: StoredRun) -> RunInfo:
        """Store a run exported from another database (no lease; the task
        state only if the task has none here). Checked whole first, as an
        export read from a file is (`StoredRun.checked`): `InvalidInput` if it
        is not a valid export, or its id (or a live run of its task) exists;
        either way nothing of it is stored."""
        stored = stored.checked()
        row = await self.store.import_run(stored.run.evolve(lease_owner=None,
                                                            lease_expires_at=None),
                                          stored.journal, stored.waits, stored.state)
        return RunInfo.from_row(row)

    async def migrate(self, run_id: str, *, to: int, by: str | None = None,
                      dry_run: bool = False) -> MigrationReport:
        """Move a run to version `to` with the migrations the client's app
        registers (one after the other, if there are several): the old journal
        is archived (see `rollback`) and the migration recorded with who,
        when and from→to, in a resume record too. The run must be live and
        held by no worker. `dry_run`: only say what it would do. Either way
        the migrated journal is first replayed dry against version `to`;
        the migration is applied only if the report is `ok`. `by` (who
        migrates, recorded) defaults to the OS user running the client."""
        bounds.version(to, "to (the version to migrate to)")
        by = revisions.author(by)
        app = self._app("migrate")
        row = await self.store.get_run(run_id)
        path = dryrun.path_to(app, row.workflow, row.version, to)
        stored, plans = dryrun.migrated(app, await takeover.load_stored(self.store, row), path,
                                        by)
        [replayed] = await dryrun.replay_all(app, [stored])
        report = MigrationReport(run_id, row.version, to, plans[0].records_before,
                                 len(stored.journal), inputs.decode(stored.run.input),
                                 replayed)
        if dry_run or not report.ok:
            return report
        applied = []
        for plan in plans:
            resume = records.ResumeRecord(
                run_id=run_id, epoch=0, worker_id=f"migrated by {by}", at=0.0,
                from_seq=plan.records_before, code_version=f"{row.workflow}@{plan.to_version}",
                reused=0, detail=records.ResumeDetails(
                    plan.records_before, {}, {}, None,
                    {"applied": [_audit(plan, by)]}).to_json())
            _, made = await self.store.migrate_run(plan, resume=resume)
            applied.append(made)
        return dataclasses.replace(report, applied=tuple(applied))

    async def rollback(self, run_id: str, *, by: str | None = None) -> RunInfo:
        """Undo the run's last migration: its archived journal, version and
        input come back, if nothing was journaled since (else
        `MigrationRefused`). Audited in a resume record and on the migration,
        with `by` (default: the OS user running the client)."""
        by = revisions.author(by)
        row = await self.store.get_run(run_id)
        resume = records.ResumeRecord(
            run_id=run_id, epoch=0, worker_id=f"rolled back by {by}", at=0.0, from_seq=0,
            code_version=f"{row.workflow}@{row.version}", reused=0,
            detail=records.ResumeDetails(0, {}, {}, None, {"rolled_back": {
                "by": by, "from_version": row.version}}).to_json())
        new, _ = await self.store.rollback_run(run_id, by, resume)
        return RunInfo.from_row(new)

    def _app(self, what: str) -> App:
        if self.app is None:
            raise errors.SteadError(f"to {what} a run the client needs the app that registers "
                                    "the migration: Client(store, app)")
        return self.app

    # -- workspaces -----------------------------------------------------------------
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

    # -- the decision context -----------------------------------------------------
    async def intents(self, run_id: str) -> list[records.IntentRow]:
        """Every version of the run's intent, oldest first, with who and why."""
        await self.store.get_run(run_id)
        return await self.store.list_intents(run_id)

    async def resume(self, run_id: str, *, by: str | None = None, why: str,
                     intent: Intent | None = None) -> RunInfo:
        """Resume a paused run: a person's decision, recorded as a new version
        of its intent (`intent`, or the one in force) with who and why. The
        policy is asked again when a worker takes it."""
        by = _decider(by, why)
        if intent is not None and self.app is not None:
            self.app.check_intent(intent)
        now = self.store.clock.now()

        def revise(current: records.IntentRow | None, _run: RunRow) -> str:
            if intent is not None:
                return intent.anchored(now).dumps()
            return current.intent if current is not None else Intent().dumps()

        _, row = await self.store.revise_intent(
            run_id, revise, author=by, why=f"resumed: {why}", resume=RunStatus.PAUSED)
        return RunInfo.from_row(row)

    async def revise(
        self, run_id: str, *, why: str, by: str | None = None, goal: str | None = None,
        instructions: str | None = None, grants: Sequence[Grant] | None = None,
    ) -> records.IntentRow:
        """Revise the intent of a run that is running, waiting, paused or
        pending: a new `goal`, new `instructions`, `grants` narrowed (each a
        narrowing of a grant it holds; a tool left out is withdrawn). Stored
        as a new version with who (`by`, default: the OS user) and why; the
        holder's effects are checked against it at once (the grant check reads
        the version in force), and the next resume judges against it. Raises
        `RunEnded` for an ended run and `GrantWidening` for a grant that would
        widen; nothing is stored then."""
        who = _decider(by, why)
        revision = revisions.Revision(goal, instructions, grants)
        if grants is not None and self.app is not None:
            for grant in grants:
                self.app.check_tool(grant.tool)
        now = self.store.clock.now()
        row, _run = await self.store.revise_intent(
            run_id, lambda current, run: revision.apply(current, run, now), author=who,
            why=f"revised: {why}")
        return row

    async def set_state(
        self, task_id: str, patch: Mapping[str, Any], *, expect_version: int, why: str,
        by: str | None = None,
    ) -> Facts:
        """Change a task's facts from outside any run (an inventory system, an
        operator): merge `patch` (JSON merge patch, None deletes a key) if the
        state is still at `expect_version`, else raise `StateConflict`; the
        version written keeps who (`by`, default: the OS user) and why. A run
        of the task reads it at its next `run.state.get()`; a waiting or paused
        run sees it when it resumes."""
        edit = revisions.StateEdit(patch, expect_version)
        who = _decider(by, why)
        if not isinstance(task_id, str) or not task_id.strip() or len(task_id) > MAX_ID_CHARS:
            raise errors.InvalidInput(
                f"a task id is a non-empty string of at most {MAX_ID_CHARS} characters")
        row = await self.store.set_state(task_id, lambda current: edit.apply(task_id, current),
                                         author=who, why=why)
        return Facts.from_row(row)

    async def terminate(self, run_id: str, *, by: str | None = None, why: str) -> RunInfo:
        """End a paused run as `revalidation_failed`, with who and why."""
        by = _decider(by, why)
        row = await self.store.end_stopped(
            run_id, RunStatus.PAUSED, RunStatus.REVALIDATION_FAILED,
            json.dumps({"type": "RevalidationFailed", "by": by, "why": why,
                        "message": f"terminated by {by}: {why}"}))
        return RunInfo.from_row(row)

    async def renew_grant(
        self, run_id: str, tool: str, *, by: str | None = None, why: str,
        expires_in: float | None = None, expires_at: float | None = None,
        scope: Mapping[str, Any] | None = None, widen: bool = False,
    ) -> RunInfo:
        """Renew the run's grant for `tool` (a new expiry, and `scope` if
        given), as a new version of its intent; a paused run resumes with it.
        A renewal may narrow the scope; one that widens it raises
        `GrantWidening` unless `widen=True`."""
        by = _decider(by, why)
        if self.app is not None:
            self.app.check_tool(tool)
        now = self.store.clock.now()
        renewed = Grant(tool=tool, scope={} if scope is None else scope,
                        expires_at=expires_at, expires_in=expires_in)  # checks the values
        widened: list[str] = []

        def revise(current: records.IntentRow | None, run: RunRow) -> str:
            revisions.refuse_ended(run, f"renewing its grant for {tool!r}")
            intent = _granting(current, run_id, tool)
            before = intent.grants_for(tool)[0]
            fresh = renewed.expires_at is not None or renewed.expires_in is not None
            grant = dataclasses.replace(
                before, scope=before.scope if scope is None else renewed.scope,
                expires_at=renewed.expires_at if fresh else before.expires_at,
                expires_in=renewed.expires_in).anchored(now)
            widened[:] = grant.widens(before)
            if widened and not widen:
                raise errors.GrantWidening(
                    f"renewing the grant for {tool!r} would widen it ({'; '.join(widened)}); "
                    "a renewal may only narrow. Pass widen=True (--widen) to widen on purpose")
            others = tuple(g for g in intent.grants if g.tool != tool)
            return dataclasses.replace(intent, grants=(*others, grant)).dumps()

        info = await self.get(run_id)
        resume = RunStatus.PAUSED if info.status == RunStatus.PAUSED else None
        _, row = await self.store.revise_intent(
            run_id, revise, author=by, resume=resume,
            why=f"grant {tool} renewed{' (widened)' if widen else ''}: {why}")
        return RunInfo.from_row(row)

    async def deny_grant(self, run_id: str, tool: str, *, by: str | None = None,
                         why: str) -> RunInfo:
        """Withdraw the run's grant for `tool` (a new version of its intent);
        a paused run is terminated as `revalidation_failed`."""
        by = _decider(by, why)

        def revise(current: records.IntentRow | None, run: RunRow) -> str:
            revisions.refuse_ended(run, f"denying its grant for {tool!r}")
            intent = _granting(current, run_id, tool)
            return dataclasses.replace(
                intent, grants=tuple(g for g in intent.grants if g.tool != tool)).dumps()

        _, row = await self.store.revise_intent(run_id, revise, author=by,
                                                why=f"grant {tool} denied: {why}")
        if row.status == RunStatus.PAUSED:
            return await self.terminate(run_id, by=by, why=f"grant {tool} denied: {why}")
        return RunInfo.from_row(row)


def _audit(plan: records.MigrationPlan, by: str) -> dict[str, Any]:
    return {"from_version": plan.from_version, "to_version": plan.to_version, "by": by,
            "records_before": plan.records_before, "records_after": len(plan.records)}


def _decider(by: str | None, why: str) -> str:
    """Who decides (`by`, default: the OS user), once the decision says why."""
    if not isinstance(why, str) or not why.strip():
        raise errors.InvalidInput("a decision says who made it (by) and why: give both")
    bounds.text(why, "why (the decision's reason)")
    return revisions.author(by)


def _waiting(timeout: float | None, poll: float) -> None:
    if timeout is not None:
        bounds.seconds(timeout, "timeout", zero=True)
    bounds.seconds(poll, "poll")


def _granting(current: records.IntentRow | None, run_id: str, tool: str) -> Intent:
    intent = None if current is None else Intent.loads(current.intent)
    if intent is None or not intent.grants_for(tool):
        held = ", ".join(sorted({g.tool for g in intent.grants})) if intent else ""
        raise errors.InvalidIntent(
            f"run {run_id} has no grant for tool {tool!r} (its grants: {held or 'none'}); "
            "give it one with a new intent: stead runs resume RUN --intent FILE")
    return intent
