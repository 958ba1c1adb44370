"""Effects: write-ahead intents, outcomes, and what a takeover does with each.

An effect's records at its address, in order, tell its phase:

    intent(n) [accepted(n)] ok(n) | error(n) | unknown(n) | reconciled(n)

The intent is committed *before* the function runs, so after a crash the
journal always says whether the effect may have been sent. A takeover
classifies it (see docs/architecture.md):

- no records                    → not_started: send it
- ok / error / reconciled last  → reuse the recorded outcome
- accepted last                 → pending_external: ask `check` about the
                                  external id; never resubmit
- intent or unknown last        → outcome_unknown: resend with the same key if
                                  idempotent, else ask `check`, else stop the
                                  run for a human to reconcile

Not knowing whether it happened is never treated as "it did not happen".
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import inspect
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from stead import addresses, calls, codec, digests, errors, outcomes, tracing
from stead.arguments import names as parameter_names
from stead.execution import Execution, Stop
from stead.metrics import meters
from stead.metrics.meters import EffectOutcome
from stead.outcomes import Compensation, Operation, Outcome
from stead.records import (
    EffectReplay,
    Record,
    RecordKind,
    RecordStatus,
    ResumeClass,
    RunStatus,
)
from stead.retry import NO_RETRY, Retry

if TYPE_CHECKING:
    from stead.intent import Grant

# Exceptions that say "I cannot tell whether it happened", not "it failed".
DEFAULT_UNCERTAIN: tuple[type[BaseException], ...] = (TimeoutError, errors.OutcomeUncertain)


@dataclasses.dataclass(frozen=True)
class Spec:
    name: str
    fn: Callable[..., Any]
    args: Sequence[Any]
    kwargs: Mapping[str, Any]
    key: str | None
    check: Callable[[Operation], Any] | None
    idempotent: bool
    retry: Retry
    timeout: float | None
    poll_every: float
    uncertain: tuple[type[BaseException], ...]
    # The tool it calls (sent only under a covering, unexpired grant), why
    # (for the policy), and what it costs (counted against the budget).
    tool: str | None = None
    reason: str | None = None
    cost: float | None = None
    # Seconds from the first send during which the receiver dedups the key
    # (None: for ever); past it an unknown outcome is not resent.
    dedup_window: float | None = None
    # What undoes it, once a person reconciles it as to be compensated.
    compensate: Compensation | None = None
    # Folded into the digest (see `digests.contracted`).
    contract: str | None = None


def _named(annotation: Any) -> str:
    """A type as its reader wrote it: `CallToolResult`, `dict[str, Any] | None`."""
    if isinstance(annotation, type):
        return annotation.__qualname__
    return str(annotation).replace("typing.", "")


def _payload(rec: Record) -> dict[str, Any]:
    data = codec.loads(rec.payload)
    return data if isinstance(data, dict) else {"value": data}


class Effect:
    """One effect at one address, driven to a known outcome."""

    def __init__(self, x: Execution, addr: str, spec: Spec) -> None:
        self.x = x
        self.addr = addr
        self.spec = spec
        self.digest = digests.contracted(
            x.digests.call(RecordKind.EFFECT, spec.name, spec.args, spec.kwargs), spec.contract)
        self.args_json = codec.loads(
            codec.dumps({"args": list(spec.args), "kwargs": dict(spec.kwargs)},
                        what=f"the arguments of effect {spec.name!r}")
        )
        # As journaled: with each positional value's parameter name, so a
        # person reads `order_id: "o-7731"`, not `["o-7731"]`.
        named = parameter_names(spec.fn, spec.args, spec.kwargs)
        self.recorded = self.args_json if named is None else {**self.args_json, "names": named}
        self.key = spec.key or f"{x.fence.run_id}:{addr}"
        self.rtype = codec.return_type(spec.fn)
        self.first_sent: float | None = None  # when the key was first sent (its intent)

    # -- journal ------------------------------------------------------------
    async def _write(self, attempt: int, status: RecordStatus, payload: dict[str, Any]) -> None:
        text = codec.dumps(payload, what=f"the outcome of effect {self.spec.name!r}")
        await self.x.commit([self.x.record(
            self.addr, attempt, RecordKind.EFFECT, self.spec.name, self.digest, status, text,
        )])
        if status == RecordStatus.OK:
            meters.effect(EffectOutcome.DONE)
        elif status == RecordStatus.ERROR:
            meters.effect(EffectOutcome.FAILED)

    def _result(self, payload: dict[str, Any]) -> Any:
        return codec.convert(payload.get("result"), self.rtype)

    def _recorded(self, payload: dict[str, Any]) -> Any:
        """The journaled outcome, as the declared return type."""
        try:
            return self._result(payload)
        except ValueError as exc:  # pydantic's ValidationError is a ValueError
            # The journal holds an outcome the declared type no longer accepts.
            raise self.x.stop_as_incompatible(errors.NonDeterminism(
                f"run {self.x.fence.run_id}: the recorded result of effect "
                f"{self.spec.name!r} does not fit its declared return type {self.rtype!r} any "
                f"more ({codec.describe(exc)}). Register the old version alongside the new "
                "one, or migrate the run; or cancel it.",
                addr=self.addr, expected=f"effect {self.spec.name!r} returning what it "
                "journaled", actual=f"effect {self.spec.name!r} returning {self.rtype!r}",
            )) from exc

    # -- the state machine ----------------------------------------------------
    async def run(self) -> Any:
        recs = await self.x.taken(self.addr, RecordKind.EFFECT, self.spec.name, self.digest)
        self.first_sent = next((r.at for r in recs if r.status == RecordStatus.INTENT), None)
        if not recs:
            self.x.classify(ResumeClass.NOT_STARTED)
            with self._traced(ResumeClass.NOT_STARTED):
                return await self._send(1)
        last = recs[-1]
        data = _payload(last)
        if last.status in (RecordStatus.OK, RecordStatus.ERROR, RecordStatus.RECONCILED):
            self._noted(EffectReplay.REUSED)
        if last.status == RecordStatus.OK:
            self.x.classify(ResumeClass.REUSE)
            return self._recorded(data)
        if last.status == RecordStatus.ERROR:
            self.x.classify(ResumeClass.REUSE)
            return await self._after_failure(last.attempt, data)
        if last.status == RecordStatus.RECONCILED:
            self.x.classify(ResumeClass.REUSE)
            return await self._after_reconcile(last.attempt, data)
        if last.status == RecordStatus.ACCEPTED:
            self.x.classify(ResumeClass.PENDING_EXTERNAL)
            with self._traced(ResumeClass.PENDING_EXTERNAL):
                return await self._resolve(last.attempt, str(data["external_id"]))
        self.x.classify(ResumeClass.OUTCOME_UNKNOWN)  # intent or unknown last
        with self._traced(ResumeClass.OUTCOME_UNKNOWN):
            return await self._resolve(last.attempt, None)

    def _traced(self, cls: ResumeClass) -> contextlib.AbstractContextManager[None]:
        """The effect's span, when it acts or asks live (a reused outcome has none)."""
        return tracing.call("effect", self.spec.name, key=self.key, **{"class": str(cls)})

    async def _send(self, attempt: int, *, resend: bool = False) -> Any:
        # A resend follows an outcome not known yet: no cancel stops it there.
        await self.x.act(boundary=not resend)
        intent: dict[str, Any] = {
            "key": self.key, "arguments": self.recorded, "idempotent": self.spec.idempotent,
            "resend": resend,
        }
        if self.spec.dedup_window is not None:
            intent["dedup_window"] = self.spec.dedup_window
        if self.first_sent is None:
            self.first_sent = self.x.clock.now()
        for name in ("tool", "reason", "cost"):
            if getattr(self.spec, name) is not None:
                intent[name] = getattr(self.spec, name)
        if self.x.guard is None and self.spec.tool is None and self.x.tools is None:
            await self._write(attempt, RecordStatus.INTENT, intent)
            grant = None
        else:
            grant = await self._authorised(attempt, intent)
        with self.x.effect_open():  # a run that stops waits for its outcome
            return await self._call(attempt, grant)

    async def _call(self, attempt: int, grant: Grant | None) -> Any:
        # Its intent is journaled: if the worker lost its presence meanwhile,
        # send only once it is sure again that the run is still its own.
        await self.x.act(boundary=False)
        op = self._operation(attempt, None, live=True, grant=grant)
        in_thread = not calls.is_async(self.spec.fn)
        began = time.perf_counter()
        try:
            call = outcomes.sending(self.spec.name, calls.invoke(
                self.spec.fn, (op, *self.spec.args), self.spec.kwargs))
            # wait_for runs the call in a task of its own: the runtime's, live
            # only, so not a branch (see `addresses`).
            with self.x.sending(in_thread=in_thread), addresses.outside_branches():
                try:
                    value = await asyncio.wait_for(call, self.spec.timeout)
                finally:
                    meters.call_took("effect", time.perf_counter() - began,
                                     ok=sys.exc_info()[0] is None)
        except self.spec.uncertain as exc:
            # An error may quote what was sent (a link with its token): masked.
            await self._write(attempt, RecordStatus.UNKNOWN, {
                "reason": f"{type(exc).__qualname__}: {self.x.secrets.mask(str(exc))}"
                if str(exc) else type(exc).__qualname__,
            })
            return await self._resolve(attempt, op.external_id)
        except Exception as exc:
            return await self._failed(attempt, type(exc).__qualname__,
                                      self.x.secrets.mask(str(exc)), exc)
        return await self._done(attempt, value)

    async def _done(self, attempt: int, value: Any, *, checked: bool = False) -> Any:
        """Journal `value` as the effect's result (`checked`: as its check
        said), and return it as the declared type."""
        try:
            text = codec.dumps(value, what=f"the result of effect {self.spec.name!r}",
                               limit=self.x.max_result_bytes)
        except errors.SerializationError as exc:
            # It happened, but what it returned cannot be journaled: say so at
            # once, and stop before the workflow goes past an unrecorded effect.
            known = f"it happened, but its result cannot be stored ({exc})"
            await self._write(attempt, RecordStatus.UNKNOWN, {"reason": known})
            self._stop(attempt, known)
        if checked:
            # What the check says happened must be what `fn` would have
            # returned: anything else would be journaled as done and fail the
            # run on every replay.
            try:
                codec.decode(text, self.rtype)
            except ValueError as exc:  # pydantic's ValidationError is a ValueError
                raise errors.InvalidCheckResult(
                    f"check of effect {self.spec.name!r} answered Outcome.done with a result "
                    f"that does not fit the effect's return type {_named(self.rtype)} "
                    f"({codec.describe(exc)})") from exc
        await self._write(attempt, RecordStatus.OK, {"result": codec.loads(text)})
        return codec.decode(text, self.rtype)

    async def _failed(self, attempt: int, kind: str, message: str,
                      exc: BaseException | None = None) -> Any:
        probe = exc if exc is not None else RuntimeError(message)
        retry_at = self.spec.retry.retry_at(attempt, probe, self.x.clock.now())
        payload = {"type": kind, "message": message, "retry_at": retry_at}
        await self._write(attempt, RecordStatus.ERROR, payload)
        return await self._after_failure(attempt, payload)

    async def _after_failure(self, attempt: int, data: dict[str, Any]) -> Any:
        retry_at = data.get("retry_at")
        if retry_at is None:
            raise errors.EffectFailed(self.spec.name, str(data.get("type")),
                                      str(data.get("message")), attempts=attempt)
        self.x.check_live()
        await self.x.sleep_until(float(retry_at))
        return await self._send(attempt + 1)

    async def _after_reconcile(self, attempt: int, data: dict[str, Any]) -> Any:
        decision = data.get("decision")
        if decision == "happened":
            try:
                return self._result(data)
            except ValueError as exc:  # pydantic's ValidationError is a ValueError
                # A mistyped decision must not fail the run: stop it again and
                # let a person decide once more.
                self._stop(attempt, f"the decided result does not fit the effect's "
                                    f"return type ({exc}); reconcile it again")
        if decision == "not_happened":
            return await self._send(attempt + 1)
        undo = self.spec.compensate
        if undo is None:  # undone outside: the decision says how
            raise errors.EffectCompensated(self.spec.name, self.key, data.get("result"))
        # The compensation is an effect of its own, at an address of its own:
        # journaled, classified on takeover and reconciled like any other.
        spec = self.spec
        compensation = Effect(self.x, f"{self.addr}.compensate", Spec(
            name=f"{spec.name}.compensate", fn=undo.fn, args=spec.args, kwargs=spec.kwargs,
            key=f"{self.key}:compensate", check=undo.check, idempotent=undo.idempotent,
            retry=NO_RETRY, timeout=spec.timeout, poll_every=spec.poll_every,
            uncertain=spec.uncertain, reason="compensation"))
        result = await compensation.run()
        raise errors.EffectCompensated(spec.name, self.key, data.get("result"), result)

    async def _resolve(self, attempt: int, external_id: str | None) -> Any:
        """The outcome of `attempt` is not known: find it out, or stop."""
        late = self._past_window()
        if external_id is None and self.spec.idempotent and late is None:
            self._noted(EffectReplay.RESENT, key=self.key)
            return await self._send(attempt + 1, resend=True)
        if self.spec.check is None:
            self._noted(EffectReplay.LEFT_UNKNOWN, key=self.key, external_id=external_id)
            known = ("accepted outside as " + external_id) if external_id else "sent or not"
            self._stop(attempt, f"{known}; no outcome recorded and "
                                f"{late or 'no check to ask'}")
        self._noted(EffectReplay.POLLED if external_id else EffectReplay.CHECKED,
                    external_id=external_id)
        delay = self.spec.poll_every
        while True:
            await self.x.act(boundary=False)
            try:
                outcome = await self._ask(attempt, external_id)
                if outcome.kind == Outcome.DONE:
                    return await self._done(attempt, outcome.result, checked=True)
            except errors.InvalidCheckResult as exc:
                self._stop(attempt, f"{exc}; nothing was recorded: fix the check, then "
                                    "`stead runs retry RUN` asks it again",
                           kind="InvalidCheckResult")
            if outcome.kind == Outcome.FAILED:
                return await self._failed(attempt, "Failed", outcome.message)
            if outcome.kind == Outcome.NOT_FOUND and external_id is None:
                # "Not found" proves nothing while the run's previous holder
                # may still be sending it: ask again once it surely is not.
                if await self.x.outlive_previous_holder(
                        f"effect {self.spec.name!r} was not found by its check"):
                    continue
                return await self._send(attempt + 1)
            if outcome.kind == Outcome.PENDING:
                with self.x.busy():  # polling the outside is live work
                    await asyncio.sleep(delay)
                delay = min(delay * 1.5, 60.0)
                continue
            said = "not found, though it was accepted" if outcome.kind == Outcome.NOT_FOUND \
                else f"unknown{': ' + outcome.message if outcome.message else ''}"
            self._stop(attempt, f"check said {said}")

    def _noted(self, done: EffectReplay, **detail: str | None) -> None:
        """Tell the resume record what replay did with this effect."""
        self.x.note_effect({"name": self.spec.name, "addr": self.addr, "done": str(done),
                            **{k: v for k, v in detail.items() if v is not None}})

    def _past_window(self) -> str | None:
        """Why the key may no longer be resent (its dedup window has passed
        since it was first sent); None while it may."""
        window, first = self.spec.dedup_window, self.first_sent
        if window is None or first is None or self.x.clock.now() - first <= window:
            return None
        sent = dt.datetime.fromtimestamp(first, tz=dt.UTC).isoformat(timespec="seconds")
        return (f"its key's dedup window ({dt.timedelta(seconds=window)}) has passed since "
                f"it was first sent at {sent}: a resend could act twice, and there is no "
                "check to ask")

    async def _ask(self, attempt: int, external_id: str | None) -> Outcome:
        assert self.spec.check is not None
        op = self._operation(attempt, external_id, live=False)
        try:
            with self.x.busy():
                answer = await calls.invoke(self.spec.check, (op,), {})
        except errors.InvalidCheckResult:  # it answered, in the wrong shape
            raise
        except Exception as exc:  # a check that cannot answer knows nothing
            return Outcome.unknown(f"check raised {type(exc).__qualname__}: {exc}")
        if not isinstance(answer, Outcome):
            raise errors.SteadError(
                f"check of effect {self.spec.name!r} returned {answer!r}; return a "
                "stead.Outcome (done, not_found, pending, failed or unknown)"
            )
        return answer

    # -- the decision context ------------------------------------------------
    def arguments(self) -> dict[str, Any]:
        """The call's arguments by parameter name (JSON, as journaled): what a
        grant's scope and the policy see."""
        args, kwargs = self.args_json["args"], self.args_json["kwargs"]
        try:
            bound = inspect.signature(self.spec.fn).bind_partial(None, *args, **kwargs)
        except (TypeError, ValueError):
            return dict(kwargs)
        params = inspect.signature(self.spec.fn).parameters
        named: dict[str, Any] = {}
        for i, (name, value) in enumerate(bound.arguments.items()):
            if i == 0:
                continue  # the Operation
            if params[name].kind == inspect.Parameter.VAR_KEYWORD:
                named.update(value)
            elif params[name].kind != inspect.Parameter.VAR_POSITIONAL:
                named[name] = value
        return named

    async def _authorised(self, attempt: int, intent: dict[str, Any]) -> Grant | None:
        """Check budget, policy and grant, then commit the intent; the grant
        it commits under (None without `tool`). Anything refused stops the
        run (paused, or revalidation_failed on a policy's Terminate) with
        nothing sent."""
        # Imported by the first effect sent: a worker whose runs send none
        # does not load the intent and policy modules.
        from stead import guard
        from stead.policy import Action
        from stead.workflow import judgements

        x, spec, ctx = self.x, self.spec, self.x.guard
        arguments = self.arguments()
        now = x.clock.now()
        if spec.tool is None:
            halt = guard.bound(ctx, x.tools, now)
        else:  # its own grant is checked at commit, naming the grant that lapsed
            halt = None if ctx is None else ctx.clock_halt(now)
        if halt is not None:
            raise Stop(halt.status, {**halt.error, "effect": spec.name})
        if ctx is not None:
            halt = ctx.budget_halt(effect=True, cost=spec.cost)
            if halt is None:
                action = Action(RecordKind.EFFECT, spec.name, spec.tool, arguments, spec.reason,
                                spec.cost, self.digest)
                # The takeover's revalidation judges the first live action;
                # every other effect is judged on its own.
                if not await x.before_live(action):
                    halt = await judgements.judge(x, action)
            if halt is not None:
                raise Stop(halt.status, {**halt.error, "effect": spec.name})
        rec = x.record(self.addr, attempt, RecordKind.EFFECT, spec.name, self.digest,
                       RecordStatus.INTENT,
                       codec.dumps(intent, what=f"the intent of effect {spec.name!r}"))
        if spec.tool is None:
            await x.commit([rec])
            return None
        check, chosen = guard.covering(spec.tool, arguments, x.matchers)
        try:
            await x.write([rec], lambda batch, resume: x.store.guarded_append(
                x.fence, batch, resume, check))
        except errors.GrantRefused as exc:
            halt = guard.paused("grant", f"effect {spec.name!r} was not sent: {exc}",
                                tool=spec.tool, arguments=arguments)
            raise Stop(halt.status, {**halt.error, "effect": spec.name}) from None
        return chosen[0]

    def _operation(self, attempt: int, external_id: str | None, *, live: bool,
                   grant: Grant | None = None) -> Operation:
        async def accepted(ext: str) -> None:
            await self._write(attempt, RecordStatus.ACCEPTED, {"external_id": ext})

        return Operation(
            run_id=self.x.fence.run_id, name=self.spec.name, key=self.key, attempt=attempt,
            fencing_token=self.x.fence.epoch, external_id=external_id,
            on_accepted=accepted if live else None,
            loop=asyncio.get_running_loop(), grant=grant,
        )

    def _stop(self, attempt: int, known: str, *, kind: str = "OutcomeUnknown") -> NoReturn:
        meters.effect(EffectOutcome.UNKNOWN)
        raise Stop(RunStatus.OUTCOME_UNKNOWN, {
            "type": kind,
            "message": (
                f"effect {self.spec.name!r} (key {self.key}, attempt {attempt}): {known}. "
                "Find out what happened, then reconcile: stead reconcile RUN "
                f"{self.spec.name} --happened JSON | --not-happened | --compensate JSON"
            ),
            "effect": self.spec.name,
            "key": self.key,
            "addr": self.addr,
            "attempt": attempt,
            "arguments": self.recorded,
            "known": known,
            # Whether a retry asks the effect's check again (without one it stops again).
            "checked": self.spec.check is not None,
        })

