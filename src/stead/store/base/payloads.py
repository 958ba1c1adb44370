"""A task's payloads forgotten, the data keys rewrapped, and exports sealed
(see `stead.payloads`; the seam itself is `store._sealing`)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from stead import errors
from stead.payloads import envelope
from stead.payloads.envelope import What, Where
from stead.store import _sealing
from stead.store.base.part import StorePart
from stead.store.seam import Flow, Writing
from stead.store.transactions import payloads as tx

if TYPE_CHECKING:
    from stead.exports import StoredRun
    from stead.payloads.sealer import DataKey, Sealer

# Data keys rewrapped per transaction by `rewrap_keys`.
REWRAP_BATCH = 200


class Payloads(StorePart):
    """The `Store`'s operations on payloads at rest."""

    @property
    def sealing(self) -> bool:
        """Whether payloads are sealed (encryption on)."""
        return self.database.sealer is not None

    async def forget_task(self, task_id: str, *, by: str, why: str) -> tx.Forgetting:
        """Forget every payload of task `task_id`'s runs, in one transaction:
        overwrite them in every table, end its live runs, drop its task state
        and destroy its runs' data keys (the audit stays: runs, steps,
        effects, decisions, who and when)."""
        sealer = self.database.sealer
        done = await self.database.write(
            lambda: tx.forget(task_id, by, why, self.clock.now(), sealer is not None),
            Writing())
        if sealer is not None:
            for scope in [*done.runs, f"task:{task_id}"]:
                sealer.drop(scope)
        return done

    async def forgotten(self, run_id: str) -> tx.Forgotten | None:
        """Who forgot the run's payloads, when and why; None if nobody did."""
        return await self.database.read(lambda: tx.forgotten(run_id))

    async def check_not_forgotten(self, run_id: str) -> None:
        """Raise `RunForgotten` if the run's payloads were forgotten."""
        gone = await self.forgotten(run_id)
        if gone is not None:
            raise errors.RunForgotten(run_id, gone.task_id, by=gone.by, why=gone.why,
                                      at=gone.at)

    async def rewrap_keys(self, after: str = "",
                          limit: int = REWRAP_BATCH) -> tuple[int, str | None]:
        """Rewrap one batch of data keys under the newest key (see
        `tx.rewrap_batch`); safe beside live workers, and to stop anywhere."""
        sealer = self._sealer("reencrypt")
        return await self.database.write(lambda: tx.rewrap_batch(sealer, after, limit),
                                         Writing())

    async def payload_key_counts(self) -> dict[str | None, int]:
        return await self.database.read(tx.key_counts)

    async def seal_export(self, stored: StoredRun) -> StoredRun:
        """`stored` with its payloads sealed as the database keeps them (under
        its runs' data keys, which the export does not carry): as is with
        encryption off."""
        sealer = self.database.sealer
        if sealer is None:
            return stored
        return await self.database.write(lambda: _sealed_export(sealer, stored), Writing())

    async def open_export(self, data: Any) -> Any:
        """An export's JSON with its sealed values opened (`PayloadUnreadable`
        if this store cannot: encryption off, or the keys are not here)."""
        if not _has_sealed(data):
            return data
        sealer = self._sealer("open a sealed export")
        return await self.database.read(lambda: _opened_json(sealer, data))

    def _sealer(self, doing: str) -> Sealer:
        sealer = self.database.sealer
        if sealer is None:
            raise errors.PayloadUnreadable(
                f"cannot {doing} with encryption off: set STEAD_ENCRYPT=1 (or "
                "open_store(payloads=True)) with the key file that holds the data keys")
        return sealer


def _sealed_export(sealer: Sealer, stored: StoredRun) -> Flow[StoredRun]:
    made: dict[str, DataKey] = {}
    run = stored.run
    run_id = run.run_id

    def where(what: What) -> Where:
        return Where(run_id, what)

    changes: dict[str, Any] = {"input": (yield from _sealing.seal(sealer, run.input,
                                                                   where(What.INPUT), made))}
    for column, what in (("result", What.RESULT), ("error", What.ERROR)):
        text = getattr(run, column)
        if text is not None:
            changes[column] = yield from _sealing.seal(sealer, text, where(what), made)
    journal = yield from _sealing.sealed_records(sealer, run_id, stored.journal, made)
    waits = []
    for w in stored.waits:
        if w.request is not None:
            w = dataclasses.replace(w, request=(yield from _sealing.seal(
                sealer, w.request, where(What.REQUEST), made)))
        waits.append(w)
    state = stored.state
    if state is not None:
        data = yield from _sealing.seal(sealer, state.data,
                                        Where(f"task:{state.task_key}", What.STATE), made)
        state = dataclasses.replace(state, data=data)
    return dataclasses.replace(stored, run=dataclasses.replace(run, **changes),
                               journal=tuple(journal), waits=tuple(waits), state=state)


def _has_sealed(data: Any) -> bool:
    if isinstance(data, dict):
        return any(_has_sealed(v) for v in data.values())
    if isinstance(data, list):
        return any(_has_sealed(v) for v in data)
    return envelope.is_sealed(data)


def _opened_json(sealer: Sealer, data: Any) -> Flow[Any]:
    """The export's JSON, each sealed value opened where it is read from."""
    run = dict(data.get("run") or {})
    run_id = run.get("run_id")
    for column in ("input", "result", "error"):
        if envelope.is_sealed(run.get(column)):
            run[column] = yield from _sealing.open_value(sealer, run[column], column, run_id,
                                                         None)
    journal = yield from _opened_rows(sealer, data.get("journal"), "payload", run_id)
    waits = yield from _opened_rows(sealer, data.get("waits"), "request", run_id)
    state = data.get("state")
    if isinstance(state, dict) and envelope.is_sealed(state.get("data")):
        state = dict(state)
        state["data"] = yield from _sealing.open_value(
            sealer, state["data"], "data", f"task:{state.get('task_key')}", None)
    return {**data, "run": run, "journal": journal, "waits": waits, "state": state}


def _opened_rows(sealer: Sealer, found: Any, column: str, run_id: Any) -> Flow[list[Any]]:
    """Rows of an export's list, `column` of each opened if sealed."""
    out = []
    for row in found or []:
        if isinstance(row, dict) and envelope.is_sealed(row.get(column)):
            row = {**row, column: (yield from _sealing.open_value(sealer, row[column], column,
                                                                  run_id, None))}
        out.append(row)
    return out
