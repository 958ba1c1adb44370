"""`Recorder`: the rules of one recorded call (a step or a model call) --
replayed from the journal, retried, counted after a worker died mid-attempt,
re-made when its code changed -- so that `Run` reads as the API."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from stead import addresses, codec, errors, records, stepcode
from stead.execution import Execution, Stop
from stead.metrics import meters
from stead.policy_points import PolicyPoint
from stead.records import Record, RecordKind, RecordStatus, ResumeClass
from stead.retry import NO_RETRY, Retry
from stead.workflow import proposals, streams

if TYPE_CHECKING:
    from stead.policy import Action
    from stead.store.transactions.spend import Settlement

log = logging.getLogger("stead.run")


class Saves(Protocol):
    """What rides with a call's record in its write: a step's workspace
    snapshots (`workspaces.StepSaves`), a model call's request
    (`conversations.keeping.ModelCall`)."""

    def replayed(self, addr: str) -> None: ...

    async def commit(self, addr: str, rec: Record, started: Record,
                     outcome: Settlement | None = None) -> None: ...


def paused(name: str, what: str, changed: Sequence[str], acted: Record) -> Stop:
    """The pause of a run whose step `name` no longer holds (its `what`
    changed) but that `acted` on outside after it."""
    return Stop(records.RunStatus.PAUSED, {
        "type": "Paused", "cause": "revalidate",
        "message": f"step {name!r}'s {what} changed ({'; '.join(changed)}), but {acted.kind} "
                   f"{acted.name!r} (seq {acted.seq}) already happened after it: its result "
                   "cannot simply be made again. Decide: stead runs resume RUN --by WHO --why "
                   "WHY [--intent FILE], or stead runs terminate RUN --by WHO --why WHY",
        "call": name, "after": acted.name, "after_seq": acted.seq})


def _used(addr: str, attempt: int, usage: tuple[int, int]) -> Settlement:
    from stead.store.transactions.spend import Settlement

    return Settlement(addr, attempt, usage[0], usage[1])


def _released(addr: str, attempt: int) -> Settlement:
    from stead.store.transactions.spend import Settlement

    return Settlement(addr, attempt, released=True)


def _died(addr: str) -> Settlement:
    from stead.store.transactions.spend import Settlement

    return Settlement(addr, None)


def _error_payload(exc: BaseException, retry_at: float | None) -> str:
    return codec.dumps(
        {"type": type(exc).__qualname__, "message": str(exc), "retry_at": retry_at},
        what="an error",
    )


@dataclasses.dataclass(frozen=True, slots=True)
class Spend:
    """What a model call reserves before each live attempt (see
    `stead.spend`): its model, its estimate, the run's budget, and how to
    read the tokens it used from its answer."""

    model: str
    input_tokens: int
    output_tokens: int
    run_tokens: int | None
    run_cost: float | None
    usage: Callable[[Any], tuple[int, int]]


def _spend_paused(refused: errors.SpendRefused) -> Stop:
    """The pause of a run whose model call a budget refused."""
    detail = refused.detail
    if detail.get("scope") == "tenant":
        tenant = detail.get("tenant")
        decide = (f"stead tenants set {tenant} --{detail.get('unit')} N --by WHO --why WHY "
                  "(it resumes the tenant's runs paused on spend), or stead runs terminate "
                  "RUN --by WHO --why WHY")
    elif detail.get("unit") == "price":
        decide = (f"stead tenants price {detail.get('model')} --input P --output P, then "
                  "stead runs resume RUN --by WHO --why WHY")
    else:
        field = "tokens" if detail.get("unit") == "tokens" else "model_cost"
        decide = (f"stead runs resume RUN --by WHO --why WHY --intent FILE (with a larger "
                  f"budget.{field}), or stead runs terminate RUN --by WHO --why WHY")
    return Stop(records.RunStatus.PAUSED, {
        "type": "Paused", "cause": "spend", **detail,
        "message": f"{refused}: nothing was sent. Decide: {decide}"})


class Recorder:
    """Records the calls of one run's attempt (`call`)."""

    def __init__(self, execution: Execution, run_id: str) -> None:
        self._x = execution
        self.id = run_id

    async def call(
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
        saves: Saves | None = None,
        code: str | None = None,
        spend: Callable[[], Awaitable[Spend | None]] | None = None,
        arguments: Callable[[], str | None] | None = None,
    ) -> tuple[RecordStatus, str, int]:
        """Return `(status, payload, attempts)` of the call at the next address: from the
        journal if recorded, else by calling it live (with retries) and
        journaling each attempt, with what `arguments` gives (the call's
        arguments as shown: made only for a live call, never replayed)."""
        addr = addresses.reserve()
        prior = await self._x.taken(addr, kind, name, digest)
        if prior and code is not None:
            prior = self._code_changed(addr, name, prior, code)
        attempt = 1
        reserves: Spend | None = None
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
            if spend is not None and not self._x.dry:
                reserves = await spend()
            if retry is not NO_RETRY and died >= retry.attempts:
                payload = codec.dumps({
                    "type": "WorkerDied", "retry_at": None,
                    "message": f"attempt {died} of {retry.attempts} was in flight when its "
                               "worker died; no attempt is left"}, what="an error")
                self._x.check_live()
                await self._settled([self._x.record(addr, died, kind, name, digest,
                                                    RecordStatus.ERROR, payload)], None,
                                    None if reserves is None else _died(addr))
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
        if spend is not None and died is None:
            reserves = await spend()
        if self._x.guard is not None:  # nothing to judge for a run without intent or policy
            from stead.policy import Action

            await self._judged(Action(kind, name, None, {}, reason, digest=digest))
        shown = None if arguments is None else arguments()
        while True:
            await self._x.act()
            if gate is not None:
                gate()
            # Rides along with whatever commits while the call is in flight
            # (another branch's call), and is stored with each lease renewal
            # meanwhile (see `Execution.in_flight`); dropped unwritten if its
            # outcome is first.
            started = self._x.record(addr, attempt, kind, name, digest, RecordStatus.STARTED,
                                     "{}", shown)
            self._x.buffer(started)
            if reserves is not None:
                await self._reserve(reserves, addr, started)
            began = time.perf_counter()
            try:
                with self._x.busy(), streams.live_call(addr, attempt):
                    value = await call()
            except Exception as exc:
                meters.call_took(kind, time.perf_counter() - began, ok=False)
                retry_at = retry.retry_at(attempt, exc, self._x.clock.now())
                payload = _error_payload(exc, retry_at)
                await self._settled(
                    [self._x.record(addr, attempt, kind, name, digest, RecordStatus.ERROR,
                                    payload, shown)], started,
                    None if reserves is None else _released(addr, started.attempt))
                if retry_at is None:
                    return RecordStatus.ERROR, payload, attempt
                await self._x.sleep_until(retry_at)
                attempt += 1
                continue
            except BaseException:
                self._x.unbuffer(started)
                raise
            meters.call_took(kind, time.perf_counter() - began, ok=True)
            try:
                payload = encode(value)
            except BaseException:
                self._x.unbuffer(started)
                raise
            done = self._x.record(addr, attempt, kind, name, digest, RecordStatus.OK, payload,
                                  shown)
            used = None if reserves is None else _used(addr, started.attempt,
                                                         reserves.usage(value))
            if saves is not None:  # what rides with the result (files, the request)
                await saves.commit(addr, done, started, used)
            else:
                await self._settled([done], started, used)
            return RecordStatus.OK, payload, attempt

    async def _reserve(self, spend: Spend, addr: str, started: Record) -> None:
        """Reserve the attempt's estimate, its started marker journaled with
        it, before it is sent; a refusal pauses the run, nothing sent."""
        from stead.store.transactions.spend import Reservation

        x = self._x
        ask = Reservation(addr, started.attempt, spend.model, spend.input_tokens,
                          spend.output_tokens, spend.run_tokens, spend.run_cost)
        try:
            await x.write((), lambda batch, resume: x.store.reserve_spend(
                x.fence, batch, resume, ask))
        except errors.SpendRefused as refused:
            x.unbuffer(started)
            raise _spend_paused(refused) from None
        except errors.QuotaExceeded:
            x.unbuffer(started)
            raise

    async def _settled(self, recs: list[Record], started: Record | None,
                       outcome: Settlement | None) -> None:
        """Journal a call's outcome `recs`; with its reservation's `outcome`
        in the same transaction, when the call reserved."""
        x = self._x
        if outcome is None:
            await x.commit(recs, drop=started)
            return
        await x.write(recs, lambda batch, resume: x.store.settle_spend(
            x.fence, batch, resume, outcome), drop=started)

    async def _judged(self, action: Action) -> None:
        """Before a live step or model call: the takeover's revalidation
        judges it if it is the first, and a model call is judged on its own
        when the app asks (`App(policy_on=("effect", "llm"))`)."""
        x = self._x
        if await x.before_live(action):
            return
        if x.guard is not None and action.kind == RecordKind.LLM \
                and PolicyPoint.LLM in x.guard.points:
            from stead.workflow import judgements

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
            raise paused(name, "code", changed, acted)
        x.reran.append({**entry, "done": records.StaleOutcome.STOPPED})
        raise x.stop_as_incompatible(errors.NonDeterminism(
            f"run {self.id}: step {name!r} at position {addr} (seq {start}) was journaled by "
            f"other code ({changed[0]}), and the app stops on a changed step "
            "(App(changed_steps=\"stop\")). Register the old version alongside the new one, "
            "then `stead runs retry RUN`; or declare `contract=` on the step, or cancel the run.",
            addr=addr, seq=start, expected=f"step {name!r} code {was}",
            actual=f"step {name!r} code {code}"))
