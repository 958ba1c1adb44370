"""What needs a human: the finders (`FINDERS`) of stopped runs, waits a
person answers or that near their expiry, locked waits and stranded runs,
each with the actions that resolve it, and `needs_a_human`, the most pressing
first."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Awaitable, Callable
from typing import Any

from stead.client import Client, RunInfo
from stead.client.listing import STRANDED_AFTER
from stead.operator.actions import Action, offered
from stead.operator.situation import Situation, situation
from stead.records import RunStatus, WaitRow, WaitState
from stead.views import runs_view, waits_view

# Open waits that expire within this many seconds need a human.
NEAR_EXPIRY = 3600.0


class AttentionKind(enum.StrEnum):
    OUTCOME_UNKNOWN = "outcome_unknown"
    PAUSED = "paused"
    INCOMPATIBLE = "incompatible_checkpoint"
    APPROVAL = "approval"  # an open wait that takes a token or asks something: a person answers it
    WAIT_EXPIRING = "wait_expiring"  # any other wait, near its expiry
    WAIT_LOCKED = "wait_locked"
    STRANDED = "stranded"


@dataclasses.dataclass(frozen=True)
class Attention:
    """One thing a person must decide: on which run, what, and the actions
    (with their targets) that resolve it."""

    kind: AttentionKind
    run: RunInfo
    summary: str
    actions: tuple[tuple[Action, str], ...]
    due: float | None = None  # when it gets worse (a wait's expiry)
    since: float | None = None  # since when it waits for a person (None: the run's update)
    target: str = ""  # the wait it is about ("" for the run)
    # What the wait asks the person deciding (its request, tokens redacted);
    # None: it asks nothing in words, or the item is not a wait.
    asks: Any = None
    # What the wait is bound to (its `bind`, tokens redacted): the values a
    # person checks before answering. None: not a wait, or bound to nothing.
    bound: Any = None

    @property
    def waiting_since(self) -> float:
        return self.run.updated_at if self.since is None else self.since


Finder = Callable[[Client, float], Awaitable[list[Attention]]]


def _resolving(s: Situation, *names: str, target: str | None = None
               ) -> tuple[tuple[Action, str], ...]:
    return tuple((a, t) for a, t in offered(s)
                 if a.name in names and (target is None or t == target))


async def _stopped(client: Client, now: float) -> list[Attention]:
    found = []
    for status, kind, names in (
        (RunStatus.OUTCOME_UNKNOWN, AttentionKind.OUTCOME_UNKNOWN, ("reconcile", "retry")),
        (RunStatus.PAUSED, AttentionKind.PAUSED,
         ("resume", "terminate", "renew_grant", "deny_grant")),
        (RunStatus.INCOMPATIBLE, AttentionKind.INCOMPATIBLE,
         ("migrate", "rollback", "retry", "cancel")),
    ):
        for info in await client.search_runs(status=status, limit=200):
            s = await situation(client, info.run_id)
            message = str((info.error or {}).get("message", ""))
            found.append(Attention(kind, info, message, _resolving(s, *names)))
    return found


def _due(w: WaitRow, now: float) -> str:
    if w.expires_at is None:
        return "no expiry"
    left = w.expires_at - now
    if left <= 0:
        return "has expired"
    return f"expires in {left / 60:.0f} min" if left < 3600 else \
        f"expires in {left / 3600:.1f} h"


async def _waits(client: Client, now: float) -> list[Attention]:
    """Locked waits; every open wait that takes a token or asks something
    (one a person answers: an approval), whenever it expires; other waits
    near expiry."""
    found = []
    for w in await client.waits(state=WaitState.OPEN, limit=1000):
        locked = w.locked_at is not None
        human = w.token_hash is not None or w.request is not None
        near = w.expires_at is not None and w.expires_at - now <= NEAR_EXPIRY
        if not (locked or human or near):
            continue
        s = await situation(client, w.run_id)
        if locked:
            found.append(Attention(
                AttentionKind.WAIT_LOCKED, s.run,
                f"wait {w.kind} ({w.wait_id}) locked after {w.bad_tokens} bad tokens",
                _resolving(s, "unlock_wait", "revoke_wait", target=w.wait_id), w.expires_at,
                w.created_at, w.wait_id))
        else:
            found.append(Attention(
                AttentionKind.APPROVAL if human else AttentionKind.WAIT_EXPIRING, s.run,
                f"wait {w.kind} ({w.wait_id}) {_due(w, now)}",
                _resolving(s, "approve", "reject", "revoke_wait", target=w.wait_id),
                w.expires_at, w.created_at, w.wait_id, waits_view.shown(w),
                waits_view.bound(w)))
    return found


async def _stranded(client: Client, now: float) -> list[Attention]:
    found = []
    for info in await client.list_runs(stranded=True, grace=STRANDED_AFTER, limit=200):
        s = await situation(client, info.run_id)
        found.append(Attention(
            AttentionKind.STRANDED, info,
            f"{runs_view.stranded_reason(info)}: deploy a worker that does, or migrate it",
            _resolving(s, "migrate", "cancel")))
    return found


FINDERS: list[Finder] = [_stopped, _waits, _stranded]


async def needs_a_human(client: Client) -> list[Attention]:
    """Everything that waits for a person's decision, the most pressing
    first: stopped runs, then waits by expiry (those that never expire last)."""
    now = client.store.clock.now()
    found = [a for finder in FINDERS for a in await finder(client, now)]
    order = list(AttentionKind)
    return sorted(found, key=lambda a: (a.target != "", a.due is None, a.due or 0.0,
                                        order.index(a.kind), -a.run.updated_at))
