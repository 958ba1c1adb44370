"""Forks: a new run whose journal is a prefix of another run's, planned from
what the parent journaled (`Client.fork` reads, this module decides, the
store writes it all in one transaction).

A fork replays its prefix and goes on live from its end, as a new run: under
its own task key (holding the task state its prefix last saw), with its own
waits (a wait its prefix opened and did not resolve is opened again for it,
with a token of its own), and with new idempotency keys for every effect it
sends. It never starts past an effect whose outcome the prefix does not know:
that effect could be sent twice.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from stead import codec, errors, keys, run_ids
from stead.records import (
    IntentRow,
    NewFork,
    NewRun,
    Record,
    RecordKind,
    RecordStatus,
    RunRow,
    StateRow,
    WaitRow,
    WaitState,
)
from stead.workflow import waits

# The phases after which an effect's outcome is known.
_KNOWN = frozenset({RecordStatus.OK, RecordStatus.ERROR, RecordStatus.RECONCILED})
_RESOLVED = frozenset({RecordStatus.OK, RecordStatus.EXPIRED, RecordStatus.REVOKED})


def prefix(run_id: str, journal: Sequence[Record], at: int) -> list[Record]:
    """The first `at` records, refused (`ForkRefused`) if an effect among
    them has no known outcome by their end."""
    if isinstance(at, bool) or not isinstance(at, int) or not 0 <= at <= len(journal):
        raise errors.InvalidInput(
            f"run {run_id}: fork at= is a journal position from 0 (nothing kept) to "
            f"{len(journal)} (the whole journal), not {at!r}")
    kept = list(journal[:at])
    last: dict[str, Record] = {}
    sent: dict[str, int] = {}  # the seq of each effect's latest intent
    for r in kept:
        if r.kind == RecordKind.EFFECT:
            last[r.addr] = r
            if r.status == RecordStatus.INTENT:
                sent[r.addr] = r.seq
    for r in sorted(last.values(), key=lambda r: r.seq):
        if r.status not in _KNOWN:
            seq = sent.get(r.addr, r.seq)
            raise errors.ForkRefused(
                f"run {run_id}: cannot fork at {at}: effect {r.name!r} has its intent "
                f"journaled (seq {seq}, now {r.status}) and no outcome before that position, "
                f"so the fork could send it again. Fork at {seq} or before, or after its "
                "outcome (stead reconcile decides an unknown one first)",
                effect=r.name, seq=seq)
    return kept


def unresolved_waits(kept: Sequence[Record]) -> list[Record]:
    """The open records of waits the prefix opened and did not resolve."""
    opened = {r.addr: r for r in kept if r.kind == RecordKind.WAIT
              and r.status == RecordStatus.OPEN}
    for r in kept:
        if r.kind == RecordKind.WAIT and r.status in _RESOLVED:
            opened.pop(r.addr, None)
    return sorted(opened.values(), key=lambda r: r.seq)


def state_seen(kept: Sequence[Record]) -> int:
    """The task state version the prefix last saw (0: none)."""
    version = 0
    for r in kept:
        if r.kind != RecordKind.STATE:
            continue
        data = codec.loads(r.payload)
        version = int(data["actual"] if r.status == RecordStatus.ERROR else data["version"])
    return version


def cut_short(kept: Sequence[Record], rest: Sequence[Record]) -> set[int]:
    """The seqs of the started markers in `kept` of attempts whose outcome is
    in `rest`, the parent's journal past the prefix: those attempts did not
    die, the fork only cut them short."""
    ended = {(r.addr, r.attempt) for r in rest if r.status != RecordStatus.STARTED}
    return {r.seq for r in kept
            if r.status == RecordStatus.STARTED and (r.addr, r.attempt) in ended}


def _uncounted(marker: Record) -> Record:
    """`marker` as a cut of nothing (from its own position to itself): the
    fork keeps the position, and its replay does not count the attempt."""
    return marker.evolve(
        addr=f"cut@{marker.seq}", attempt=1, kind=RecordKind.CUT, name="cut", digest="",
        status=RecordStatus.OK,
        payload=codec.dumps({"from_seq": marker.seq, "call": marker.name, "fork": True},
                            what="a cut"))


def task_key(run: RunRow) -> str:
    """The key of a run's task state (its task id, else the run itself)."""
    return run.task_key


def plan(
    parent: RunRow, kept: Sequence[Record], rest: Sequence[Record], *,
    ring: keys.Keyring | None,
    opened: Mapping[str, WaitRow], state: StateRow | None, intent: IntentRow | None,
    now: float,
) -> NewFork:
    """The fork of `parent` keeping `kept` (`rest`: the parent's records
    after them): `opened` holds the parent's wait
    rows by wait id (for the waits `kept` leaves open), `state` the task state
    `kept` last saw, `intent` the parent's intent in force."""
    fork_id = run_ids.new(now)
    fork_key = f"run:{fork_id}"
    short = cut_short(kept, rest)
    records = [_uncounted(r) if r.seq in short else r for r in kept]
    rows: list[WaitRow] = []
    for rec in unresolved_waits(kept):
        payload: dict[str, Any] = json.loads(rec.payload)
        original = opened.get(payload["wait_id"])
        if original is None:
            raise errors.CorruptRecord(
                f"run {parent.run_id}: wait {payload['wait_id']} is in the journal "
                f"(seq {rec.seq}), not the store; it cannot be forked")
        wait_id = uuid.uuid4().hex
        token_hash = None
        if original.token_hash is not None:
            if ring is None:
                raise errors.KeysUnavailable("forking an open wait signs it a new token: "
                                             "no keys were given")
            token, token_hash = waits.mint(ring, None, fork_id, wait_id, codec.Secrets())
            payload["key"] = token.key_id
        # The wait keeps the id its journal knows it by (what an effect's
        # arguments recorded), and is found in the store by its own.
        payload["journal_id"] = payload.get("journal_id", payload["wait_id"])
        payload["wait_id"] = wait_id
        records[rec.seq] = rec.evolve(payload=codec.dumps(payload, what="the wait"))
        rows.append(dataclasses.replace(
            original, wait_id=wait_id, run_id=fork_id, token_hash=token_hash,
            task_key=fork_key, state=WaitState.OPEN, event_id=None, closed_at=None,
            bad_tokens=0, locked_at=None))
    seeded = None if state is None else StateRow(fork_key, state.version, state.data,
                                                  fork_id, now)
    new = NewRun(
        run_id=fork_id, workflow=parent.workflow, version=parent.version, task_id=None,
        input=parent.input, intent=None if intent is None else intent.intent,
        intent_why=f"forked from run {parent.run_id} at {len(kept)}")
    return NewFork(new, parent.run_id, len(kept), tuple(records), tuple(rows), seeded)
