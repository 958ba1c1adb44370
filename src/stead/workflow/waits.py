"""Waits, events and the resume contract (see docs/architecture.md).

`w = await run.wait(kind, bind=..., expires_in=..., schema=...)` journals a wait
with a stable `wait_id` and an unguessable token; `await w` returns the one
event accepted for it, or raises `WaitExpired` / `WaitRevoked`. While nothing
has arrived the run is suspended: no lease, no task, no worker.

A delivery is judged by `judge` inside one store transaction, so the check
and the consumption of the wait cannot be split by a crash or a race.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import json
import re
import urllib.parse
from collections.abc import Generator
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from stead import bounds, codec, errors, keys, outcomes, policy_binding, schema_check
from stead.payloads.envelope import What
from stead.records import (
    POLICY_VERSION_KEY,
    DeliveryContext,
    EventRow,
    Judgement,
    Record,
    RecordKind,
    RecordStatus,
    RejectReason,
    Verdict,
    WaitRow,
    WaitState,
)

if TYPE_CHECKING:
    # For the annotations alone: a client reading runs need not load what executes them.
    from stead.execution import Execution

T = TypeVar("T")

# The bind key compared with the task state's current version at delivery.
STATE_VERSION_KEY = "state_version"
# Deliveries with a wrong token a wait takes before it locks (`Client(lock_wait_after=)`).
LOCK_AFTER_BAD_TOKENS = 5
# The longest request a wait row keeps, as JSON text: what a person is shown
# to decide on, not a store of documents (the journal keeps the whole value).
REQUEST_CHARS = 4000


def request_text(request: Any) -> str | None:
    """A wait's request as the wait row keeps it: its JSON, or, past
    `REQUEST_CHARS`, a string of the JSON's beginning and its length. Refused
    (`SecretInJournal`) if it holds one of the run's live tokens."""
    if request is None:
        return None
    text = codec.dumps(request, what="the wait's request")
    if len(text) <= REQUEST_CHARS:
        return text
    return json.dumps(f"{text[:REQUEST_CHARS - 40]}… ({len(text):,} characters in all)")


# -- verdicts --------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Accepted:
    """The event was accepted: it consumed the wait and wakes the run."""

    event_id: str
    wait_id: str


@dataclasses.dataclass(frozen=True)
class Duplicate:
    """An event with this id was accepted before, by wait `wait_id`; nothing
    happened again. `original_event_id` is the id of the event stored then
    (redelivery is recognised by the event id), `received_at` when it was.
    (A redelivered event that was *rejected* is judged again instead.)"""

    event_id: str
    wait_id: str | None
    original_event_id: str
    received_at: float


@dataclasses.dataclass(frozen=True)
class Rejected:
    """The event was stored and refused, for `reason`."""

    event_id: str
    reason: RejectReason
    detail: str = ""

    def __str__(self) -> str:
        return f"rejected: {self.reason.replace('_', ' ')}" + (
            f" ({self.detail})" if self.detail else "")


Delivery = Accepted | Duplicate | Rejected


# -- tokens -----------------------------------------------------------------------
class Token:
    """An approval token, for the human channel. Its text form is not the
    secret (`Token(wait=..., ****)`), so an f-string, a log line or a stored
    value never holds it; passed to a step or effect it is journaled as a
    reference to its wait. The value itself comes out only through `reveal()`,
    inside the function of the effect that sends it."""

    __slots__ = ("_label", "_value", "key_id", "wait_id")

    def __init__(self, value: str | None, wait_id: str, key_id: str = keys.LEGACY,
                 label: str | None = None) -> None:
        self._value = value  # None: the key that signed it is no longer held
        self.wait_id = wait_id
        self.key_id = key_id
        # The wait's id in the journal (a fork's wait has an id of its own in
        # the store): what the token stands for in what is journaled.
        self._label = label or wait_id

    def reveal(self) -> str:
        """The token's value, to send it. Only inside an effect's function:
        anywhere else it could be journaled, so asking raises `TokenHidden`."""
        effect = outcomes.sending_effect()
        if effect is None:
            raise errors.TokenHidden(
                f"the token of wait {self.wait_id} is revealed only inside an effect's "
                "function (the effect that sends it): pass the Token (or the Wait) to "
                "run.effect(..., fn, w.token) and call token.reveal() or w.link(url) in fn"
            )
        if self._value is None:
            raise errors.TokenHidden(
                f"the token of wait {self.wait_id} was signed by key {self.key_id}, which "
                "is revoked or no longer held: it cannot be sent again")
        return self._value

    def __repr__(self) -> str:
        return f"Token(wait={self.wait_id}, ****)"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return format(repr(self), spec)

    def __reduce__(self) -> Any:
        raise TypeError("a wait token cannot be pickled: it is a secret")

    def __stead_redacted__(self) -> str:
        return f"<token of wait {self._label}>"


_PREFIX = "stk1"
# Both token shapes (`stk1.<key id>.<mac>`, legacy `stk_<mac>`), wherever they
# appear in a text: what a screen shows in their place.
TOKEN_TEXT = re.compile(rf"{_PREFIX}\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+|stk_[A-Za-z0-9_-]{{8,}}")


def sign(key: keys.Key, run_id: str, wait_id: str) -> str:
    """The token of `wait_id` under `key`: `stk1.<key id>.<mac>` (a legacy
    key signs the `stk_<mac>` tokens made before keys had ids)."""
    if key.id == keys.LEGACY:
        mac = hmac.new(key.secret, f"{run_id}:{wait_id}".encode(), hashlib.sha256).digest()
        return "stk_" + base64.urlsafe_b64encode(mac).decode().rstrip("=")
    message = f"{key.id}:{run_id}:{wait_id}".encode()
    mac = hmac.new(key.secret, message, hashlib.sha256).digest()
    return f"{_PREFIX}.{key.id}.{base64.urlsafe_b64encode(mac).decode().rstrip('=')}"


def key_of(token: str) -> str | None:
    """The id of the key that signed `token` (None: not a token's shape)."""
    if token.startswith(_PREFIX + "."):
        parts = token.split(".")
        return parts[1] if len(parts) == 3 and parts[1] else None
    return keys.LEGACY if token.startswith("stk_") else None


def mint(ring: keys.Keyring, key_id: str | None, run_id: str, wait_id: str,
         secrets: codec.Secrets, label: str | None = None) -> tuple[Token, str | None]:
    """The token of a wait and its hash (what the store keeps): signed by the
    current key (`key_id` None, a new wait), or again by the key that signed it
    (a replay). Its value joins the run's live `secrets`, never stored."""
    key = ring.current if key_id is None else ring.get(key_id)
    if key is None:
        assert key_id is not None
        return Token(None, wait_id, key_id, label), None
    value = sign(key, run_id, wait_id)
    secrets.add(value, wait_id)
    return Token(value, wait_id, key.id, label), token_hash(value)


def token_refusal(ring: keys.Keyring, token: str | None) -> str | None:
    """Why `token` is refused before any wait is looked at (None: it may be
    checked against the wait's hash): its key is revoked or unknown."""
    if token is None:
        return None
    kid = key_of(token)
    if kid is None:
        return "not a wait token"
    if not ring.accepts(kid):
        return f"signed by key {kid}, which is revoked or unknown"
    return None


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


# -- the resume contract ------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Operator:
    """An operator who delivers an event in place of the wait's token: `by`
    (who) and `why` are stored with the event, which the audit then shows as
    the operator's decision, not the human's. Whoever can hand it to a
    `Client` can already change the database: it is for the dashboard (after
    its login) and for webhooks signed with stead's key, not for end users."""

    by: str
    why: str

    def __post_init__(self) -> None:
        if not (isinstance(self.by, str) and self.by.strip()
                and isinstance(self.why, str) and self.why.strip()):
            raise errors.InvalidInput(
                "an operator's delivery says who made it (by) and why: give both")
        bounds.text(self.by, "an operator's name (by)")
        bounds.text(self.why, "an operator's reason (why)")


@dataclasses.dataclass(frozen=True)
class Known(Generic[T]):
    """A value known to the deliverer (which may be None itself)."""

    value: T


@dataclasses.dataclass(frozen=True)
class Incoming:
    run_id: str
    event_id: str
    wait_id: str | None
    kind: str | None
    payload: Any
    bind: dict[str, Any]
    token: str | None
    # Why the token is refused whatever the wait (its key is revoked), if it is.
    token_refused: str | None = None
    lock_after: int = LOCK_AFTER_BAD_TOKENS
    # The delivering app's current policy version (None: it has no policy);
    # not known when the client delivering has no app.
    policy: Known[str | None] | None = None
    # An operator vouches for the event: the wait's token is not asked for.
    operator: Operator | None = None


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _reject(reason: RejectReason, detail: str = "") -> Judgement:
    return Judgement(Verdict.REJECTED, reason=reason, detail=detail)


def _find_wait(inc: Incoming, ctx: DeliveryContext) -> WaitRow | Judgement:
    if inc.wait_id is not None:
        by_id = [w for w in ctx.waits if w.wait_id == inc.wait_id]
        if not by_id:
            return _reject(RejectReason.WRONG_WAIT, f"run has no wait {inc.wait_id}")
        wait = by_id[0]
        if inc.kind is not None and inc.kind != wait.kind:
            return _reject(RejectReason.WRONG_EVENT_TYPE,
                           f"wait {wait.wait_id} awaits {wait.kind!r}")
        return wait
    if inc.kind is None:
        return _reject(RejectReason.WRONG_WAIT, "name the wait (wait_id) or its kind")
    of_kind = [w for w in ctx.waits if w.kind == inc.kind]
    open_of_kind = [w for w in of_kind if w.state == WaitState.OPEN]
    if len(open_of_kind) > 1:
        # Several open waits of that kind: the event's bound values say which.
        fits = [w for w in open_of_kind
                if _canonical(json.loads(w.bind)) == _canonical(inc.bind)]
        if len(fits) == 1:
            return fits[0]
        return _reject(RejectReason.WRONG_WAIT,
                       f"{len(open_of_kind)} open waits of kind {inc.kind!r} and "
                       f"{len(fits)} bound to these values: name the wait_id")
    if open_of_kind:
        return open_of_kind[0]
    if of_kind:
        return of_kind[-1]  # its closed state says why
    awaiting = sorted({w.kind for w in ctx.waits if w.state == WaitState.OPEN})
    if awaiting:
        return _reject(RejectReason.WRONG_EVENT_TYPE,
                       f"the run awaits {', '.join(map(repr, awaiting))}")
    return _reject(RejectReason.NOT_WAITING, "the run has no open wait")


def judge(inc: Incoming, ctx: DeliveryContext) -> Judgement:
    """The resume contract: may this event resume that run at that wait?"""
    if ctx.existing is not None and ctx.existing.verdict == Verdict.ACCEPTED:
        # Accepted once: nothing happens twice. A rejected event is judged again
        # (a webhook that came before its wait opened may fit it now).
        return Judgement(Verdict.DUPLICATE, wait_id=ctx.existing.wait_id,
                         reason=ctx.existing.reason, detail=ctx.existing.verdict)
    if ctx.run is None:
        return _reject(RejectReason.UNKNOWN_RUN, f"no run {inc.run_id}")
    found = _find_wait(inc, ctx)
    if isinstance(found, Judgement):
        return found
    wait = found
    if not ctx.run.live:
        return dataclasses.replace(
            _reject(RejectReason.NOT_WAITING, f"the run is {ctx.run.status}"),
            wait_id=wait.wait_id)
    verdict = _check_wait(inc, wait, ctx)
    return dataclasses.replace(verdict, wait_id=wait.wait_id)


def _check_wait(inc: Incoming, wait: WaitRow, ctx: DeliveryContext) -> Judgement:
    if wait.state == WaitState.CONSUMED:
        return _reject(RejectReason.ALREADY_CONSUMED, f"by event {wait.event_id}")
    if wait.state == WaitState.REVOKED:
        return _reject(RejectReason.REVOKED)
    if wait.state == WaitState.EXPIRED or (
        wait.expires_at is not None and ctx.now >= wait.expires_at
    ):
        return _reject(RejectReason.EXPIRED)
    if wait.locked_at is not None:
        return _reject(RejectReason.WAIT_LOCKED,
                       f"after {wait.bad_tokens} bad tokens; an operator unlocks it "
                       f"(stead waits unlock {wait.wait_id}) or revokes it")
    if wait.token_hash is not None and inc.operator is None and not (
        isinstance(inc.token, str)
        and hmac.compare_digest(token_hash(inc.token), wait.token_hash)
    ):
        bad = wait.bad_tokens + 1
        if bad >= inc.lock_after:
            return Judgement(Verdict.REJECTED, reason=RejectReason.BAD_TOKEN,
                             detail=f"bad token {bad} of {inc.lock_after}: the wait is "
                                    "now locked", locks_wait=True)
        return _reject(RejectReason.BAD_TOKEN, f"bad token {bad} of {inc.lock_after}")
    if wait.token_hash is not None and inc.operator is None and inc.token_refused is not None:
        return _reject(RejectReason.BAD_TOKEN, inc.token_refused)
    bound: dict[str, Any] = json.loads(wait.bind)
    for key, expected in bound.items():
        if key == POLICY_VERSION_KEY and key not in inc.bind:
            continue  # the store knows the policy version: the event need not carry it
        if key not in inc.bind:
            return _reject(RejectReason.BOUND_VALUE_MISMATCH, f"{key} missing")
        if _canonical(inc.bind[key]) != _canonical(expected):
            return _reject(RejectReason.BOUND_VALUE_MISMATCH, key)
    unexpected = sorted(set(inc.bind) - set(bound))
    if unexpected:
        return _reject(RejectReason.BOUND_VALUE_MISMATCH, f"not bound: {', '.join(unexpected)}")
    if STATE_VERSION_KEY in bound:
        now_version = ctx.state_versions.get(wait.task_key, 0)
        if _canonical(now_version) != _canonical(bound[STATE_VERSION_KEY]):
            return _reject(RejectReason.STATE_VERSION_MOVED,
                           f"bound {bound[STATE_VERSION_KEY]}, now {now_version}")
    if wait.policy_bound:
        changed = policy_binding.changed(
            wait, ctx.live_policies, () if inc.policy is None else (inc.policy.value,))
        if changed:
            return _reject(RejectReason.POLICY_CHANGED, changed)
    if wait.schema is not None:
        problems = schema_check.problems(inc.payload, wait.schema)
        if problems:
            return _reject(RejectReason.INVALID_PAYLOAD, "; ".join(problems))
    return Judgement(Verdict.ACCEPTED)


def to_delivery(event_id: str, j: Judgement, stored: EventRow) -> Delivery:
    """The delivery's outcome; `stored` is the event as stored (for a
    duplicate, the one accepted before)."""
    if j.verdict == Verdict.ACCEPTED:
        assert j.wait_id is not None
        return Accepted(event_id, j.wait_id)
    if j.verdict == Verdict.DUPLICATE:
        return Duplicate(event_id, stored.wait_id, stored.event_id, stored.received_at)
    assert j.reason is not None
    return Rejected(event_id, j.reason, j.detail or "")


# -- the handle a workflow awaits ------------------------------------------------
# A wait the store closed without an event, and the journal record that says so.
_CLOSED = {WaitState.REVOKED: RecordStatus.REVOKED, WaitState.EXPIRED: RecordStatus.EXPIRED}


class Wait(Generic[T]):
    """A durable wait. `token` goes to the human channel; `await w` returns the
    accepted event's payload (as the wait's `schema` type, when given)."""

    def __init__(self, x: Execution, addr: str, kind: str, digest: str, row: WaitRow,
                 token: Token | None, schema: Any, resolution: Record | None,
                 label: str | None = None) -> None:
        self._x = x
        self._addr = addr
        self._digest = digest
        self._row = row
        self._schema = schema
        self._resolution = resolution
        self.kind = kind
        self.wait_id = row.wait_id
        self._label = label or row.wait_id  # its id in the journal (see `Token`)
        self.token = token
        self.expires_at = row.expires_at
        self.bind: dict[str, Any] = json.loads(row.bind)

    def __await__(self) -> Generator[Any, None, T]:
        return self._result().__await__()

    def link(self, base_url: str) -> str:
        """`base_url` with the run, the wait and the token as query parameters
        (`run`, `wait`, `token`): the link a person opens to decide, whose page
        hands them to `Client.deliver`. Like `token.reveal()`, only inside an
        effect's function: the link holds the secret."""
        if self.token is None:
            raise errors.SteadError(f"wait {self.wait_id} has no token (token=False)")
        query = urllib.parse.urlencode({"run": self._x.fence.run_id, "wait": self.wait_id,
                                        "token": self.token.reveal()})
        return f"{base_url}{'&' if '?' in base_url else '?'}{query}"

    def __repr__(self) -> str:
        return f"Wait(kind={self.kind!r}, wait_id={self.wait_id})"

    def __stead_redacted__(self) -> str:
        return f"<wait {self._label}>"

    def _record(self, status: RecordStatus, payload: Any) -> Record:
        return self._x.record(self._addr, 1, RecordKind.WAIT, self.kind, self._digest, status,
                              codec.dumps(payload, what=f"the event for wait {self.kind!r}"))

    def _settle(self, rec: Record) -> T:
        if rec.status == RecordStatus.EXPIRED:
            raise errors.WaitExpired(self.kind, self.wait_id)
        if rec.status == RecordStatus.REVOKED:
            raise errors.WaitRevoked(self.kind, self.wait_id)
        if rec.status == RecordStatus.ERROR:
            data = codec.loads(rec.payload)
            raise errors.WaitPolicyChanged(self.kind, self.wait_id, data.get("bound"),
                                           data.get("now"))
        value: T = codec.convert(codec.loads(rec.payload)["payload"], self._schema)
        return value

    async def _result(self) -> T:
        if self._resolution is not None:
            return self._settle(self._resolution)
        x = self._x
        while True:
            x.check_live()
            found = x.consumed_waits.pop(self.wait_id, None)
            if found is None:
                with x.busy():
                    found = await x.store.wait_and_event(self.wait_id, run_id=x.fence.run_id)
            if found is None:
                raise errors.CorruptRecord(f"wait {self.wait_id} is in the journal, not the store")
            row, event = found
            rec = await self._observe(row, event)
            if rec is not None:
                self._resolution = rec
                return self._settle(rec)
            await x.block(wake_at=row.expires_at, wait_id=self.wait_id)

    async def _observe(self, row: WaitRow, event: EventRow | None) -> Record | None:
        """Journal what the store says happened to the wait (`event`: the one
        that consumed it), if anything has. An event's outcome rides with the
        run's next write rather than a write of its own: the store keeps the
        consumed wait and its event for good, so a replay after a crash
        before that write reads the same outcome again."""
        x = self._x
        if row.state == WaitState.CONSUMED:
            assert row.event_id is not None
            if event is None:
                raise errors.CorruptRecord(f"event {row.event_id} of wait {self.wait_id} is gone")
            bound = policy_binding.bound(self._row)
            if self._row.policy_bound and bound != x.policy_version:
                # Accepted under the policy the wait opened under, which this worker
                # no longer runs: the approval does not count under the one in force.
                rec = self._record(RecordStatus.ERROR, {
                    "type": "WaitPolicyChanged", "event_id": event.event_id,
                    "bound": bound, "now": x.policy_version})
            else:
                # A large payload comes back from the blob store.
                text = await x.store.resolve(event.payload, x.fence.run_id, What.EVENT)
                rec = self._record(RecordStatus.OK, {"event_id": event.event_id,
                                                "payload": codec.loads(text)})
            x.carry(rec)
            return rec
        closed = _CLOSED.get(row.state)
        if closed is not None:
            rec = self._record(closed, {"state": row.state})
            await x.commit([rec])
            return rec
        if row.expires_at is not None and x.clock.now() >= row.expires_at:
            rec = self._record(RecordStatus.EXPIRED, {"state": WaitState.EXPIRED})
            try:
                await x.write([rec], lambda batch, resume: x.store.close_wait(
                    x.fence, batch, resume, self.wait_id, WaitState.EXPIRED))
            except errors.WaitNotOpen:
                return None  # an event won the race: read it on the next pass
            return rec
        return None
