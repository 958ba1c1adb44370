"""`Recorder`: the rules of one recorded call (a step or a model call) --
replayed from the journal, retried, counted after a worker died mid-attempt,
re-made when its code changed -- so that `Run` reads as the API."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from stead import addresses, codec, errors, records, stepcode
from stead.execution import Execution, Stop
from stead.metrics import meters
from stead.policy_points import PolicyPoint
from stead.records import Record, RecordKind, RecordStatus, ResumeClass
from stead.retry import NO_RETRY, Retry
from stead.workflow import proposals, streams

if TYPE_CHECKING:
    from stead.policy import Action
    from stead.workflow import workspaces

log = logging.getLogger("stead.run")


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


def _error_payload(exc: BaseException, retry_at: float | None) -> str:
    return codec.dumps(
        {"type": type(exc).__qualname__, "message": str(exc), "retry_at": retry_at},
        what="an error",
    )


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
        saves: workspaces.StepSaves | None = None,
        code: str | None = None,
        arguments: Callable[[], str | None] | None = None,
    ) -> tuple[RecordStatus, str, int]:
        """Return `(status, payload, attempts)` of the call at the next address: from the
        journal if recorded, else by calling it live (with retries) and
        journaling each attempt, with what `arguments` gives (the call's
        arguments as shown: made only for a live call, never replayed)."""
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
            began = time.perf_counter()
            try:
                with self._x.busy(), streams.live_call(addr, attempt):
                    value = await call()
            except Exception as exc:
                meters.call_took(kind, time.perf_counter() - began, ok=False)
                retry_at = retry.retry_at(attempt, exc, self._x.clock.now())
                payload = _error_payload(exc, retry_at)
                await self._x.commit(
                    [self._x.record(addr, attempt, kind, name, digest, RecordStatus.ERROR,
                                    payload, shown)], drop=started)
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
            if saves is not None:  # the files the step made ride with its result
                await saves.commit(addr, done, started)
            else:
                await self._x.commit([done], drop=started)
            return RecordStatus.OK, payload, attempt

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
