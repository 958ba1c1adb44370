"""Task state: versioned business facts of a task (`status`,
`refund_dispatched`…), changed only by compare-and-set on the version.

`await run.state.update(patch, expect_version=v)` merges `patch` (JSON merge
patch: `None` deletes a key) if the version is still `v`, else raises
`StateConflict`. Reads and changes are journaled, so replay sees what the run
saw, and each change records the run that made it.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from stead import addresses, codec, errors
from stead.records import RecordKind, RecordStatus, StateRow

if TYPE_CHECKING:
    # For the annotations alone: a client reading runs need not load what executes them.
    from stead.execution import Execution

# The largest task state written from outside a run (`Client.set_state`): the
# default of a worker's `max_result_bytes`, which bounds a run's.
OUTSIDE_LIMIT = 16 * 1024 * 1024


def state_text(data: Any, task_key: str, limit: int) -> str:
    """The JSON text of a task's new state; `StateTooLarge` if it is longer
    than `limit`, the hard cap (under it, one over the inline limit goes to
    the blob store: see `store._large_state`)."""
    text = codec.dumps(data, what="state")
    if len(text) > limit:
        raise errors.StateTooLarge(task_key, len(text), limit)
    return text


@dataclasses.dataclass(frozen=True)
class Facts:
    """A task's state at one version. Version 0 is "nothing recorded yet"."""

    version: int
    data: dict[str, Any]

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    @classmethod
    def from_row(cls, row: StateRow | None) -> Facts:
        return cls(0, {}) if row is None else cls(row.version, codec.loads(row.data))


def changed_keys(before: Facts, after: Facts) -> list[str]:
    """The top-level keys added, removed or changed from `before` to
    `after`, sorted: what a diff of the world names."""
    keys = set(before.data) | set(after.data)
    return sorted(k for k in keys if k not in before.data or k not in after.data
                  or codec.canonical(before.data[k]) != codec.canonical(after.data[k]))


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge recursively, None deletes."""
    if not isinstance(patch, dict):
        return patch
    merged = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


class TaskState:
    """`run.state`: the facts of the run's task (its task_id, else the run)."""

    def __init__(self, x: Execution, task_key: str) -> None:
        self._x = x
        self.task_key = task_key

    async def get(self) -> Facts:
        """Read the facts now; the read is journaled (it rides along with the
        next commit), so replay sees the same facts."""
        addr = addresses.reserve()
        prior = self._x.take(addr, RecordKind.STATE, "get", "")
        if prior:
            return _facts(prior[-1].payload)
        self._x.check_live()
        with self._x.busy():
            facts = Facts.from_row(await self._x.store.read_state(self.task_key))
        payload = codec.dumps({"version": facts.version, "data": facts.data}, what="state")
        self._x.buffer(
            self._x.record(addr, 1, RecordKind.STATE, "get", "", RecordStatus.OK, payload))
        return facts

    async def update(self, patch: dict[str, Any], *, expect_version: int | None) -> Facts:
        """Merge `patch` if the state is still at `expect_version` (None: at any
        version), in one fenced transaction with its journal record."""
        if not isinstance(patch, dict):
            raise TypeError("a state patch is a dict (JSON merge patch)")
        addr = addresses.reserve()
        patch_json = codec.loads(codec.dumps(patch, what="the patch of run.state.update"))
        digest = codec.digest(patch_json, expect_version)
        prior = self._x.take(addr, RecordKind.STATE, "update", digest)
        if prior:
            return self._settle(prior[-1].status, prior[-1].payload)
        self._x.check_live()

        def change(current: StateRow | None) -> tuple[str | None, RecordStatus, str]:
            facts = Facts.from_row(current)
            if expect_version is not None and facts.version != expect_version:
                return None, RecordStatus.ERROR, codec.dumps(
                    {"type": "StateConflict", "expected": expect_version,
                     "actual": facts.version}, what="a conflict")
            data = merge_patch(facts.data, patch_json)
            return (state_text(data, self.task_key, self._x.max_result_bytes), RecordStatus.OK,
                    codec.dumps({"version": facts.version + 1, "data": data}, what="state"))

        placeholder = self._x.record(
            addr, 1, RecordKind.STATE, "update", digest, RecordStatus.OK, "{}")
        _row, written = await self._x.write([placeholder], lambda batch, resume: (
            self._x.store.update_state(self._x.fence, batch, resume, self.task_key, change)))
        return self._settle(written.status, written.payload)

    def _settle(self, status: RecordStatus, payload: str) -> Facts:
        if status == RecordStatus.ERROR:
            data = codec.loads(payload)
            raise errors.StateConflict(self.task_key, data.get("expected"), int(data["actual"]))
        return _facts(payload)


def _facts(payload: str) -> Facts:
    data = codec.loads(payload)
    return Facts(int(data["version"]), dict(data["data"]))
