"""`Run.step`, `Run.llm` and `Run.propose`: the calls made once, ever, and
answered from the journal on replay; a step bound to the environment its
result was made in (`stead.Fingerprint`)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, overload

from stead import (
    addresses,
    arguments,
    bounds,
    calls,
    codec,
    digests,
    errors,
    records,
    stepcode,
    tracing,
)
from stead.execution import Stop
from stead.metrics import meters
from stead.records import RecordKind, RecordStatus
from stead.retry import NO_RETRY, Retry
from stead.run import recorder
from stead.run.base import Part
from stead.workflow import fingerprints, proposals
from stead.workflow.fingerprints import Fingerprint, changes

# Annotations only: a model call's types, a workspace's and the guard of a run
# with intent, policy or tools are imported by the calls that use them, so
# `stead worker` starts without them.
if TYPE_CHECKING:
    from stead.conversations import keeping
    from stead.llm.model import Completion, Model
    from stead.workflow import workspaces

T = TypeVar("T")
# What a step's record keeps of its arguments for a person: this many values,
# each in about this many characters (`shown_arguments`).
ARGUMENTS_SHOWN = 20
ARGUMENT_CHARS = 200


def _fresh(fresh: str | Fingerprint | None) -> None:
    if isinstance(fresh, Fingerprint):
        return
    if fresh not in (None, "on_resume", "always"):
        raise ValueError(f"fresh is None, 'on_resume' or 'always', not {fresh!r}")


class Steps(Part):
    """The run's steps and model calls."""

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
                raise recorder.paused(name, "fingerprint", changed, acted)
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
        saves = self._saves
        reads = fingerprints.read(args, kwargs, saves.spaces) if saves is not None and (
            fresh is None or isinstance(fresh, Fingerprint)) else None
        if isinstance(fresh, Fingerprint):
            await self._fingerprint(name, fresh, reads, by_default=False)
            fresh = None
        elif reads is not None:
            await self._fingerprint(name, Fingerprint(), reads, by_default=True)
        payload = await self._recorded(name, fn, args, kwargs, retry, fresh, contract, timeout,
                                       saves if saves is not None and saves.spaces else None)
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

    async def _recorded(
        self, name: str, fn: Callable[..., Any], args: tuple[Any, ...],
        kwargs: dict[str, Any], retry: Retry | None, fresh: str | None,
        contract: str | None, timeout: float | None, saves: recorder.Saves | None,
        kept: keeping.StepCall | None = None,
    ) -> str:
        """The payload of step `name`: journaled, or made and journaled now
        (with what `kept` adds to an SDK's model call); its error raised."""
        code = stepcode.digest(fn)
        digest = stepcode.coded(digests.contracted(
            self._x.digests.call(RecordKind.STEP, name, args, kwargs), contract), code)

        async def call() -> Any:
            if kept is not None:
                kept.sending()
            if timeout is None:
                return await calls.invoke(fn, args, kwargs, inline=True)
            async with asyncio.timeout(timeout):  # no task of its own: not a branch
                return await calls.invoke(fn, args, kwargs)

        def encode(v: Any) -> str:
            return codec.dumps(v if kept is None else kept.encode(v),
                               what=f"the result of step {name!r}",
                               limit=self._x.max_result_bytes)

        status, payload, attempts = await self._recorder.call(
            RecordKind.STEP, name, digest,
            # Traced only when tracing is on: the plain path adds no frame.
            (lambda: _traced_step(name, call)) if tracing.enabled() else call,
            encode, retry or NO_RETRY, self._bound(), fresh, saves=saves, code=code,
            arguments=(lambda: shown_arguments(fn, args, kwargs)) if args or kwargs else None,
        )
        if status == RecordStatus.ERROR:
            self._raise(name, payload, attempts)
        return payload

    async def model_step(self, name: str, fn: Callable[..., Any], *args: Any,
                         said: keeping.Said) -> Any:
        """`step(name, fn, *args)` for a model call an SDK makes (what
        `stead.contrib`'s integrations journal; `fn` returns a JSON object):
        the step's record also keeps what `said` reads of the call, as a
        model call's record does: its answer, and its request unless
        `App(keep_conversation=False)` (stored once per message, with the
        record). `stead runs show RUN --conversation` and the run page show
        it. The step's digest is unchanged: a journal written without it
        replays, and shows no request. In a run with a workspace attached,
        the step keeps its snapshots instead of the request."""
        from stead.conversations import keeping

        spaces = self._saves if self._saves is not None and self._saves.spaces else None
        keeper = None
        if self._x.keep_conversation and spaces is None:
            if self._keeper is None:
                self._keeper = keeping.Keeper(self._x.secrets.mask, self._x.max_result_bytes)
            keeper = self._keeper
        kept = keeping.StepCall(self._x, keeper, said)
        payload = await self._recorded(name, fn, args, {}, None, None, None, None,
                                       kept if keeper is not None else spaces, kept)
        data, model = keeping.model_of(codec.loads(payload))
        if model is not None and self._keeper is not None:
            self._keeper.known(model)
        return data

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
        `stead.workflow.streams` for a try that dies mid-answer). `reason` (why the
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
        asked = params if shape is None else shape(params)
        digest = digests.contracted(
            self._x.digests.llm(name, model.name, messages, asked), contract)
        kept = self._kept(model, messages, asked)

        async def call() -> Completion:
            if kept is not None:
                kept.sending()
            with tracing.model_call(name, model, messages, params) as span, \
                    addresses.outside_branches():
                answer = await (model.complete(messages, **params) if on_text is None
                                else model.complete(messages, on_text=on_text, **params))
                span.answered(answer)
                meters.tokens(answer.usage)
                return answer

        def encode(c: Completion) -> str:
            data = _with_reason(c.to_json(), reason)
            return codec.dumps(data if kept is None else kept.encode(data),
                               what=f"the completion of {name!r}",
                               limit=self._x.max_result_bytes)

        status, payload, attempts = await self._recorder.call(
            RecordKind.LLM, name, digest, call, encode,
            retry or NO_RETRY, self._bound(model_call=True), fresh, reason, saves=kept,
            spend=self._spend(model, messages, params),
        )
        if status == RecordStatus.ERROR:
            self._raise(name, payload, attempts)
        from stead.llm.model import Completion

        data = codec.loads(payload)
        if self._keeper is not None:
            self._keeper.known(data)
        return Completion.from_json(data)

    def _kept(self, model: Model, messages: Sequence[Mapping[str, Any]],
              params: Mapping[str, Any]) -> keeping.ModelCall | None:
        """The request of a model call, to keep with its record (None: the
        app keeps no conversation, `App(keep_conversation=False)`)."""
        if not self._x.keep_conversation:
            return None
        from stead.conversations import keeping

        if self._keeper is None:
            self._keeper = keeping.Keeper(self._x.secrets.mask, self._x.max_result_bytes)
        return keeping.ModelCall(self._x, self._keeper, model, messages, params)

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
        (`stead.workflow.proposals`). `reason` reaches the policy, as with `llm`."""
        return await self.llm(name, proposals.Proposing(model, self._x, self._task_key),
                              messages, retry=retry, fresh="on_resume", reason=reason,
                              contract=contract, **params)

    def _spend(self, model: Model, messages: Sequence[Mapping[str, Any]],
               params: Mapping[str, Any]) -> Callable[[], Awaitable[recorder.Spend | None]]:
        """What a live attempt of this model call reserves (see
        `stead.spend`), asked only when it goes live: for a run of a tenant,
        or whose budget bounds its tokens or model cost; None: nothing."""
        async def spend() -> recorder.Spend | None:
            x = self._x
            budget = None if x.guard is None or x.guard.intent is None else x.guard.intent.budget
            run_tokens = None if budget is None else budget.tokens
            run_cost = None if budget is None else budget.model_cost
            if run_tokens is None and run_cost is None and await x.tenant() is None:
                return None
            from stead import spend

            input_tokens, output_tokens = spend.estimate(messages, params)
            return recorder.Spend(model.name, input_tokens, output_tokens, run_tokens,
                                  run_cost, _usage)

        return spend

    def _bound(self, *, model_call: bool = False) -> Callable[[], None] | None:
        """Before each live attempt of a model call or step: stop the run
        (paused) once its authority lapsed or its budget is spent (see
        `guard.bound`). A replayed call never gets here; a run without intent
        or policy under an app without tools has nothing to check."""
        x = self._x
        if x.guard is None and x.tools is None:
            return None
        from stead import guard

        def gate() -> None:
            halt = guard.bound(x.guard, x.tools, x.clock.now(), model_call=model_call)
            if halt is not None:
                raise Stop(halt.status, halt.error)

        return gate


def _preview(value: Any, room: int) -> Any:
    """`value` as JSON values in about `room` characters: text cut with `…`,
    a list's or object's items until the room is spent, then how many more;
    never encoding more of a large value than it keeps."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return value if len(value) <= room else value[:max(room - 1, 0)] + "…"
    if isinstance(value, list | tuple | Mapping):
        items = list(value.items()) if isinstance(value, Mapping) else list(enumerate(value))
        kept: list[tuple[Any, Any]] = []
        for i, (k, v) in enumerate(items):
            if room <= 0:
                kept.append(("…", f"{len(items) - i} more"))
                break
            shown = _preview(v, room)
            room -= len(json.dumps(shown, ensure_ascii=False, default=str)) + 1
            kept.append((k, shown))
        if isinstance(value, Mapping):
            return {str(k): v for k, v in kept}
        return [f"… {v}" if k == "…" else v for k, v in kept]
    try:  # a dataclass, a pydantic model, a datetime: its JSON form
        text = codec.dumps(value, what="a step's argument", secrets=codec.UNCHECKED)
    except errors.SerializationError:
        return f"<{type(value).__qualname__}>"
    return _preview(json.loads(text), room)


def shown_arguments(fn: Callable[..., Any], args: Sequence[Any],
                    kwargs: Mapping[str, Any]) -> str | None:
    """A step's arguments as its record keeps them for a person (see
    `Record.arguments`): `{"args", "kwargs", "names"}`, each positional value
    named by `fn`'s signature bound at the call (`stead.arguments`), at most
    `ARGUMENTS_SHOWN` values of `ARGUMENT_CHARS` characters each, the run's
    live secrets masked. None when it cannot be encoded (nothing is shown)."""
    kept_args = [_preview(v, ARGUMENT_CHARS) for v in list(args)[:ARGUMENTS_SHOWN]]
    room = max(ARGUMENTS_SHOWN - len(kept_args), 0)
    kept_kwargs = {str(k): _preview(v, ARGUMENT_CHARS) for k, v in list(kwargs.items())[:room]}
    data: dict[str, Any] = {"args": kept_args, "kwargs": kept_kwargs}
    named = arguments.names(fn, args, kwargs, skip=0)
    if named is not None:
        data["names"] = named[:len(kept_args)]
    dropped = len(args) + len(kwargs) - len(kept_args) - len(kept_kwargs)
    if dropped:
        data["kwargs"]["…"] = f"{dropped} more"
    try:
        text = codec.dumps(data, what="a step's arguments", secrets=codec.UNCHECKED)
    except errors.SerializationError:  # a NaN: shown as nothing rather than fail the step
        return None
    return codec.masked(text)


async def _traced_step(name: str, call: Callable[[], Awaitable[Any]]) -> Any:
    with tracing.call("step", name):
        return await call()


def _usage(answer: Completion) -> tuple[int, int]:
    return answer.usage.input_tokens, answer.usage.output_tokens


def _with_reason(data: dict[str, Any], reason: str | None) -> dict[str, Any]:
    return data if reason is None else {**data, "reason": reason}
