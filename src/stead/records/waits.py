"""Waits and the events delivered to them: a stored wait, a stored event
with its verdict, what a delivery is judged on, and the judgement."""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Any, Self

from stead.records.runs import RunRow

# The bind key that ties a wait to the policy version it opened under: a
# delivery is compared with the version the live workers run (`WaitRow`).
POLICY_VERSION_KEY = "policy_version"


class WaitState(enum.StrEnum):
    """Where a stored wait is: open until an event consumes it, it expires or it
    is revoked."""

    OPEN = "open"
    CONSUMED = "consumed"
    EXPIRED = "expired"
    REVOKED = "revoked"


class Verdict(enum.StrEnum):
    """The judgement on a delivered event."""

    ACCEPTED = "accepted"
    REJECTED = "rejected"
    DUPLICATE = "duplicate"


class RejectReason(enum.StrEnum):
    """Why a delivered event was rejected (see `waits.judge`)."""

    UNKNOWN_RUN = "unknown_run"
    NOT_WAITING = "not_waiting"
    WRONG_EVENT_TYPE = "wrong_event_type"
    WRONG_WAIT = "wrong_wait"
    BOUND_VALUE_MISMATCH = "bound_value_mismatch"
    STATE_VERSION_MOVED = "state_version_moved"
    # The wait bound a policy version; the delivering app's policy is another.
    POLICY_CHANGED = "policy_changed"
    EXPIRED = "expired"
    REVOKED = "revoked"
    ALREADY_CONSUMED = "already_consumed"
    BAD_TOKEN = "bad_token"
    WAIT_LOCKED = "wait_locked"  # too many bad tokens: refused until unlocked or revoked
    INVALID_PAYLOAD = "invalid_payload"


# Rejections that anyone can provoke without knowing a run and its token: such
# an event is stored as a bounded digest of its payload, never in full.
UNAUTHENTICATED = frozenset({RejectReason.UNKNOWN_RUN, RejectReason.BAD_TOKEN,
                             RejectReason.WAIT_LOCKED})


@dataclasses.dataclass(frozen=True, slots=True)
class WaitRow:
    """A durable wait. `bind` and `schema` are JSON text; only the token's
    hash is kept (None when the wait takes no token). `bad_tokens` counts the
    deliveries refused for a wrong token; past the limit the wait is locked
    (`locked_at`): it stays open, but refuses every event until it is unlocked
    or revoked."""

    wait_id: str
    run_id: str
    addr: str
    kind: str
    bind: str
    schema: str | None
    token_hash: str | None
    task_key: str
    expires_at: float | None
    state: WaitState
    event_id: str | None
    created_at: float
    closed_at: float | None = None
    bad_tokens: int = 0
    locked_at: float | None = None
    # The app's policy version when the wait opened (the bound value, for a
    # wait bound to `policy_version`); None: it had no policy.
    policy_version: str | None = None
    # What the wait asks (`run.wait(request=)`), as JSON text, bounded: what
    # the person deciding is shown (kept in `wait_requests`, read where a
    # person's view reads waits). None: it was opened with none, or unread.
    request: str | None = None

    def evolve(self, **changes: Any) -> Self:
        return dataclasses.replace(self, **changes)

    @property
    def policy_bound(self) -> bool:
        """Whether a delivery must find the policy it opened under still in
        force (it is bound to `policy_version`)."""
        bound = json.loads(self.bind)
        return isinstance(bound, dict) and POLICY_VERSION_KEY in bound


@dataclasses.dataclass(frozen=True, slots=True)
class EventRow:
    """A delivered event as stored, with its verdict (accepted or rejected, with
    the reason), and for an operator's delivery who made it and why. `verdict`
    is None only on the event handed to `Store.deliver`: the store stamps the
    judgement's verdict, reason and detail, and the time."""

    run_id: str
    event_id: str
    wait_id: str | None
    kind: str | None
    payload: str
    bind: str
    verdict: Verdict | None
    reason: RejectReason | None
    detail: str | None
    received_at: float
    # An operator's delivery (the dashboard, a webhook signed with stead's
    # key) instead of the wait's token: who vouched for it, and why.
    delivered_by: str | None = None
    delivered_why: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class DeliveryContext:
    """What a delivery is judged on, read inside its transaction."""

    run: RunRow | None
    waits: tuple[WaitRow, ...]
    state_versions: dict[str, int]
    existing: EventRow | None
    now: float
    # The policy versions (None: no policy) the live workers serving the
    # run's `workflow@version` run; empty: none is live (or none was asked).
    live_policies: frozenset[str | None] = frozenset()


@dataclasses.dataclass(frozen=True, slots=True)
class Judgement:
    """The verdict on one event: `accepted` (consuming `wait_id`), `rejected`
    (with `reason`) or `duplicate` (an event with that id is already stored).
    A bad token is counted on its wait; `locks_wait` locks the wait too."""

    verdict: Verdict
    wait_id: str | None = None
    reason: RejectReason | None = None
    detail: str | None = None
    locks_wait: bool = False
