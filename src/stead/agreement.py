"""Whether a run's row agrees with its journal and its waits: what a run read
from outside (`stead runs import`, `StoredRun.from_json`) must show before it
is stored or replayed.

In a store they always agree: stead writes a run's status, result and error
in the same transactions as the records and waits they follow from. An
export is a file, and a file can say anything, for instance that a run whose
journal still waits for an approval completed, with a result nobody made.
These are the rules every run stead stores obeys, whatever its workflow did
(forks, migrations and continuations included); `disagreement` names the
first one broken:

- a completed run has a result and no error; no other run has a result;
- a failed run, and one stopped for a person (paused, incompatible,
  outcome_unknown) or terminated on revalidation, has its error: an object
  with its `type` and `message`;
- a pending, running or waiting run has no error (a retry or a resume clears
  it); a pending run was never claimed (epoch 0), or is a fork (epoch 1);
- a run that ended (completed, failed, cancelled) has no open wait: ending
  revokes them;
- a waiting run waits for something: an open wait, a time (`wake_at`), or a
  child run its journal started and has not seen end;
- an open wait is one its journal opened at the wait's address and has not
  resolved; a wait its journal opened and has not resolved is among the
  run's waits; the waits and the task state are the run's task's;
- a run stopped as outcome_unknown names an effect whose last journaled phase
  is its intent, its acceptance or unknown;
- a run never claimed (epoch 0) is pending and has no journal, and every
  record was written at a claim's epoch (1 or more).

What is not checked: that the result is the one the code makes (only the
code can say: `stead replay-check` replays a journal against it).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from stead.records import (
    Record,
    RecordKind,
    RecordStatus,
    RunRow,
    RunStatus,
    StateRow,
    WaitRow,
    WaitState,
)

# Statuses whose error says what happened: what a person reads to decide.
_EXPLAINED = frozenset({RunStatus.FAILED, RunStatus.PAUSED, RunStatus.INCOMPATIBLE,
                        RunStatus.OUTCOME_UNKNOWN, RunStatus.REVALIDATION_FAILED})
_ERRORLESS = frozenset({RunStatus.PENDING, RunStatus.RUNNING, RunStatus.WAITING})
# Ending a run revokes its open waits (schema 3's trigger): these statuses.
_ENDED = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED})
# A wait's call is over once one of these is journaled at its address.
_WAIT_OVER = frozenset({RecordStatus.OK, RecordStatus.EXPIRED, RecordStatus.REVOKED,
                        RecordStatus.ERROR})
_UNKNOWN_PHASES = frozenset({RecordStatus.INTENT, RecordStatus.ACCEPTED, RecordStatus.UNKNOWN})


def disagreement(run: RunRow, journal: Sequence[Record], waits: Sequence[WaitRow],
                 state: StateRow | None) -> str | None:
    """What the run's row says that its journal or waits do not (see the
    module), in words; None if they agree."""
    return (_result_and_error(run) or _epochs(run, journal)
            or _waits(run, journal, waits, state) or _waiting(run, journal, waits)
            or _unknown_outcome(run, journal))


def _result_and_error(run: RunRow) -> str | None:
    status = run.status
    if status == RunStatus.COMPLETED and run.result is None:
        return "the run is completed but has no result"
    if status != RunStatus.COMPLETED and run.result is not None:
        return f"the run is {status} but has a result; only a completed run has one"
    if status in _EXPLAINED:
        error = _json(run.error)
        if not (isinstance(error, dict) and isinstance(error.get("type"), str)
                and isinstance(error.get("message"), str)):
            return (f"the run is {status} but its error does not say what happened (an "
                    "object with its type and message)")
    if run.error is not None and (status in _ERRORLESS or status == RunStatus.COMPLETED):
        return f"the run is {status} but has an error; a {status} run has none"
    if status == RunStatus.PENDING and run.epoch > 1:
        return (f"the run is pending at epoch {run.epoch}; a pending run was never claimed "
                "(epoch 0) or is a fork (epoch 1)")
    return None


def _epochs(run: RunRow, journal: Sequence[Record]) -> str | None:
    if run.epoch == 0 and run.status != RunStatus.PENDING:
        return (f"the run is {run.status} at epoch 0; every way out of pending (a claim, a "
                "cancel) moves the epoch")
    if run.epoch == 0 and journal:
        return (f"the run was never claimed (epoch 0) but its journal holds {len(journal)} "
                "record(s)")
    early = next((r for r in journal if r.epoch < 1), None)
    if early is not None:
        return (f"journal record {early.seq} was written at epoch {early.epoch}; every record "
                "is written at a claim's epoch, 1 or more")
    return None


def _open_in_journal(journal: Sequence[Record]) -> dict[str, Record]:
    """The open record of each wait the journal opened and has not resolved,
    by address."""
    opened: dict[str, Record] = {}
    for r in journal:
        if r.kind == RecordKind.WAIT and r.status == RecordStatus.OPEN:
            opened[r.addr] = r
        elif r.kind == RecordKind.WAIT and r.status in _WAIT_OVER:
            opened.pop(r.addr, None)
    return opened


def _waits(run: RunRow, journal: Sequence[Record], waits: Sequence[WaitRow],
           state: StateRow | None) -> str | None:
    key = run.task_key
    if state is not None and state.task_key != key:
        return f"the task state is that of task {state.task_key!r}, not the run's ({key!r})"
    foreign = next((w for w in waits if w.task_key != key), None)
    if foreign is not None:
        return (f"wait {foreign.wait_id} is bound to task {foreign.task_key!r}, not the run's "
                f"({key!r})")
    open_rows = [w for w in waits if w.state == WaitState.OPEN]
    if open_rows and run.status in _ENDED:
        return (f"the run is {run.status} but wait {open_rows[0].wait_id} is open; ending "
                "a run closes its waits")
    unresolved = _open_in_journal(journal)
    for w in open_rows:
        rec = unresolved.get(w.addr)
        if rec is None or _json(rec.payload, {}).get("wait_id") != w.wait_id:
            return (f"wait {w.wait_id} is open but the journal has no unresolved wait for it "
                    f"at {w.addr!r}")
    ids = {w.wait_id for w in waits}
    for rec in unresolved.values():
        wait_id = _json(rec.payload, {}).get("wait_id")
        if wait_id not in ids:
            return (f"journal record {rec.seq} opened wait {wait_id!r}, which is not among the "
                    "run's waits")
    return None


def _waiting(run: RunRow, journal: Sequence[Record], waits: Sequence[WaitRow]) -> str | None:
    if run.status != RunStatus.WAITING or run.wake_at is not None:
        return None
    if any(w.state == WaitState.OPEN for w in waits):
        return None
    children: dict[str, RecordStatus] = {}
    for r in journal:
        if r.kind == RecordKind.CHILD:
            children[r.addr] = RecordStatus(r.status)
    if RecordStatus.OPEN in children.values():
        return None
    return ("the run is waiting but waits for nothing: no wait is open, no time is set "
            "(wake_at) and no child run is open in its journal")


def _unknown_outcome(run: RunRow, journal: Sequence[Record]) -> str | None:
    if run.status != RunStatus.OUTCOME_UNKNOWN:
        return None
    error = _json(run.error, {})
    addr = error.get("addr") if isinstance(error, dict) else None
    phases = [r.status for r in journal if r.kind == RecordKind.EFFECT and r.addr == addr]
    if not phases or phases[-1] not in _UNKNOWN_PHASES:
        name = error.get("effect") if isinstance(error, dict) else None
        return (f"the run is outcome_unknown on effect {name!r} (at {addr!r}), but the journal "
                "holds no effect there whose outcome is unknown")
    return None


def _json(text: str | None, default: Any = None) -> Any:
    """A JSON text field read (its shape was checked at the door); `default`
    if there is none or it is not JSON."""
    if text is None:
        return default
    try:
        found = json.loads(text)
    except ValueError:
        return default
    return found if default is None or isinstance(found, type(default)) else default
