"""A task's payloads forgotten, the data keys rewrapped, and exports sealed
(see `stead.payloads`; the seam itself is `store._sealing`)."""

from __future__ import annotations

import base64
import binascii
import dataclasses
from typing import TYPE_CHECKING, Any

from stead import errors
from stead.payloads import envelope
from stead.payloads.codec import WrappedKey
from stead.payloads.envelope import What, Where
from stead.store import _large, _large_state, _sealing
from stead.store.base.part import StorePart
from stead.store.seam import Flow, Writing, one
from stead.store.transactions import payloads as tx

if TYPE_CHECKING:
    from stead.exports import StoredRun
    from stead.payloads.sealer import DataKey, Sealer

# Data keys rewrapped per transaction by `rewrap_keys`.
REWRAP_BATCH = 200
# The field of a sealed export that carries its wrapped data keys.
PAYLOAD_KEYS = "payload_keys"


class Payloads(StorePart):
    """The `Store`'s operations on payloads at rest."""

    @property
    def sealing(self) -> bool:
        """Whether payloads are sealed (encryption on)."""
        return self.database.sealer is not None

    async def forget_task(self, task_id: str, *, by: str, why: str) -> tx.Forgetting:
        """Forget every payload of task `task_id`'s runs, in one transaction:
        overwrite them in every table, end its live runs, empty its task state
        and destroy its runs' data keys (the audit stays: runs, steps,
        effects, decisions, who and when)."""
        sealer = self.database.sealer
        large = self.large

        def forgetting() -> Flow[tuple[tx.Forgetting, list[str]]]:
            done = yield from tx.forget(task_id, by, why, self.clock.now(), sealer is not None)
            if large is None:
                return done, []
            # Their large values' blobs too, the task states' included (sealed or
            # not): no reference names them now. Their rows go in this
            # transaction, so a crash before the blobs are deleted leaves
            # orphans `stead blobs gc` removes, never blobs still owned.
            held = yield from _large.disowned(
                [*done.runs, *(_large_state.owner(key) for key in done.task_keys)])
            return done, held

        done, held = await self.database.write(forgetting, Writing())
        if sealer is not None:
            for scope in [*done.runs, *(f"task:{key}" for key in done.task_keys)]:
                sealer.drop(scope)
        if large is not None and held:
            owners = await self.database.read(lambda: _large.owned(held))
            await _large.delete_unowned(large, held, owners)
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

    async def rewrap_keys(self, after: str = "", limit: int = REWRAP_BATCH,
                          began: float | None = None) -> tx.Rewrapped:
        """Rewrap one batch of data keys under the newest key (see
        `tx.rewrap_batch`): a pass's first batch with `began` None, each next
        one with the `began` and after the `last` of the one before; safe
        beside live workers, and to stop anywhere."""
        sealer = self._sealer("reencrypt")
        return await self.database.write(
            lambda: tx.rewrap_batch(sealer, after, limit, began), Writing())

    async def payload_key_counts(self) -> dict[str | None, int]:
        return await self.database.read(tx.key_counts)

    async def export_json(self, stored: StoredRun) -> dict[str, Any]:
        """The export of `stored` (`stead runs export`): with encryption on, its
        payloads sealed as the database keeps them, and beside them
        (`payload_keys`) its data keys, wrapped as the database keeps them, so
        another database with the same key file can import it; as is with
        encryption off."""
        sealer = self.database.sealer
        if sealer is None:
            return stored.to_json()
        sealed, wrapped = await self.database.write(lambda: _sealed_export(sealer, stored),
                                                    Writing())
        return {**sealed.to_json(), PAYLOAD_KEYS: wrapped}

    async def open_export(self, data: Any) -> Any:
        """An export's JSON with its sealed values opened (`PayloadUnreadable`
        if this store cannot: encryption off, or its keys are not here): each
        with this database's data key of its run, else the one the export
        carries. A run forgotten here stays forgotten."""
        if not _has_sealed(data):
            return data
        sealer = self._sealer("open a sealed export")
        carried = data.get(PAYLOAD_KEYS) if isinstance(data, dict) else None
        plain = {k: v for k, v in data.items() if k != PAYLOAD_KEYS}
        return await self.database.read(
            lambda: _opened_json(sealer, plain, carried if isinstance(carried, dict) else {}))

    def _sealer(self, doing: str) -> Sealer:
        sealer = self.database.sealer
        if sealer is None:
            raise errors.PayloadUnreadable(
                f"cannot {doing} with encryption off: set STEAD_ENCRYPT=1 (or "
                "open_store(payloads=True)) with the key file that holds the data keys")
        return sealer


def _sealed_export(sealer: Sealer,
                   stored: StoredRun) -> Flow[tuple[StoredRun, dict[str, dict[str, str]]]]:
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
    conversation = []
    for p in stored.conversation:
        conversation.append(dataclasses.replace(p, body=(yield from _sealing.seal(
            sealer, p.body, where(What.CONVERSATION), made))))
    state = stored.state
    if state is not None:
        data = yield from _sealing.seal(sealer, state.data,
                                        Where(f"task:{state.task_key}", What.STATE), made)
        state = dataclasses.replace(state, data=data)
    wrapped = {}
    for scope in [run_id, *([] if state is None else [f"task:{state.task_key}"])]:
        row = yield one("get_payload_key", {"scope": scope})
        if row is not None and row["wrapped"] is not None:
            wrapped[scope] = {"key_id": str(row["key_id"]), "wrapped": str(row["wrapped"])}
    return dataclasses.replace(stored, run=dataclasses.replace(run, **changes),
                               journal=tuple(journal), waits=tuple(waits),
                               state=state, conversation=tuple(conversation)), wrapped


def _has_sealed(data: Any) -> bool:
    if isinstance(data, dict):
        return any(_has_sealed(v) for v in data.values())
    if isinstance(data, list):
        return any(_has_sealed(v) for v in data)
    return envelope.is_sealed(data)


def _carried(sealer: Sealer, carried: dict[str, Any]) -> Flow[dict[str, DataKey]]:
    """The data keys an export carries for runs this database has no key of."""
    keys: dict[str, DataKey] = {}
    for scope, stored in carried.items():
        if not isinstance(stored, dict) or (yield one("get_payload_key", {"scope": scope})):
            continue
        try:
            wrapped = WrappedKey(str(stored["key_id"]), base64.b64decode(stored["wrapped"]))
        except (KeyError, TypeError, ValueError, binascii.Error) as exc:
            raise errors.PayloadUnreadable(f"the export's key of {scope} is malformed ({exc})"
                                           ) from None
        keys[scope] = sealer.open_key(str(scope), wrapped)
    return keys


def _opened_json(sealer: Sealer, data: Any, carried: dict[str, Any]) -> Flow[Any]:
    """The export's JSON, each sealed value opened where it is read from."""
    keys = yield from _carried(sealer, carried)
    run = dict(data.get("run") or {})
    run_id = run.get("run_id")
    for column in ("input", "result", "error"):
        if envelope.is_sealed(run.get(column)):
            run[column] = yield from _sealing.open_value(sealer, run[column], column, run_id,
                                                         keys)
    journal = yield from _opened_rows(sealer, data.get("journal"), "payload", run_id, keys)
    waits = yield from _opened_rows(sealer, data.get("waits"), "request", run_id, keys)
    parts = {} if data.get("conversation") is None else {"conversation": (
        yield from _opened_rows(sealer, data["conversation"], "body", run_id, keys))}
    state = data.get("state")
    if isinstance(state, dict) and envelope.is_sealed(state.get("data")):
        state = dict(state)
        state["data"] = yield from _sealing.open_value(
            sealer, state["data"], "data", f"task:{state.get('task_key')}", keys)
    return {**data, "run": run, "journal": journal, "waits": waits, "state": state, **parts}


def _opened_rows(sealer: Sealer, found: Any, column: str, run_id: Any,
                 keys: dict[str, DataKey]) -> Flow[list[Any]]:
    """Rows of an export's list, `column` of each opened if sealed."""
    out = []
    for row in found or []:
        if isinstance(row, dict) and envelope.is_sealed(row.get(column)):
            row = {**row, column: (yield from _sealing.open_value(sealer, row[column], column,
                                                                  run_id, keys))}
        out.append(row)
    return out
