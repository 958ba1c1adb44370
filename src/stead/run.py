"""`Run`: the context a workflow sees. Every `run.*` call is journaled; on
replay the journal answers and nothing is called again."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import logging
import os
import random as _random
import uuid as _uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, NoReturn, TypeVar, overload

from stead import (
    addresses,
    bounds,
    calls,
    children,
    codec,
    digests,
    effects,
    errors,
    fingerprints,
    guard,
    judgements,
    keys,
    policy,
    policy_binding,
    proposals,
    records,
    schema_check,
    stepcode,
    streams,
    tracing,
    waits,
    workspaces,
)
from stead.execution import Continued, Execution, Stop
from stead.fingerprints import Fingerprint, changes
from stead.intent import Budget, Intent, check_tools
from stead.llm.model import Completion, Model
from stead.outcomes import Compensation, Operation, Outcome
from stead.records import Record, RecordKind, RecordStatus, ResumeClass, RunRow, WaitState
from stead.retry import NO_RETRY, Retry
from stead.state import TaskState
from stead.store.seam import FencedWrite

log = logging.getLogger("stead.run")

T = TypeVar("T")
Check = Callable[[Operation], Awaitable[Outcome]] | Callable[[Operation], Outcome]


def _paused(name: str, what: str, changed: Sequence[str], acted: Record) -> Stop:
    """The pause of a run whose step `name` no longer holds (its `what`
    changed) but that `acted` on outside after it."""
    return Stop(records.RunStatus.PAUSED, {
        "type": "Paused", "cause": "revalidate",
        "message": f"step {name!r}'s {what} changed ({'; '.join(changed)}), but {acted.kind} "
                   f"{acted.name!r} (seq {acted.seq}) already happened after it: its result "
                   "cannot simply be made again. Decide: stead runs resume RUN --by WHO --why "
                   "WHY [--intent FILE], or stead runs terminate RUN --by WHO --why WHY",
        "call": name, "after": acted.name, "after_seq": acted.seq})


def _error_payload(exc: BaseException, retry_at: float | None) -> str:
    return codec.dumps(
        {"type": type(exc).__qualname__, "message": str(exc), "retry_at": retry_at},
        what="an error",
    )


def _schema_text(schema: Any) -> str:
    """A wait's schema as JSON Schema text: a dict is one already; a type (a
    pydantic model, a dataclass...) has pydantic's (draft 2020-12)."""
    text = codec.dumps(schema if isinstance(schema, Mapping) else codec.json_schema(schema),
                       what="the wait's schema")
    schema_check.check(text)
    return text


def _fresh(fresh: str | Fingerprint | None) -> None:
    if isinstance(fresh, Fingerprint):
        return
    if fresh not in (None, "on_resume", "always"):
        raise ValueError(f"fresh is None, 'on_resume' or 'always', not {fresh!r}")


class Run:
    """Passed to every workflow as its first argument."""

    def __init__(self, execution: Execution, row: RunRow) -> None:
        self._x = execution
        self.id = row.run_id
        self.task_id = row.task_id
        self.workflow = row.workflow
        self.version = row.version
        self.epoch = row.epoch
        self._row = row
        self._streams: dict[str, streams.Stream] = {}
        self._saves = workspaces.StepSaves(execution)

    # -- recorded calls -----------------------------------------------------
    async def _recorded(
        self,
        kind: RecordKind,
        name: str,
        digest: str,
        call: Callable[[], Awaitable[Any]],
        encode: Callable[[Any], str],
        retry: Retry,
        gate: Callable[[], None] | None = None,
        fresh: str | None = None,
        reason: str | None = None,
        saves: workspaces.StepSaves | None = None,
        code: str | None = None,
    ) -> tuple[RecordStatus, str, int]:
        """Return `(status, payload, attempts)` of the call at the next address: from the
        journal if recorded, else by calling it live (with retries) and
        journaling each attempt."""
        addr = addresses.reserve()
        prior = self._x.take(addr, kind, name, digest)
        if prior and code is not None:
            prior = self._code_changed(addr, name, prior, code)
        attempt = 1
        if prior and fresh is not None and self._x.taken_over \
                and await proposals.again(self._x, addr, kind, name, digest, prior, fresh):
            prior = []
        died = prior[-1].attempt if prior and prior[-1].status == RecordStatus.STARTED \
            else None
        # A marker the last holder's lease renewal stored for an attempt the
        # journal knows nothing of (nothing else committed while it ran).
        marked = self._x.died(addr, kind, name, digest)
        if marked is not None:
            died = marked
        if died is not None:
            # The last attempt was in flight when its worker died: it counts,
            # against the attempts a declared `retry=` allows (without one, a
            # call that was never acknowledged runs again, as ever).
            if retry is not NO_RETRY and died >= retry.attempts:
                payload = codec.dumps({
                    "type": "WorkerDied", "retry_at": None,
                    "message": f"attempt {died} of {retry.attempts} was in flight when its "
                               "worker died; no attempt is left"}, what="an error")
                self._x.check_live()
                await self._x.commit([self._x.record(addr, died, kind, name, digest,
                                                     RecordStatus.ERROR, payload)])
                return RecordStatus.ERROR, payload, died
            attempt = died + 1
        elif prior:
            last = prior[-1]
            self._x.classify(ResumeClass.REUSE)
            if last.status == RecordStatus.OK:
                if saves is not None:
                    saves.replayed(addr)
                return RecordStatus.OK, last.payload, last.attempt
            retry_at = codec.loads(last.payload).get("retry_at")
            if retry_at is None:
                return RecordStatus.ERROR, last.payload, last.attempt
            self._x.check_live()
            await self._x.sleep_until(float(retry_at))
            attempt = last.attempt + 1
        self._x.check_live()
        if self._x.guard is not None:  # nothing to judge for a run without intent or policy
            await self._judged(policy.Action(kind, name, None, {}, reason, digest=digest))
        while True:
            self._x.check_live()
            if gate is not None:
                gate()
            # Rides along with whatever commits while the call is in flight
            # (another branch's call), and is stored with each lease renewal
            # meanwhile (see `Execution.in_flight`); dropped unwritten if its
            # outcome is first.
            started = self._x.record(addr, attempt, kind, name, digest, RecordStatus.STARTED,
                                     "{}")
            self._x.buffer(started)
            try:
                with self._x.busy(), streams.live_call(addr, attempt):
                    value = await call()
            except Exception as exc:
                retry_at = retry.retry_at(attempt, exc, self._x.clock.now())
                payload = _error_payload(exc, retry_at)
                await self._x.commit(
                    [self._x.record(addr, attempt, kind, name, digest, RecordStatus.ERROR,
                                    payload)], drop=started)
                if retry_at is None:
                    return RecordStatus.ERROR, payload, attempt
                await self._x.sleep_until(retry_at)
                attempt += 1
                continue
            except BaseException:
                self._x.unbuffer(started)
                raise
            try:
                payload = encode(value)
            except BaseException:
                self._x.unbuffer(started)
                raise
            done = self._x.record(addr, attempt, kind, name, digest, RecordStatus.OK, payload)
            if saves is not None:  # the files the step made ride with its result
                await saves.commit(addr, done, started)
            else:
                await self._x.commit([done], drop=started)
            return RecordStatus.OK, payload, attempt

    async def _judged(self, action: policy.Action) -> None:
        """Before a live step or model call: the takeover's revalidation
        judges it if it is the first, and a model call is judged on its own
        when the app asks (`App(policy_on=("effect", "llm"))`)."""
        x = self._x
        if await x.before_live(action):
            return
        if x.guard is not None and action.kind == RecordKind.LLM \
                and policy.PolicyPoint.LLM in x.guard.points:
            halt = await judgements.judge(x, action)
            if halt is not None:
                raise Stop(halt.status, halt.error)

    def _code_changed(self, addr: str, name: str, prior: list[Record], code: str
                      ) -> list[Record]:
        """`prior`, the journaled records of step `name`, as the app's
        `changed_steps` treats them when the step's code changed since: reused
        with a warning, cut to be made again ([]), or the run stops. A record
        journaled without a code digest is not judged."""
        was = stepcode.code_of(prior[0].digest)[1]
        if was is None or was == code:
            return prior
        x, start = self._x, prior[0].seq
        changed = [f"code {was} -> {code}"]
        entry = {"call": name, "seq": start, "cause": records.StaleCause.CODE, "changed": changed}
        acted = proposals.acted_after(x, addr, start)
        if x.changed_steps == stepcode.ChangedSteps.WARN:
            x.reran.append({**entry, "done": records.StaleOutcome.REUSED})
            x.classify(records.ResumeClass.REVALIDATE)
            log.warning("run %s: step %r (seq %d) was journaled by other code (%s); its result "
                        "is reused as journaled (App(changed_steps=) says otherwise)",
                        self.id, name, start, changed[0])
            return prior
        if x.changed_steps == stepcode.ChangedSteps.RERUN and acted is None:
            proposals.cut(x, start, name, records.StaleCause.CODE, changed)
            return []
        if x.changed_steps == stepcode.ChangedSteps.RERUN and acted is not None:
            x.reran.append({**entry, "done": records.StaleOutcome.PAUSED})
            raise _paused(name, "code", changed, acted)
        x.reran.append({**entry, "done": records.StaleOutcome.STOPPED})
        raise x.stop_as_incompatible(errors.NonDeterminism(
            f"run {self.id}: step {name!r} at position {addr} (seq {start}) was journaled by "
            f"other code ({changed[0]}), and the app stops on a changed step "
            "(App(changed_steps=\"stop\")). Register the old version alongside the new one, "
            "then `stead runs retry RUN`; or declare `contract=` on the step, or cancel the run.",
            addr=addr, seq=start, expected=f"step {name!r} code {was}",
            actual=f"step {name!r} code {code}"))

    @staticmethod
    def _raise(name: str, payload: str, attempts: int) -> None:
        err = codec.loads(payload)
        error_type = str(err.get("type", "Exception"))
        kind = errors.StepTimeout if error_type == "TimeoutError" else errors.StepError
        raise kind(name, error_type, str(err.get("message", "")), attempts=attempts)

    async def _fingerprint(self, name: str, fingerprint: Fingerprint,
                           reads: workspaces.Workspace | None, by_default: bool) -> None:
        """Journal the environment a step's result is made in, just before it
        (the record rides along with the step's); on replay, compare it with
        the environment now: if it changed, the recorded result no longer
        holds and the journal is cut from it (see `proposals.cut`). A
        fingerprint only the default binds (`by_default`) sits at the step's
        address plus `/env`, so it shifts no call's address, and is not
        added to a step journaled without one."""
        step = addresses.peek()
        addr = f"{step}/env" if by_default else addresses.reserve()
        journal = self._x.journal
        if by_default and (self._x.dry or (journal.first(addr) is None
                                           and journal.first(step) is not None)):
            # A dry replay reads no files (the machine it runs on is not the
            # run's); a step journaled without one is not judged on it.
            if journal.first(addr) is not None:
                self._x.take(addr, RecordKind.FINGERPRINT, name, "")
            return
        prior = self._x.take(addr, RecordKind.FINGERPRINT, name, "")
        with self._x.busy():
            now = await fingerprint.take(reads)
        if prior:
            before = codec.loads(prior[-1].payload)
            judged = fingerprints.judged(before, now)
            if before == judged:
                return
            start = prior[0].seq
            acted = proposals.acted_after(self._x, addr, start)
            changed = changes(before, judged)
            if acted is not None:
                self._x.reran.append({"call": name, "seq": start,
                                      "cause": records.StaleCause.FINGERPRINT,
                                      "changed": changed, "done": records.StaleOutcome.PAUSED})
                raise _paused(name, "fingerprint", changed, acted)
            proposals.cut(self._x, start, name, records.StaleCause.FINGERPRINT, changed)
        self._x.check_live()
        self._x.buffer(self._x.record(addr, 1, RecordKind.FINGERPRINT, name, "",
                                      RecordStatus.OK, codec.dumps(now, what="a fingerprint")))

    @overload
    async def step(
        self, name: str, fn: Callable[..., Awaitable[T]], *args: Any,
        retry: Retry | None = None, fresh: str | Fingerprint | None = None,
        contract: str | None = None, timeout: float | None = None, **kwargs: Any,
    ) -> T: ...

    @overload
    async def step(
        self, name: str, fn: Callable[..., T], *args: Any,
        retry: Retry | None = None, fresh: str | Fingerprint | None = None,
        contract: str | None = None, timeout: float | None = None, **kwargs: Any,
    ) -> T: ...

    async def step(
        self, name: str, fn: Callable[..., Any], *args: Any,
        retry: Retry | None = None, fresh: str | Fingerprint | None = None,
        contract: str | None = None, timeout: float | None = None, **kwargs: Any,
    ) -> Any:
        """Call `fn(*args, **kwargs)` once, ever: its result (or its error) is
        journaled and returned from the journal on replay. Sync functions run in
        a thread. A failure raises `StepError`, live and on replay alike.

        `fresh="on_resume"` marks a result that is a proposal, not a fact
        (a plan): after a takeover whose intent diff is not empty (`"always"`:
        after any takeover) it is made again, and the run goes on live from
        it; the records after it stay in the journal, no longer replayed. If
        something acted outside after it, the run pauses for a person.

        `contract="v2"` names the version of what the step means: it is folded
        into the call's digest, so a run journaled under another contract
        stops as `incompatible_checkpoint` naming the step and both contracts,
        rather than reuse a result the changed body would not give.

        `fresh=stead.Fingerprint(...)` binds the result to the environment it
        was made in (a workspace's snapshot, files such as a lockfile, an
        image): it is reused while that still holds, and made again (or the
        run pauses, as above) once it does not.

        `timeout` (seconds) bounds each attempt: one that takes longer fails
        with `TimeoutError` (journaled, retried under `retry`, then
        `StepError`). A sync function's thread cannot be stopped: it finishes
        unheard."""
        _fresh(fresh)
        bounds.text(name, "a step name")
        if timeout is not None:
            timeout = bounds.seconds(timeout, "a step's timeout")
        # A step that reads a workspace is bound to its environment by default.
        reads = fingerprints.read(args, kwargs, self._saves.spaces) \
            if fresh is None or isinstance(fresh, Fingerprint) else None
        if isinstance(fresh, Fingerprint):
            await self._fingerprint(name, fresh, reads, by_default=False)
            fresh = None
        elif reads is not None:
            await self._fingerprint(name, Fingerprint(), reads, by_default=True)
        code = stepcode.digest(fn)
        digest = stepcode.coded(digests.contracted(
            self._x.digests.call(RecordKind.STEP, name, args, kwargs), contract), code)

        async def call() -> Any:
            if timeout is None:
                return await calls.invoke(fn, args, kwargs)
            async with asyncio.timeout(timeout):  # no task of its own: not a branch
                return await calls.invoke(fn, args, kwargs)

        status, payload, attempts = await self._recorded(
            RecordKind.STEP, name, digest,
            # Traced only when tracing is on: the plain path adds no frame.
            (lambda: _traced_step(name, call)) if tracing.enabled() else call,
            lambda v: codec.dumps(v, what=f"the result of step {name!r}",
                                  limit=self._x.max_result_bytes),
            retry or NO_RETRY, self._bound(), fresh,
            saves=self._saves if self._saves.spaces else None, code=code,
        )
        if status == RecordStatus.ERROR:
            self._raise(name, payload, attempts)
        rtype = codec.return_type(fn)
        try:
            return codec.decode(payload, rtype)
        except ValueError as exc:  # pydantic's ValidationError is a ValueError
            # The journal holds a value the declared type no longer accepts:
            # the code changed under the checkpoint.
            raise self._x.stop_as_incompatible(errors.NonDeterminism(
                f"run {self.id}: the recorded result of step {name!r} does not fit its "
                f"declared return type {rtype!r} any more ({codec.describe(exc)}). Register the "
                "old version alongside the new one, then `stead runs retry RUN`; or cancel the "
                "run.", expected=f"step {name!r} returning what it journaled",
                actual=f"step {name!r} returning {rtype!r}",
            )) from exc

    async def llm(
        self, name: str, model: Model, messages: Sequence[Mapping[str, Any]], *,
        retry: Retry | None = None, fresh: str | None = None, reason: str | None = None,
        contract: str | None = None, **params: Any,
    ) -> Completion:
        """Ask `model` once, ever: the completion is journaled, and a resumed run
        gets the recorded answer instead of asking again; unless `fresh` says
        the answer is a proposal to ask again after a changed intent (see
        `step`). `on_text=run.stream(name)` hands the model (a provider
        adapter) a stream to append its text deltas to as they come (see
        `stead.streams` for a try that dies mid-answer). `reason` (why the
        call is made) is journaled with the completion, under the key
        `"reason"` of the record's payload, for a validator to read; it is not
        sent to the model. The policy sees it in the pending `Action` when it
        judges the call: at a takeover whose first live call this is, and
        before every model call under `App(policy_on=("effect", "llm"))`."""
        _fresh(fresh)
        bounds.text(name, "a model call's name")
        if reason is not None and not isinstance(reason, str):
            raise TypeError("run.llm's reason is a string")
        # Where the model's text deltas go as they come (a `Stream`): not part
        # of the request, so not of its digest; a replayed answer sends none.
        on_text = params.pop("on_text", None)
        # A provider adapter says what its requests are (model, defaults, no
        # sentinels): that enters the digest in place of the bare parameters.
        shape = getattr(model, "digest_params", None)
        digest = digests.contracted(
            self._x.digests.llm(name, model.name, messages,
                                params if shape is None else shape(params)),
            contract)

        async def call() -> Completion:
            with tracing.model_call(name, model, messages, params) as span, \
                    addresses.outside_branches():
                answer = await (model.complete(messages, **params) if on_text is None
                                else model.complete(messages, on_text=on_text, **params))
                span.answered(answer)
                return answer

        status, payload, attempts = await self._recorded(
            RecordKind.LLM, name, digest, call,
            lambda c: codec.dumps(_with_reason(c.to_json(), reason),
                                  what=f"the completion of {name!r}",
                                  limit=self._x.max_result_bytes),
            retry or NO_RETRY, self._bound(model_call=True), fresh, reason,
        )
        if status == RecordStatus.ERROR:
            self._raise(name, payload, attempts)
        return Completion.from_json(codec.loads(payload))

    async def propose(
        self, name: str, model: Model, messages: Sequence[Mapping[str, Any]], *,
        reason: str | None = None, retry: Retry | None = None, contract: str | None = None,
        **params: Any,
    ) -> Completion:
        """Ask `model` for the next action of an agent loop: a proposal, not a
        fact. A plain crash reuses it; after a change (goal, instructions,
        plan, grants, policy, world) it is asked again if nothing acted on it
        yet, and kept as history once something did. Asked live, the model
        also sees what holds now: the goal, the task state, the budget left
        (`stead.proposals`). `reason` reaches the policy, as with `llm`."""
        return await self.llm(name, proposals.Proposing(model, self._x, self._task_key),
                              messages, retry=retry, fresh="on_resume", reason=reason,
                              contract=contract, **params)

    def _bound(self, *, model_call: bool = False) -> Callable[[], None] | None:
        """Before each live attempt of a model call or step: stop the run
        (paused) once its authority lapsed or its budget is spent (see
        `guard.bound`). A replayed call never gets here; a run without intent
        or policy under an app without tools has nothing to check."""
        x = self._x
        if x.guard is None and x.tools is None:
            return None

        def gate() -> None:
            halt = guard.bound(x.guard, x.tools, x.clock.now(), model_call=model_call)
            if halt is not None:
                raise Stop(halt.status, halt.error)

        return gate

    async def intent(self, intent: Intent, *, why: str = "declared by the workflow") -> int:
        """Declare a new version of the run's intent (grants with `expires_in`
        count from now); returns its version. Journaled: a replay returns the
        recorded version and changes nothing."""
        if not isinstance(intent, Intent):
            raise TypeError("run.intent takes a stead.Intent")
        addr = addresses.reserve()
        text = intent.dumps()
        digest = codec.digest(text, why)
        prior = self._x.take(addr, RecordKind.INTENT, "intent", digest)
        if prior:
            return int(codec.loads(prior[-1].payload)["version"])
        self._x.check_live()
        check_tools(intent, self._x.tools, self._x.app_name)
        anchored = intent.anchored(self._x.clock.now()).dumps()
        x = self._x
        holder: list[int] = []

        def revise(current: records.IntentRow | None, _run: RunRow) -> str:
            made = (current.version if current else 0) + 1
            if holder and made != holder[0]:
                raise errors.InvalidIntent(
                    f"run {self.id}: its intent changed while it ran (now version {made - 1}); "
                    "the declaration was not stored. Declare it again, or let a takeover "
                    "pick up the change")
            return anchored

        def send(batch: list[records.Record], resume: records.ResumeRecord | None
                 ) -> Awaitable[tuple[records.IntentRow, RunRow]]:
            # The record says which version it made: known inside the transaction.
            version = (x.guard.version if x.guard is not None else 0) + 1
            holder[:] = [version]
            rec = batch[-1].evolve(payload=codec.dumps({"version": version}, what="intent"))
            return x.store.revise_intent(x.fence.run_id, revise, author=f"workflow {self.workflow}",
                                         why=why, write=FencedWrite(x.fence, [*batch[:-1], rec],
                                                                    resume))

        rec = x.record(addr, 1, RecordKind.INTENT, "intent", digest, RecordStatus.OK,
                       codec.dumps({"version": 0}, what="intent"))
        row, _ = await x.write([rec], send)
        if x.guard is not None:
            x.guard.adopt(row)
        else:
            # The run had nothing to check until now: from here on its budget
            # counts what it journaled so far (all of it is stored: this
            # worker holds the run), and each write adds to it.
            ledger = guard.Ledger()
            with x.busy():
                ledger.count(await x.store.load_journal(self.id))
            x.guard = guard.Guard(self._row, row, None, ledger)
        return row.version

    @overload
    async def effect(
        self,
        name: str,
        fn: Callable[..., Awaitable[T]],
        *args: Any,
        key: str | None = None,
        check: Check | None = None,
        idempotent: bool | dt.timedelta = False,
        retry: Retry | None = None,
        timeout: float | None = None,
        poll_every: float = 1.0,
        uncertain: tuple[type[BaseException], ...] = effects.DEFAULT_UNCERTAIN,
        tool: str | None = None,
        reason: str | None = None,
        cost: float | None = None,
        compensate: Callable[..., Any] | Compensation | None = None,
        contract: str | None = None,
        **kwargs: Any,
    ) -> T: ...

    @overload
    async def effect(
        self,
        name: str,
        fn: Callable[..., T],
        *args: Any,
        key: str | None = None,
        check: Check | None = None,
        idempotent: bool | dt.timedelta = False,
        retry: Retry | None = None,
        timeout: float | None = None,
        poll_every: float = 1.0,
        uncertain: tuple[type[BaseException], ...] = effects.DEFAULT_UNCERTAIN,
        tool: str | None = None,
        reason: str | None = None,
        cost: float | None = None,
        compensate: Callable[..., Any] | Compensation | None = None,
        contract: str | None = None,
        **kwargs: Any,
    ) -> T: ...

    async def effect(
        self,
        name: str,
        fn: Callable[..., Any],
        *args: Any,
        key: str | None = None,
        check: Check | None = None,
        idempotent: bool | dt.timedelta = False,
        retry: Retry | None = None,
        timeout: float | None = None,
        poll_every: float = 1.0,
        uncertain: tuple[type[BaseException], ...] = effects.DEFAULT_UNCERTAIN,
        tool: str | None = None,
        reason: str | None = None,
        cost: float | None = None,
        compensate: Callable[..., Any] | Compensation | None = None,
        contract: str | None = None,
        **kwargs: Any,
    ) -> Any:
        """Perform a side effect at most once, knowingly: the intent (with the
        operation `key`) is journaled before `fn(op, *args, **kwargs)` runs, the
        outcome after. After a crash, an effect whose outcome is unknown is
        resent only if `idempotent`, else `check(op)` is asked, else the run
        stops as `outcome_unknown` for a human to reconcile. An exception from
        `fn` is a known failure (retried under `retry`, then `EffectFailed`);
        a timeout or `OutcomeUncertain` is not: the outcome is unknown.

        `idempotent=timedelta(hours=24)` is the receiver's dedup window for
        the key: within it from the first send, an unknown outcome is resent;
        past it, a resend could act twice, so it is not: `check` is asked, or
        the run stops as `outcome_unknown`.

        With `tool=`, the effect is sent only under an unexpired grant of the
        run's intent for that tool whose scope covers its arguments, checked
        in the transaction that commits its intent; `fn` gets it as
        `op.grant`. `reason` is handed to the policy; `cost` counts against
        the budget's `spend`. What is refused pauses the run, nothing sent.
        `contract` is folded into the digest, as for `step`.

        `compensate=fn` (or a `stead.Compensation` with its own `check` and
        `idempotent`) undoes the effect once a person reconciles it as to be
        compensated: it runs as an effect of its own, its outcome followed as
        any effect's, and the workflow then sees `EffectCompensated`."""
        bounds.text(name, "an effect name")
        if cost is not None:
            cost = bounds.amount(cost, "an effect's cost")
        if key is not None and (not isinstance(key, str) or not key):
            raise ValueError("an effect key must be a non-empty string")
        bounds.optional_text(key, "an effect key")
        bounds.optional_text(tool, "an effect's tool")
        if timeout is not None:
            timeout = bounds.seconds(timeout, "an effect's timeout")
        poll_every = bounds.seconds(poll_every, "an effect's poll_every")
        window = None
        if isinstance(idempotent, dt.timedelta):
            window = bounds.seconds(idempotent, "an effect's dedup window (idempotent=timedelta)")
        elif not isinstance(idempotent, bool):
            raise TypeError("idempotent is True, False or the key's dedup window (a timedelta)")
        if compensate is not None and not isinstance(compensate, Compensation):
            if not callable(compensate):
                raise TypeError("compensate is a function or a stead.Compensation")
            compensate = Compensation(compensate)
        spec = effects.Spec(
            name=name, fn=fn, args=args, kwargs=kwargs, key=key, check=check,
            compensate=compensate,
            idempotent=bool(idempotent), dedup_window=window, retry=retry or NO_RETRY,
            timeout=timeout,
            poll_every=poll_every, uncertain=uncertain, tool=tool, reason=reason,
            cost=cost, contract=contract,
        )
        addr = addresses.reserve()
        return await effects.Effect(self._x, addr, spec).run()

    # -- workspaces ----------------------------------------------------------
    async def workspace(
        self, name: str, path: str | os.PathLike[str], *,
        root: str | os.PathLike[str] | None = None,
        max_bytes: int | None = workspaces.DEFAULT_MAX_BYTES, blobs: str | None = None,
    ) -> workspaces.Workspace:
        """Attach the directory `path` (inside `root`: by default
        `$STEAD_WORKSPACE_ROOT`, else the current directory) to the run as
        workspace `name`; `await ws.save()` snapshots it durably (its blobs in
        the run's database, or under the fsspec URL `blobs`), at most
        `max_bytes` of files. Each step that changes it is saved with its
        result, in one fenced transaction (`workspaces.StepSaves`): a takeover
        restores what the step made and does not redo it. After a takeover, `ws.path` is the fresh
        directory its last snapshot was restored into, on this worker."""
        bounds.optional_text(name, "a workspace's name")
        ws = await workspaces.attach(self._x, name, path, root=root, max_bytes=max_bytes,
                                     blob_url=blobs)
        self._saves.attached(ws)
        return ws

    # -- child runs ---------------------------------------------------------------
    async def child(
        self, workflow: children.Target, *args: Any, task_id: str | None = None,
        name: str | None = None, deadline: dt.timedelta | float | None = None,
        **kwargs: Any,
    ) -> Any:
        """Start a child run of `workflow` with these arguments and return its
        result once it ends (a failed, cancelled or terminated child raises
        `ChildFailed`). The child's id is journaled in this run in the
        transaction that creates it, so a takeover never starts it twice; its
        outcome is journaled here too. While the child runs, this run holds
        no lease when it has nothing else to do. Fan out with
        `asyncio.gather(run.child(...), run.child(...))`. `task_id` is the
        child's task; `name` names the call in the journal (default: the
        workflow's name); `deadline` is the child's, from when it starts."""
        bounds.optional_text(task_id, "a child's task_id")
        bounds.optional_text(name, "a child's name")
        seconds = None if deadline is None else bounds.seconds(deadline, "a child's deadline")
        return await children.Child(self._x, workflow, args, kwargs, task_id=task_id,
                                    name=name, deadline=seconds).run()

    # -- waits, timers, task state -------------------------------------------
    async def wait(
        self,
        kind: str,
        *,
        bind: dict[str, Any] | None = None,
        expires_in: dt.timedelta | float | None = None,
        schema: type[T] | Mapping[str, Any] | None = None,
        token: bool = True,
    ) -> waits.Wait[T]:
        """Open a durable wait for one event of `kind`. The event must carry the
        same `bind` values (a `state_version` key is also compared with the task
        state's version at delivery; a `policy_version` key binds the wait to
        the policy it opens under, see docs/architecture.md §8), arrive before
        `expires_in`, carry the
        wait's token (unless `token=False`) and fit `schema` (a type such as a
        pydantic model, or a JSON Schema as a dict). Hand `w.token` to the human
        channel (or build its link in the effect that sends it:
        `w.link(base_url)`), then `event = await w`."""
        if not kind or not isinstance(kind, str):
            raise ValueError("a wait needs a kind (the event type it awaits)")
        bounds.text(kind, "a wait's kind")
        bind_json = codec.loads(codec.dumps(bind or {}, what="the bound values"))
        if not isinstance(bind_json, dict):
            raise TypeError("bind is a dict of the values the event must match")
        seconds = None if expires_in is None else bounds.seconds(expires_in,
                                                                 "a wait's expires_in")
        schema_json = None if schema is None else _schema_text(schema)
        addr = addresses.reserve()
        digest = policy_binding.open_digest(self._x.journal.first(addr), kind, bind_json,
                                            seconds, schema_json, token)
        prior = self._x.take(addr, RecordKind.WAIT, kind, digest)
        resolution = None
        key_id: str | None = None  # a new wait's token is signed by the current key
        label: str | None = None  # a fork's wait: its id in the journal (see `stead.client.forks`)
        policy = self._x.policy_version
        if records.POLICY_VERSION_KEY in bind_json:
            bound = bind_json[records.POLICY_VERSION_KEY]
            policy = None if bound is None else str(bound)
        if prior:
            opened = codec.loads(prior[0].payload)
            wait_id, expires_at, created_at = opened["wait_id"], opened["expires_at"], prior[0].at
            label = opened.get("journal_id")
            key_id = opened.get("key", keys.LEGACY)
            resolution = prior[1] if len(prior) > 1 else None
            # What the wait opened with, not what the code binds now (see `open_digest`).
            bind_json = opened.get("bind", bind_json)
            policy = opened.get("policy_version", policy)
        else:
            self._x.check_live()
            wait_id, created_at = _uuid.uuid4().hex, self._x.clock.now()
            expires_at = None if seconds is None else created_at + seconds
        minted, hashed = (None, None) if not token else waits.mint(
            await self._x.keyring(), key_id, self.id, wait_id, self._x.secrets, label)
        row = records.WaitRow(
            wait_id=wait_id, run_id=self.id, addr=addr, kind=kind,
            bind=codec.dumps(bind_json, what="bind"), schema=schema_json,
            token_hash=hashed,
            task_key=self._task_key, expires_at=expires_at, state=WaitState.OPEN,
            event_id=None, created_at=created_at, policy_version=policy,
        )
        if not prior:
            opening: dict[str, Any] = {"wait_id": wait_id, "expires_at": expires_at,
                                       "bind": bind_json, "policy_version": policy}
            if minted is not None:
                opening["key"] = minted.key_id
            text = codec.dumps(opening, what="the wait")
            rec = self._x.record(addr, 1, RecordKind.WAIT, kind, digest, RecordStatus.OPEN, text)
            await self._x.write([rec], lambda batch, resume: self._x.store.open_wait(
                self._x.fence, batch, resume, row))
        return waits.Wait(self._x, addr, kind, digest, row, minted, schema, resolution, label)

    async def sleep(self, duration: dt.timedelta | float) -> None:
        """Sleep durably: the wake-up time is journaled, so a run taken over
        sleeps only the remainder; a long sleep holds no worker."""
        seconds = bounds.seconds(duration, "a sleep's duration", zero=True)
        addr = addresses.reserve()
        digest = codec.digest(seconds)
        prior = self._x.take(addr, RecordKind.SLEEP, "sleep", digest)
        if prior:
            until = float(codec.loads(prior[0].payload)["until"])
        else:
            self._x.check_live()
            until = self._x.clock.now() + seconds
            await self._x.commit([self._x.record(
                addr, 1, RecordKind.SLEEP, "sleep", digest, RecordStatus.OPEN,
                codec.dumps({"until": until}, what="a timer"))])
        await self._x.sleep_until(until)

    def stream(self, name: str) -> streams.Stream:
        """The run's durable stream `name`, for a screen to follow
        (`Client.read_stream`, the dashboard): `await run.stream("answer").append(v)`;
        a model adapter feeds it its deltas with `on_text=run.stream("answer")`.
        A replayed append is not appended again (see `stead.streams`)."""
        found = self._streams.get(name)
        if found is None:
            found = self._streams[name] = streams.Stream(self._x, name)
        return found

    @property
    def state(self) -> TaskState:
        """The versioned facts of this run's task (see `stead.Facts`)."""
        return TaskState(self._x, self._task_key)

    @property
    def _task_key(self) -> str:
        return self.task_id if self.task_id is not None else f"run:{self.id}"

    # -- a run's end ------------------------------------------------------------
    async def continue_as_new(self, *args: Any, **kwargs: Any) -> NoReturn:
        """End this run and start its successor: the same workflow and
        version, the same task, these arguments, and an empty journal. For a
        loop that would otherwise grow its journal without bound (an agent's
        turns): pass on what the next run needs in the arguments.

        One transaction ends the run (completed, its result
        `{"continued_as": SUCCESSOR}`) and creates the successor, linked to it
        (`Client.lineage`): a crash keeps both or neither, so a successor is
        never lost nor made twice. Never returns. The successor inherits the
        intent in force, with what is left of its budget."""
        x = self._x
        x.check_live()
        text = codec.dumps({"args": list(args), "kwargs": dict(kwargs)},
                           what=f"the input of workflow {self.workflow!r}")
        if x.check_input is not None:
            x.check_input(text)
        successor = _uuid.uuid4().hex
        intent = self._inherited_intent()
        new = records.NewRun(
            run_id=successor, workflow=self.workflow, version=self.version,
            task_id=self.task_id, input=text, intent=intent,
            intent_why=f"continued from run {self.id}",
            # The same queue, priority and dedup key: the chain is one piece of work.
            queue=self._row.queue, priority=self._row.priority,
            dedup_key=self._row.dedup_key, deadline=self._row.deadline)
        result = codec.dumps({"continued_as": successor}, what="a continuation")
        await x.write((), lambda batch, resume: x.store.continue_run(
            x.fence, batch, resume, result, new,
            batch[-1].seq + 1 if batch else x.length))
        raise Continued(successor)

    def _inherited_intent(self) -> str | None:
        """The intent in force, its budget lowered by what this run spent."""
        ctx = self._x.guard
        if ctx is None or ctx.intent is None:
            return None
        budget, spent = ctx.intent.budget, ctx.ledger
        if budget is not None:
            def left(limit: float | None, used: float) -> Any:
                return None if limit is None else max(type(limit)(0), limit - type(limit)(used))

            # The successor's clock starts when it is created: it gets the
            # seconds this run has not used.
            budget = Budget(model_calls=left(budget.model_calls, spent.model_calls),
                            tokens=left(budget.tokens, spent.tokens),
                            effects=left(budget.effects, spent.effects),
                            spend=left(budget.spend, spent.spend),
                            seconds=None if budget.seconds is None else max(
                                0.0, budget.seconds - ctx.elapsed(self._x.clock.now())))
        return dataclasses.replace(ctx.intent, budget=budget).dumps()

    # -- recorded values (synchronous; they ride along with the next commit) --
    def _value(self, kind: RecordKind, make: Callable[[], str]) -> str:
        addr = addresses.reserve()
        prior = self._x.take(addr, kind, kind, "")
        if prior:
            return prior[-1].payload
        self._x.check_live()
        payload = make()
        self._x.buffer(self._x.record(addr, 1, kind, kind, "", RecordStatus.OK, payload))
        return payload

    def now(self) -> dt.datetime:
        """The current time (UTC), recorded: replay returns the same instant."""
        payload = self._value(
            RecordKind.NOW,
            lambda: codec.dumps(
                dt.datetime.fromtimestamp(self._x.clock.now(), tz=dt.UTC).isoformat(),
                what="now",
            ),
        )
        return dt.datetime.fromisoformat(codec.loads(payload))

    def uuid(self) -> _uuid.UUID:
        """A random UUID, recorded."""
        payload = self._value(RecordKind.UUID, lambda: codec.dumps(str(_uuid.uuid4()), what="uuid"))
        return _uuid.UUID(codec.loads(payload))

    def random(self) -> float:
        """A random float in [0, 1), recorded."""
        payload = self._value(
            RecordKind.RANDOM, lambda: codec.dumps(_random.random(), what="random")
        )
        return float(codec.loads(payload))


async def _traced_step(name: str, call: Callable[[], Awaitable[Any]]) -> Any:
    with tracing.call("step", name):
        return await call()


def _with_reason(data: dict[str, Any], reason: str | None) -> dict[str, Any]:
    return data if reason is None else {**data, "reason": reason}
