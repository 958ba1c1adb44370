"""Forgetting a task's payloads, and rewrapping the data keys payloads are
sealed with (see `stead.payloads`)."""

from __future__ import annotations

import base64
import dataclasses
import json
from typing import TYPE_CHECKING, Any

from stead.payloads import envelope
from stead.payloads.codec import WrappedKey
from stead.store.seam import Flow, count, execute, one, rows

if TYPE_CHECKING:
    from stead.payloads.sealer import Sealer

# The tables a run's payloads are kept in, each overwritten by its query.
_RUN_TABLES = ("forget_journal", "forget_archive", "forget_events", "forget_streams",
               "forget_intents", "forget_migrations", "forget_requests", "forget_actions",
               "delete_conversation_parts")


@dataclasses.dataclass(frozen=True)
class Forgetting:
    """What forgetting a task did: its runs (all of them, with every run that
    came from one: forks, continuations, children), those of them it ended,
    the task states it emptied, and whether their data keys were destroyed
    (encryption on) or only the payloads overwritten (backups still hold
    those)."""

    task_id: str
    runs: tuple[str, ...]
    ended: tuple[str, ...]
    keys_destroyed: bool
    task_keys: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Forgotten:
    """Who forgot a run's payloads, when and why."""

    run_id: str
    task_id: str
    at: float
    by: str
    why: str


def forgotten_error(task_id: str, by: str, why: str) -> str:
    """The error a forgotten run reads with (no payload in it)."""
    return json.dumps({"type": "RunForgotten",
                       "message": f"task {task_id} was forgotten by {by}: {why}"})


def forget(task_id: str, by: str, why: str, now: float, sealed: bool) -> Flow[Forgetting]:
    found = yield rows("task_runs", {"task_id": task_id})
    run_ids = [str(r["run_id"]) for r in found]
    live = tuple(str(r["run_id"]) for r in found
                 if r["status"] not in ("completed", "failed", "cancelled",
                                        "revalidation_failed"))
    params: dict[str, Any] = {"run_ids": run_ids, "marker": envelope.FORGOTTEN,
                              "error": forgotten_error(task_id, by, why), "now": now}
    if run_ids:
        yield execute("forget_end_runs", params)
        yield execute("forget_runs", params)
        for query in _RUN_TABLES:
            yield execute(query, params)
    # The task's state, and that of each run of the family under a task of its
    # own (a child's) or none (a fork's: `run:<id>`).
    task_keys = list(dict.fromkeys([task_id, *(
        str(r["task_id"]) if r["task_id"] is not None else f"run:{r['run_id']}"
        for r in found)]))
    for key in task_keys:
        yield execute("forget_state", {"task_key": key})
        yield execute("forget_state_history", {"task_key": key, "marker": envelope.FORGOTTEN})
    for scope in run_ids:
        yield execute("forget_key", {"scope": scope, "task_id": task_id, "now": now, "by": by,
                                     "why": why})
    for key in task_keys:
        yield execute("drop_payload_key", {"scope": f"task:{key}"})
    return Forgetting(task_id, tuple(run_ids), live, sealed, tuple(task_keys))


def forgotten(run_id: str) -> Flow[Forgotten | None]:
    row = yield one("forgotten_run", {"scope": run_id})
    if row is None:
        return None
    return Forgotten(run_id, str(row["task_id"]), float(row["forgotten_at"]),
                     str(row["forgotten_by"]), str(row["forgotten_why"]))


@dataclasses.dataclass(frozen=True)
class Rewrapped:
    """One batch of a re-encryption pass: how many data keys it rewrapped,
    the last scope it looked at (None: none left), the database's time the
    pass began (keys made after it are left to the next pass) and the key
    it rewraps under."""

    done: int
    last: str | None
    began: float
    newest: str


def rewrap_batch(sealer: Sealer, after: str, limit: int,
                 began: float | None) -> Flow[Rewrapped]:
    """Rewrap up to `limit` data keys (scopes past `after`, made by the
    database's time `began`; None: now, a pass's first batch) not wrapped by
    the newest key."""
    from stead.payloads.sealer import context

    if began is None:  # the database's own clock, which stamps created_at
        began = float((yield one("lease_now", {"lease_now": None}))["now"])
    newest = sealer.codec.newest()
    found = yield rows("keys_to_rewrap", {"newest": newest, "after": after, "limit": limit,
                                          "until": began})
    done = 0
    for row in found:
        scope = str(row["scope"])
        old = WrappedKey(str(row["key_id"]), base64.b64decode(row["wrapped"]))
        secret = sealer.codec.unwrap(old, context(scope))
        new = sealer.codec.wrap(secret, context(scope))
        done += (yield count("rewrap_key", {
            "scope": scope, "key_id": new.key_id,
            "wrapped": base64.b64encode(new.blob).decode("ascii"),
            "old_key_id": old.key_id, "old_wrapped": row["wrapped"]}))
    return Rewrapped(done, str(found[-1]["scope"]) if found else None, began, newest)


def key_counts() -> Flow[dict[str | None, int]]:
    """How many data keys each wrapping key wraps (None: forgotten)."""
    found = yield rows("payload_key_counts", {})
    return {r["key_id"]: int(r["n"]) for r in found}
