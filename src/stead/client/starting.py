"""Starting runs: one (`start`), many in batches (`start_many`), and a new run
forked from a prefix of another's journal (`fork`)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any

from stead import arguments, bounds, codec, errors, inputs, queues, records, run_ids, tenants
from stead.app import Workflow
from stead.client import forks, revisions
from stead.client.base import Base
from stead.client.info import RunInfo
from stead.intent import Intent
from stead.payloads import references
from stead.payloads.envelope import What
from stead.starts import Start


class Starting(Base):
    """How `Client` starts runs: each checked against the app before it is stored."""

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
        tenant: str | None = None,
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
        deadline passes. `tenant` names the customer the run serves
        (`stead.tenants`; a queue declared with a tenant gives its own): claims
        share the workers fairly among tenants, and its children serve it too."""
        new = self._new_run(Start(workflow, args, kwargs, task_id=task_id, version=version,
                                  queue=queue, priority=priority, dedup_key=dedup_key,
                                  intent=intent, deadline=deadline, tenant=tenant))
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
        tenant = self._tenant(start)
        # Each positional argument under its parameter's name, when the
        # workflow's function is at hand: what a person reads the input by.
        named = None if wf is None else arguments.names(wf.fn, start.args, start.kwargs)
        payload = inputs.encode(start.args, start.kwargs, workflow=name, names=named)
        if wf is not None:
            inputs.check(wf, payload)
        return records.NewRun(
            run_id=run_ids.new(self.store.clock.now()), workflow=name, version=wf_version,
            task_id=task_id, input=payload,
            intent=None if intent is None else intent.anchored(self.store.clock.now()).dumps(),
            intent_why=(intent.reason if intent is not None and intent.reason
                        else "given at start"),
            intent_by=revisions.author(None) if intent is not None else "client",
            deadline=None if seconds is None else self.store.clock.now() + seconds,
            queue=start.queue, priority=start.priority or 0, dedup_key=start.dedup_key,
            tenant=tenant,
        )

    def _tenant(self, start: Start) -> str | None:
        """The tenant the run serves: the one given, else the client's (a
        client scoped to a tenant starts runs of no other), else its queue's;
        a run given another tenant than its queue's is refused."""
        tenant = tenants.check(start.tenant)
        if self.tenant is not None and tenant not in (None, self.tenant):
            raise errors.OutsideTenant(
                f"this client is scoped to tenant {self.tenant!r} and cannot start a run "
                f"of tenant {tenant!r}; use a client scoped to that tenant")
        tenant = tenant if tenant is not None else self.tenant
        if start.queue is None or self.app is None or start.queue not in self.app.queues:
            return tenant
        own = self.app.queues[start.queue].tenant
        if own is not None and tenant is not None and tenant != own:
            raise errors.InvalidTenant(
                f"queue {start.queue!r} holds tenant {own!r}'s runs; a run of tenant "
                f"{tenant!r} goes in another queue")
        return tenant if tenant is not None else own

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

    async def fork(self, run_id: str, *, at: int | None = None) -> RunInfo:
        """Start a new run whose journal is the first `at` records of run
        `run_id`'s (0: none; the journal's length, or None: all of it): it
        replays them and goes on live from there, as a new run (its own task
        state, as the prefix last saw it; its own waits and effect keys; the
        intent in force). Refused with `ForkRefused` past an effect whose
        outcome the prefix does not know. The link is kept on both runs
        (`lineage`). Forking a failed run whole, once its code is fixed, is how
        it goes on: its journaled effects are replayed, not sent again."""
        if at is not None:
            bounds.integer(at, "at (a journal position)")
        await self.store.check_not_forgotten(run_id)
        parent = await self.store.get_run(run_id)
        journal = await self.store.load_journal(run_id)
        at = len(journal) if at is None else at
        kept = forks.prefix(run_id, journal, at)
        opened: dict[str, records.WaitRow] = {}
        for rec in forks.unresolved_waits(kept):
            wait_id = str(codec.loads(rec.payload)["wait_id"])
            row = await self.store.get_wait(wait_id)
            if row is not None:
                opened[wait_id] = row
        # A state record over the inline limit is journaled by reference: read back.
        version = forks.state_seen([
            r.evolve(payload=await self.store.resolve(r.payload, run_id, What.JOURNAL))
            if r.kind == records.RecordKind.STATE and references.is_reference(r.payload) else r
            for r in kept])
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
