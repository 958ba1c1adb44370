"""The journal cursor: hand each call its recorded result, or say it is live.

A call is matched by its address (see `addresses`); a record found there must
have the same kind, name and argument digest, or the code no longer fits the
checkpoint and the run stops as `incompatible_checkpoint`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence

from stead import digests, errors, records, stepcode
from stead.records import Record, RecordKind, RecordStatus

log = logging.getLogger("stead.run")
_MARKER_FIELDS = ("addr", "attempt", "kind", "name", "digest", "epoch")


def markers_text(recs: Iterable[Record]) -> str | None:
    """The started markers `recs` as the JSON a lease renewal stores with the
    run (see `Store.renew`); None for none."""
    found = [{f: getattr(r, f) for f in _MARKER_FIELDS} for r in recs]
    return json.dumps(found) if found else None


def markers_from(run_id: str, text: str | None) -> list[Record]:
    """The started markers a lease renewal stored (see `markers_text`). The
    column only adds attempt counting, so a value that does not parse is
    logged and ignored."""
    if not text:
        return []
    try:
        return [Record(-1, str(m["addr"]), int(m["attempt"]), RecordKind(m["kind"]),
                       str(m["name"]), str(m["digest"]), RecordStatus.STARTED, "{}",
                       int(m["epoch"]), 0.0) for m in json.loads(text)]
    except (TypeError, ValueError, KeyError) as exc:
        log.warning("run %s: ignoring its unreadable in-flight markers (%s)", run_id, exc)
        return []


def _validate(run_id: str, recs: Sequence[Record]) -> None:
    for expected, r in enumerate(recs):
        problem = None
        if r.seq != expected:
            problem = f"expected seq {expected}, found {r.seq} (a gap or a duplicate)"
        elif r.kind not in records.KINDS:
            problem = f"unknown kind {r.kind!r}"
        elif r.status not in records.RECORD_STATUSES:
            problem = f"unknown status {r.status!r}"
        elif r.attempt < 1:
            problem = f"bad attempt {r.attempt}"
        else:
            try:
                json.loads(r.payload)
            except (TypeError, ValueError) as exc:
                problem = f"payload is not JSON ({exc})"
        if problem is not None:
            raise errors.CorruptRecord(
                f"run {run_id}: journal record at seq {r.seq} is corrupt: {problem}. "
                "The record is kept as it is; repair it, then `stead runs retry RUN`; "
                "or cancel the run."
            )


def _cut_from(run_id: str, cut: Record) -> int:
    """Where a cut record's cut starts; `CorruptRecord` if it does not say."""
    try:
        return int(json.loads(cut.payload)["from_seq"])
    except (KeyError, TypeError, ValueError) as exc:
        raise errors.CorruptRecord(
            f"run {run_id}: its cut record at seq {cut.seq} does not say where the cut "
            f"starts ({type(exc).__name__}: {exc}); repair or cancel "
            "the run") from exc


class Journal:
    def __init__(self, run_id: str, recs: Sequence[Record]) -> None:
        _validate(run_id, recs)
        self.run_id = run_id
        self.length = len(recs)
        self._by_addr: dict[str, list[Record]] = {}
        # After a cut, a call made again at an address numbers its attempts
        # after the cut ones (the journal keeps both): stored attempt =
        # attempt + offset. Empty unless the run was ever cut.
        self.offsets: dict[str, int] = {}
        # The span context the last traced attempt journaled (see `stead.tracing`).
        self.trace: dict[str, object] | None = None
        for r in recs:
            if r.kind == RecordKind.TRACE:
                found = json.loads(r.payload)
                self.trace = found if isinstance(found, dict) else None
                continue
            if r.kind == RecordKind.DECISION:
                continue
            if r.kind == RecordKind.CUT:
                self._drop(_cut_from(run_id, r), r.seq)
                continue
            off = self.offsets.get(r.addr) if self.offsets else None
            if off:
                r = r.evolve(attempt=r.attempt - off)
            self._by_addr.setdefault(r.addr, []).append(r)
        self._taken: set[str] = set()
        # The started markers of calls in flight when the last holder died,
        # stored with its lease renewal rather than journaled (see
        # `mark_in_flight`), by address.
        self._in_flight: dict[str, Record] = {}
        self.reused = 0
        self.reused_kinds: dict[RecordKind, int] = {}

    def _drop(self, start: int, end: int | None) -> None:
        for addr in list(self._by_addr):
            kept = [r for r in self._by_addr[addr]
                    if r.seq < start or (end is not None and r.seq >= end)]
            dropped = [r.attempt for r in self._by_addr[addr] if r not in kept]
            if dropped:
                self.offsets[addr] = self.offsets.get(addr, 0) + max(dropped)
            if kept:
                self._by_addr[addr] = kept
            else:
                del self._by_addr[addr]

    def tail(self, start: int) -> list[Record]:
        """The records still replayed from seq `start` on, in commit order."""
        return sorted((r for rs in self._by_addr.values() for r in rs if r.seq >= start),
                      key=lambda r: r.seq)

    def first(self, addr: str) -> Record | None:
        """The first record at `addr`, unmatched (None: the call is new)."""
        found = self._by_addr.get(addr)
        return found[0] if found else None

    def taken(self, addr: str) -> bool:
        return addr in self._taken

    def cut(self, start: int) -> None:
        """Replay nothing from seq `start` on (a `CUT` record says so durably).
        What replay took from there is no longer counted as reused."""
        for addr in self._taken:
            for r in self._by_addr.get(addr, ()):
                if r.seq >= start:
                    self.reused -= 1
                    self.reused_kinds[r.kind] -= 1
        self.reused_kinds = {k: n for k, n in self.reused_kinds.items() if n > 0}
        self._drop(start, None)
        self._taken = {a for a in self._taken if a in self._by_addr}

    def take(self, addr: str, kind: RecordKind, name: str, digest: str) -> list[Record]:
        """The records at `addr` in commit order, or [] when the call is
        new. Raises `NonDeterminism` when the record is for another call."""
        found = self._by_addr.get(addr)
        if not found:
            return []
        first = found[0]
        journaled = f"{first.kind} {first.name!r}"
        if first.kind != kind or first.name != name:
            raise errors.NonDeterminism(
                f"run {self.run_id}: at position {addr} (seq {first.seq}) the journal "
                f"holds {first.kind} {first.name!r}, but the code now calls {kind} {name!r}. "
                "The workflow code changed under a running checkpoint: register the old "
                "version alongside the new one, then `stead runs retry RUN`; or cancel the run.",
                addr=addr, seq=first.seq, expected=journaled, actual=f"{kind} {name!r}")
        stored, asked = stepcode.code_of(first.digest)[0], stepcode.code_of(digest)[0]
        if stored != asked:
            (was, old), (now, new) = digests.contract_of(stored), digests.contract_of(asked)
            if was == now:
                raise errors.NonDeterminism(
                    f"run {self.run_id}: {kind} {name!r} at position {addr} (seq {first.seq}) "
                    f"was journaled under contract {old!r}, and the code now declares "
                    f"contract {new!r}: its body changed in a way its author said matters. "
                    "Register the old version alongside the new one, or migrate the run "
                    "(stead runs migrate); or cancel it.",
                    addr=addr, seq=first.seq, expected=f"{journaled} contract {old!r}",
                    actual=f"{kind} {name!r} contract {new!r}")
            raise errors.NonDeterminism(
                f"run {self.run_id}: {kind} {name!r} at position {addr} (seq {first.seq}) "
                "is called with other arguments than the journal recorded. Control code "
                "must be deterministic: take times, ids and randomness from run.now(), "
                "run.uuid(), run.random().",
                addr=addr, seq=first.seq, expected=f"{journaled} as journaled",
                actual=f"{kind} {name!r} with other arguments")
        if addr not in self._taken:
            self._taken.add(addr)
            self.reused += len(found)
            self.reused_kinds[kind] = self.reused_kinds.get(kind, 0) + len(found)
        return found

    def mark_in_flight(self, markers: Iterable[Record]) -> None:
        """Note the started markers a lease renewal stored: calls that were in
        flight when the run's last holder died (see `died`)."""
        for m in markers:
            known = self._in_flight.get(m.addr)
            if known is None or m.attempt > known.attempt:
                self._in_flight[m.addr] = m

    def in_flight(self) -> list[Record]:
        """The noted markers no call has asked for yet (a renewal stores them
        again, so a holder that dies before reaching the call loses none)."""
        return list(self._in_flight.values())

    def died(self, addr: str, kind: RecordKind, name: str, digest: str) -> int | None:
        """The attempt of the call at `addr` that was in flight when its worker
        died, known from a marker a lease renewal stored, or None. A marker
        counts only if the journal holds nothing of that attempt or a later
        one: a call whose outcome is journaled never looks died, whatever
        epoch's marker the column still holds. Asked once per call: the new
        attempt's own marker supersedes it."""
        marker = self._in_flight.pop(addr, None)
        if marker is None or (marker.kind, marker.name, stepcode.code_of(marker.digest)[0]) \
                != (kind, name, stepcode.code_of(digest)[0]):
            return None
        attempt = marker.attempt - self.offsets.get(addr, 0)
        if attempt < 1 or any(r.attempt >= attempt for r in self._by_addr.get(addr, ())):
            return None
        return attempt

    def untaken(self) -> list[Record]:
        """Records no call has asked for (checked when the workflow returns)."""
        left = [rs[0] for a, rs in self._by_addr.items() if a not in self._taken]
        return sorted(left, key=lambda r: r.seq)
