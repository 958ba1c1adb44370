"""The store's side of `stead.payloads`: every flow a backend runs, and
every fenced journal write, passes through here when payloads are sealed.

Writes: a query named in `WRITES` has the parameters listed there sealed,
each under the data key of its scope (the run id a parameter names; task
state: `task:<task key>`); the data key is read from `payload_keys`, or made
and stored in the same transaction. A fenced journal write (`FencedWrite`)
has its records' payloads and its finish's result and error sealed.
Reads: every sealed value in any answer is opened, checked against the run
(or task) the row or the query names; a value whose data key was destroyed
(its task forgotten) reads as `payloads.FORGOTTEN`.

With no `Sealer` the backends do not call this module at all."""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

from stead import errors
from stead.payloads import envelope
from stead.payloads.codec import WrappedKey
from stead.payloads.envelope import What, Where
from stead.store.seam import (
    Database,
    FencedWrite,
    Fetch,
    Finish,
    Flow,
    FlowFactory,
    Journal,
    Query,
    Together,
    Writing,
    execute,
    one,
    stale,
)

if TYPE_CHECKING:
    from stead.payloads.sealer import DataKey, Sealer
    from stead.records import Record, RunRow

T = TypeVar("T")

# query -> (parameter, what, the parameter naming its scope). A scope named
# by `task_key` is that task's state: `task:<key>`.
WRITES: dict[str, tuple[tuple[str, What, str], ...]] = {
    "insert_run": (("input", What.INPUT, "run_id"),),
    "import_run": (("input", What.INPUT, "run_id"), ("result", What.RESULT, "run_id"),
                   ("error", What.ERROR, "run_id")),
    "set_code": (("input", What.INPUT, "run_id"),),
    "set_code_fenced": (("input", What.INPUT, "run_id"),),
    "end_stopped": (("error", What.ERROR, "run_id"),),
    "insert_record": (("payload", What.JOURNAL, "run_id"),),
    "insert_event": (("payload", What.EVENT, "run_id"), ("detail", What.DETAIL, "run_id")),
    "accept_event": (("payload", What.EVENT, "run_id"), ("detail", What.DETAIL, "run_id")),
    "insert_operator_action": (("detail", What.DETAIL, "run_id"),),
    "upsert_state": (("data", What.STATE, "task_key"),),
    "insert_state_history": (("data", What.STATE, "task_key"),),
    "insert_state_change": (("data", What.STATE, "task_key"),),
    "insert_intent": (("intent", What.INTENT, "run_id"),),
    "insert_migration": (("old_input", What.MIGRATION, "run_id"),
                         ("new_input", What.MIGRATION, "run_id")),
    "append_stream_entry": (("value", What.STREAM, "run_id"),),
    "insert_stream_entry": (("value", What.STREAM, "run_id"),),
    "insert_wait_request": (("request", What.REQUEST, "run_id"),),
    "insert_blob": (("data", What.BLOB, "sha256"),),
    "insert_conversation_part": (("body", What.CONVERSATION, "run_id"),),
}
# query -> its parameter that is a JSON list of new runs, each with an input.
BATCHES = {"insert_runs": "runs"}
# What a column read may hold (a value sealed as something else is refused).
COLUMNS: dict[str, frozenset[What]] = {
    "input": frozenset({What.INPUT}), "result": frozenset({What.RESULT}),
    "error": frozenset({What.ERROR}), "payload": frozenset({What.JOURNAL, What.EVENT}),
    "e_payload": frozenset({What.EVENT}), "data": frozenset({What.STATE}),
    "intent": frozenset({What.INTENT}), "value": frozenset({What.STREAM}),
    "request": frozenset({What.REQUEST}), "old_input": frozenset({What.MIGRATION}),
    "new_input": frozenset({What.MIGRATION}), "detail": frozenset({What.DETAIL}),
    "e_detail": frozenset({What.DETAIL}), "body": frozenset({What.CONVERSATION}),
}


def scope_of(name: str, value: object) -> str:
    if name == "task_key":
        return f"task:{value}"
    return f"blob:{value}" if name == "sha256" else str(value)


class Row(dict[str, Any]):
    """A row some of whose values were opened: read by name, or by position
    as the driver's rows are."""

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, int):
            return list(self.values())[key]
        return super().__getitem__(key)


# -- data keys --------------------------------------------------------------------------
def _stored(row: Any) -> WrappedKey | None:
    if row["wrapped"] is None:
        return None
    return WrappedKey(str(row["key_id"]), base64.b64decode(row["wrapped"]))


def key_of(sealer: Sealer, scope: str, made: dict[str, DataKey] | None, *,
           create: bool = False) -> Flow[DataKey | None]:
    """The data key of `scope`; None once forgotten. `made`: the keys this
    transaction made (or an export carries), looked at first; `create` (a
    write that seals): a scope without a key gets one, kept in `made`;
    else a scope without one raises `PayloadUnreadable`."""
    known = sealer.known(scope)
    if known is not None:
        return known
    if made is not None and scope in made:
        return made[scope]
    row = yield one("get_payload_key", {"scope": scope})
    if row is None and create and made is not None:
        key, wrapped = sealer.new_key(scope)
        yield execute("insert_payload_key", {
            "scope": scope, "key_id": wrapped.key_id,
            "wrapped": base64.b64encode(wrapped.blob).decode("ascii")})
        row = yield one("get_payload_key", {"scope": scope})
        if row is not None and row["wrapped"] == base64.b64encode(wrapped.blob).decode("ascii"):
            made[scope] = key  # not kept past this transaction: it may yet roll back
            return key
    if row is None:
        raise errors.PayloadUnreadable(f"no data key is stored for {scope}: its payloads "
                                       "cannot be opened")
    stored = _stored(row)
    if stored is None:
        return None
    key = sealer.open_key(scope, stored)
    if not scope.startswith("task:"):  # a task's key is replaced once it is forgotten
        sealer.learn(key)
    return key


def forgotten(scope: str) -> errors.PayloadUnreadable:
    return errors.PayloadUnreadable(
        f"the payloads of {scope} were forgotten (`stead tasks forget`): nothing more can be "
        "stored for it")


def seal(sealer: Sealer, text: str, where: Where,
         made: dict[str, DataKey]) -> Flow[str]:
    if envelope.is_sealed(text) or envelope.is_forgotten(text):
        return text  # copied from a row as it was read: already sealed
    key = yield from key_of(sealer, where.scope, made, create=True)
    if key is None:
        raise forgotten(where.scope)
    return sealer.seal(text, where, key)


def _sealed_params(sealer: Sealer, step: Query, made: dict[str, DataKey]) -> Flow[Query]:
    params = dict(step.params)
    for name, what, scope_param in WRITES[step.name]:
        text = params.get(name)
        if text is None:
            continue
        if scope_param not in params:  # a caller that forgot it would store it in clear
            raise errors.StoreError(f"query {step.name} names no {scope_param}: its {name} "
                                    "cannot be sealed")
        where = Where(scope_of(scope_param, params[scope_param]), what)
        if isinstance(text, str):
            params[name] = yield from seal(sealer, text, where, made)
        elif isinstance(text, bytes) and not envelope.is_sealed_blob(text):
            key = yield from key_of(sealer, where.scope, made, create=True)
            if key is None:
                raise forgotten(where.scope)
            params[name] = sealer.seal_blob(text, where, key)
    return dataclasses.replace(step, params=params)


def _sealed_batch(sealer: Sealer, step: Query, made: dict[str, DataKey]) -> Flow[Query]:
    param = BATCHES[step.name]
    runs = json.loads(step.params[param])
    for run in runs:
        run["input"] = yield from seal(sealer, run["input"], Where(run["run_id"], What.INPUT),
                                       made)
    return dataclasses.replace(step, params={**step.params, param: json.dumps(runs)})


def sealed_records(sealer: Sealer, run_id: str, records: Sequence[Record],
                   made: dict[str, DataKey]) -> Flow[list[Record]]:
    out = []
    for r in records:
        payload = yield from seal(sealer, r.payload, Where(run_id, What.JOURNAL), made)
        out.append(r.evolve(payload=payload))
    return out


def sealed_write(sealer: Sealer, write: FencedWrite,
                 made: dict[str, DataKey]) -> Flow[FencedWrite]:
    """`write` with its payloads sealed."""
    run_id = write.fence.run_id
    records = yield from sealed_records(sealer, run_id, write.records, made)
    end = write.finish
    if end is not None:
        result = None if end.result is None else (
            yield from seal(sealer, end.result, Where(run_id, What.RESULT), made))
        error = None if end.error is None else (
            yield from seal(sealer, end.error, Where(run_id, What.ERROR), made))
        end = dataclasses.replace(end, result=result, error=error)
    return dataclasses.replace(write, records=records, finish=end)


def sealed_write_with_key(sealer: Sealer, key: DataKey, write: FencedWrite) -> FencedWrite:
    """`write` sealed with its run's data key in hand (no flow needed). On
    every step's path: records are built directly, `dataclasses.replace`
    costs more than the sealing."""
    run_id = write.fence.run_id

    def sealed(text: str, what: What) -> str:
        if envelope.is_sealed(text) or envelope.is_forgotten(text):
            return text
        return sealer.seal(text, Where(run_id, what), key)

    records = [type(r)(r.seq, r.addr, r.attempt, r.kind, r.name, r.digest, r.status,
                       sealed(r.payload, What.JOURNAL), r.epoch, r.at) for r in write.records]
    end = write.finish
    if end is not None:
        end = Finish(end.status, None if end.result is None else sealed(end.result, What.RESULT),
                     None if end.error is None else sealed(end.error, What.ERROR), end.now)
    return FencedWrite(write.fence, records, write.resume, end)


# -- reading ------------------------------------------------------------------------------
def _expected_scope(column: str, row: Any, names: Sequence[str],
                    params: dict[str, Any]) -> str | None:
    if column == "data":
        key = row["task_key"] if "task_key" in names else params.get("task_key")
        return None if key is None else scope_of("task_key", key)
    run_id = row["run_id"] if "run_id" in names else params.get("run_id")
    return None if run_id is None else str(run_id)


def open_value(sealer: Sealer, text: str, column: str, scope: str | None,
               made: dict[str, DataKey] | None) -> Flow[str]:
    """The plain text of sealed `text`, read from `column` of a row of
    `scope` (None: not known)."""
    where, _ = envelope.unpack(text)
    if scope is not None and where.scope != scope:
        raise errors.PayloadUnreadable(
            f"a payload of {scope} ({column}) was sealed for {where.scope}: it was moved "
            "between rows")
    allowed = COLUMNS.get(column)
    if allowed is not None and where.what not in allowed:
        raise errors.PayloadUnreadable(
            f"a {column} of {where.scope} was sealed as {where.what}: it was moved between "
            "columns")
    key = yield from key_of(sealer, where.scope, made)
    if key is None:
        return envelope.FORGOTTEN
    return sealer.unseal(text, where, key)


def _opened_row(sealer: Sealer, row: Any, params: dict[str, Any],
                made: dict[str, DataKey] | None) -> Flow[Any]:
    if row is None or not hasattr(row, "keys"):
        return row
    names = list(row.keys())
    sealed = [n for n in names if envelope.is_sealed(row[n])]
    blobs = [n for n in names if envelope.is_sealed_blob(row[n])]
    if not sealed and not blobs:
        return row
    opened = Row((n, row[n]) for n in names)
    for n in blobs:
        where = Where(scope_of("sha256", row["sha256"] if "sha256" in names else ""), What.BLOB)
        key = yield from key_of(sealer, where.scope, made)
        if key is None:
            raise forgotten(where.scope)
        opened[n] = sealer.unseal_blob(row[n], where, key)
    for n in sealed:
        opened[n] = yield from open_value(sealer, row[n], n,
                                          _expected_scope(n, row, names, params), made)
    return opened


def _opened_answer(sealer: Sealer, step: Query, answer: Any,
                   made: dict[str, DataKey] | None) -> Flow[Any]:
    if step.fetch is Fetch.ONE:
        return (yield from _opened_row(sealer, answer, step.params, made))
    if step.fetch is Fetch.ALL and answer:
        opened = []
        for r in answer:
            opened.append((yield from _opened_row(sealer, r, step.params, made)))
        return opened
    return answer


def wrap(sealer: Sealer, flow: FlowFactory[T], *, writes: bool) -> FlowFactory[T]:
    """`flow` with what it writes sealed and what it reads opened. `writes`:
    it runs in a write transaction, where a scope gets a data key when it
    has none."""

    def sealing() -> Flow[T]:
        made: dict[str, DataKey] | None = {} if writes else None
        steps = flow()
        answer: Any = None
        try:
            while True:
                step = steps.send(answer)
                if isinstance(step, Query):
                    if made is not None and step.name in WRITES:
                        step = yield from _sealed_params(sealer, step, made)
                    elif made is not None and step.name in BATCHES:
                        step = yield from _sealed_batch(sealer, step, made)
                    answer = yield step
                    if step.fetch is not Fetch.NOTHING and step.fetch is not Fetch.COUNT:
                        answer = yield from _opened_answer(sealer, step, answer, made)
                elif isinstance(step, Together):
                    # Reads (see `Together`): each answer opened, in turn.
                    answers = yield step
                    answer = []
                    for query, got in zip(step.queries, answers, strict=True):
                        if query.fetch is not Fetch.NOTHING and query.fetch is not Fetch.COUNT:
                            got = yield from _opened_answer(sealer, query, got, made)
                        answer.append(got)
                elif isinstance(step, Journal) and made is not None:
                    write = yield from sealed_write(sealer, step.write, made)
                    answer = yield dataclasses.replace(step, write=write)
                else:
                    answer = yield step
        except StopIteration as done:
            return cast(T, done.value)

    return sealing


def opened_runs(sealer: Sealer, runs: list[RunRow]) -> Flow[list[RunRow]]:
    """Runs read outside a flow (a claim's), their payloads opened."""
    out = []
    for run in runs:
        changes: dict[str, Any] = {}
        for column in ("input", "result", "error"):
            text = getattr(run, column)
            if envelope.is_sealed(text):
                changes[column] = yield from open_value(sealer, text, column, run.run_id, None)
        out.append(dataclasses.replace(run, **changes) if changes else run)
    return out


def run_key(sealer: Sealer, run_id: str) -> Flow[DataKey | None]:
    """The run's data key, made if it has none (a write)."""
    made: dict[str, DataKey] = {}
    key = yield from key_of(sealer, run_id, made, create=True)
    return key


class Sealed:
    """What a backend calls: its flows and journal writes, sealed when
    `db.sealer` is set, untouched when not."""

    @staticmethod
    def flow(db: Database, flow: FlowFactory[T], *, writes: bool) -> FlowFactory[T]:
        return flow if db.sealer is None else wrap(db.sealer, flow, writes=writes)

    @staticmethod
    async def journal(db: Database, write: FencedWrite) -> FencedWrite:
        sealer = db.sealer
        if sealer is None:
            return write
        run_id = write.fence.run_id
        key = sealer.known(run_id)
        if key is None:
            key = await db.write(lambda: run_key(sealer, run_id), Writing())
            if key is None:  # forgotten: which ended the run and took its lease
                raise stale(write.fence)
            sealer.learn(key)  # committed now
        return sealed_write_with_key(sealer, key, write)
