"""`Writes`: the attempt's writes. Each is one fenced store transaction
that numbers its records after the buffered ones (`run.now()`, started
markers...) and carries them along, with the takeover's resume record.

`run.now()`, `run.uuid()` and `run.random()` are buffered, not committed on
their own: nothing that depends on them can leave the process before the next
durable write, which carries them (see docs/architecture.md).
"""

from __future__ import annotations

import abc
import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from stead import codec, errors
from stead.execution.exits import Frontier
from stead.execution.fence import Fenced
from stead.metrics import meters
from stead.payloads import references
from stead.records import Record, RecordKind, RecordStatus, ResumeDetails, ResumeRecord, RunStatus
from stead.replay import markers_text

log = logging.getLogger("stead.run")
T = TypeVar("T")
# The buffered records a workflow's later writes may depend on: the values
# `run.now()`, `run.uuid()`, `run.random()` gave, and what a wait received.
_VALUES = frozenset({RecordKind.NOW, RecordKind.UUID, RecordKind.RANDOM, RecordKind.WAIT})


def _acts(rec: Record) -> bool:
    """Whether writing `rec` is the run acting (not an event or a child's
    outcome it receives)."""
    return rec.kind not in (RecordKind.WAIT, RecordKind.CHILD) or rec.status == RecordStatus.OPEN


class Writes(Fenced, abc.ABC):
    """The write buffer and the fenced writes that carry it."""

    def _found(self, addr: str, kind: RecordKind, name: str, digest: str) -> list[Record]:
        try:
            found = self.journal.take(addr, kind, name, digest)
        except errors.NonDeterminism as exc:
            self._incompatible = exc
            raise
        if not found and self.dry:
            self.frontier = f"{kind} {name!r} at {addr}"
        return found

    def _resolved(self, found: list[Record]) -> list[Record]:
        """`found` with each large value read back from the blob store. The
        journal in memory keeps the references, so a replayed value is held
        only as long as its call needs it."""
        return [r.evolve(payload=self.store.resolve_now(r.payload, self.fence.run_id))
                for r in found]

    def take(self, addr: str, kind: RecordKind, name: str, digest: str) -> list[Record]:
        found = self._found(addr, kind, name, digest)
        if any(references.is_reference(r.payload) for r in found):
            found = self._resolved(found)
        return found

    async def taken(self, addr: str, kind: RecordKind, name: str, digest: str
                    ) -> list[Record]:
        """`take`, reading large values on a thread (a step's, an effect's:
        the calls whose results may be large), not on the event loop."""
        found = self._found(addr, kind, name, digest)
        if any(references.is_reference(r.payload) for r in found):
            found = await asyncio.to_thread(self._resolved, found)
        return found

    # -- writes -------------------------------------------------------------
    def record(self, addr: str, attempt: int, kind: RecordKind, name: str, digest: str,
               status: RecordStatus, payload: str, arguments: str | None = None) -> Record:
        if self.journal.offsets:  # the run was cut: attempts number on after the cut ones
            attempt += self.journal.offsets.get(addr, 0)
        return Record(
            seq=-1, addr=addr, attempt=attempt, kind=kind, name=name, digest=digest,
            status=status, payload=payload, epoch=self.fence.epoch, at=self.clock.now(),
            arguments=arguments,
        )

    def buffer(self, rec: Record) -> None:
        with self._marks:
            self._buffer.append(rec)

    def carry(self, rec: Record) -> None:
        """Journal `rec` with the run's next write, not in a write of its own:
        for an outcome the store already holds for good (the event that
        consumed a wait), which a replay after a crash before that write
        reads again and finds the same. Every write carries it, a stream's
        append included (see `write_beside`), so nothing that depends on it
        leaves the process before it. A dry replay stops here, as at a write."""
        if self.dry:
            raise Frontier()
        self.buffer(rec)

    def in_flight(self) -> str | None:
        """The started markers of the calls in flight whose marker no write
        has carried yet, as the JSON the lease renewal stores with the run
        (None: none): a worker that dies mid-call leaves its attempt counted
        even when nothing else commits meanwhile. Includes the markers the
        takeover found that no call has superseded yet. Called from the
        lease keeper's thread."""
        with self._marks:
            started = [r for r in self._buffer if r.status == RecordStatus.STARTED]
            return markers_text([*self.journal.in_flight(), *started])

    def died(self, addr: str, kind: RecordKind, name: str, digest: str) -> int | None:
        """The attempt of the call at `addr` a lease renewal recorded in flight
        when its worker died (see `Journal.died`), or None."""
        with self._marks:
            return self.journal.died(addr, kind, name, digest)

    @property
    def length(self) -> int:
        """How many records the run's journal holds (as this worker wrote it)."""
        return self._next_seq

    def unbuffer(self, rec: Record) -> None:
        """Take `rec` out of the buffer if it has not been written yet."""
        with self._marks:
            self._buffer[:] = [r for r in self._buffer if r is not rec]

    def journal_trace(self, context: dict[str, str] | None) -> None:
        """Journal this attempt's span context with its first write, for the
        next attempt's span to link to (see `stead.tracing`)."""
        if context is not None:
            self.buffer(self.record(f"trace@{self.fence.epoch}", 1, RecordKind.TRACE, "attempt",
                                    "", RecordStatus.OK, codec.dumps(context, what="a trace")))

    def _numbered(self, recs: Sequence[Record]) -> list[Record]:
        batch = [*self._buffer, *recs]
        return [r.numbered(self._next_seq + i) for i, r in enumerate(batch)]

    def _resume(self) -> ResumeRecord | None:
        """The resume record this write carries: the first write of a takeover
        carries it, and, if the takeover's judgement was still to come then,
        the first write after that judgement carries it again, judged (the
        store keeps one record per epoch: the later one replaces its detail)."""
        judged = self.judge is None or not self.judge.pending
        if not (self._resume_pending or (self._resume_unjudged and judged)):
            return None
        return ResumeRecord(
            run_id=self.fence.run_id, epoch=self.fence.epoch, worker_id=self.fence.worker_id,
            at=self.clock.now(), from_seq=self.journal.length,
            code_version=self.code_version, reused=self.journal.reused,
            detail=ResumeDetails(self.journal.length, self._classes,
                                 self.journal.reused_kinds, self.revalidation,
                                 self.migration, self.restored or None,
                                 self.resumed_effects or None,
                                 self.reran or None, self.world, self.claimed_at).to_json(),
        )

    def _committed(self, batch: Sequence[Record], resume: ResumeRecord | None,
                   carried: Sequence[Record]) -> None:
        self._next_seq += len(batch)
        if self.guard is not None:
            self.guard.ledger.count(batch)
        # Drop only the buffered records this batch carried: a branch may have
        # buffered another while the write was in flight (it rides the next
        # one), or taken its own out (see `unbuffer`).
        if carried:
            with self._marks:
                self._buffer[:] = [r for r in self._buffer
                                   if not any(r is c for c in carried)]
        if resume is not None:
            first = self._resume_pending
            self._resume_pending = False
            self._resume_unjudged = self.judge is not None and self.judge.pending
            if not first:
                return
            log.info(
                "run %s resumed by %s at epoch %d from seq %d, %d record(s) reused",
                resume.run_id, resume.worker_id, resume.epoch, resume.from_seq, resume.reused,
            )

    async def write(
        self,
        recs: Sequence[Record],
        send: Callable[[list[Record], ResumeRecord | None], Awaitable[T]],
        *,
        drop: Record | None = None,
    ) -> T:
        """Number `recs` after the buffered records and hand both (and the
        pending resume record) to `send`, one fenced store transaction. If `send`
        raises, nothing was written and the buffer is kept. `drop`, a buffered
        record `recs` make needless (a call's started marker, once its outcome
        is written), is left out if no earlier write carried it."""
        if self.dry:
            raise Frontier()
        if recs and self.judge is not None and self.judge.pending and _acts(recs[0]):
            # A live write no call judged first (a wait, a state change...).
            from stead.policy import Action  # judged: the run has an intent or a policy

            first = recs[0]
            await self.judge.judge(Action(first.kind, first.name, None, {},
                                          digest=first.digest or None))
        async with self._lock:
            if self._lost is not None:
                raise self._lost
            if self._store_failed is not None:
                raise self._store_failed
            if drop is not None:
                self.unbuffer(drop)
            carried = list(self._buffer)
            batch = self._numbered(recs)
            # A write made while the run only receives (an event, a child's
            # outcome) comes before the policy's judgement: it carries the
            # record as it stands ("not asked" yet), so a crash right after it
            # still leaves this takeover its record; the judgement rewrites it.
            resume = self._resume()
            result = await self._send(lambda: send(batch, resume))
            self._committed(batch, resume, carried)
            return result

    async def _send(self, send: Callable[[], Awaitable[T]]) -> T:
        """Make a store write of this run: a lost lease or a store error stops
        every write after it (see `lost`, `store_failed`)."""
        self._inflight += 1
        try:
            return await send()
        except errors.StaleLease as exc:
            self._lost = exc
            raise
        except errors.CorruptRecord:
            raise
        except errors.StoreError as exc:
            self._store_failed = exc
            raise
        finally:
            self._idle()

    async def write_beside(self, send: Callable[[], Awaitable[T]]) -> T:
        """A fenced write beside the journal (a stream's append, see
        `stead.workflow.streams`), ordered with the journal's writes. The values the
        buffer holds (`run.now()`, `run.uuid()`, `run.random()`, a wait's
        event) are journaled first: what is written may depend on them, and
        nothing that does may leave the process before them. Started markers
        stay buffered."""
        if any(r.kind in _VALUES for r in self._buffer):
            await self.commit(())
        async with self._lock:
            if self._lost is not None:
                raise self._lost
            if self._store_failed is not None:
                raise self._store_failed
            return await self._send(send)

    async def commit(self, recs: Sequence[Record], *, drop: Record | None = None) -> None:
        """Journal `recs` (with the buffered records, but `drop`: see `write`)
        in one fenced transaction."""
        await self.write(recs, lambda batch, resume: self.store.append(self.fence, batch, resume),
                         drop=drop)

    async def finish(self, status: RunStatus, *, result: str | None = None,
                     error: str | None = None) -> None:
        if error is not None:  # an exception's message may quote a token
            error = self.secrets.mask(error)
        self._ending = True  # nothing live starts after the finish
        await self.write((), lambda batch, resume: self.store.finish(
            self.fence, status, result=result, error=error, records=batch, resume=resume,
        ))
        meters.finished(status)

    @abc.abstractmethod
    def _idle(self) -> None:
        """One piece of live work ended: `Parking` counts them."""
