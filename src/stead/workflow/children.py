"""Child runs: `await run.child(workflow, *args, task_id=...)`.

A child is a run of its own (its own journal, lease and worker), started by
its parent and awaited durably:

1. **Start.** The child's id is derived from the parent's id and the call's
   address, and the child is created in the same transaction that journals
   its id in the parent (`Store.start_child`): a takeover finds both or
   neither, so it never starts a second child.
2. **Await.** The parent reads the child's row; while the child is live the
   parent's branch parks, and once every branch is parked the parent
   suspends (no lease, no worker). The child's end wakes it (a trigger on
   the child's status); the suspension checks its children, locking their
   rows, so an end in between is never missed.
3. **Result.** The child's outcome is journaled in the parent: its result,
   or its status and error, which the parent sees as `ChildFailed`, live and
   on replay alike.

Cancelling a parent cancels its live children (`Store.request_cancel`).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from stead import addresses, codec, errors, run_ids
from stead.execution import Execution
from stead.records import TERMINAL, NewRun, Record, RecordKind, RecordStatus, RunRow, RunStatus


class Target(Protocol):
    """What `run.child` takes: a registered workflow (`stead.Workflow`)."""

    @property
    def name(self) -> str: ...

    @property
    def version(self) -> int: ...

    @property
    def fn(self) -> Callable[..., Any]: ...


def child_id(parent_id: str, addr: str) -> str:
    """The id of the child the call at `addr` of run `parent_id` starts."""
    return run_ids.child(parent_id, addr)


def _failure(name: str, payload: Mapping[str, Any]) -> errors.ChildFailed:
    return errors.ChildFailed(name, str(payload.get("run_id", "")),
                              str(payload.get("status", "")),
                              str(payload.get("type", "Error")),
                              str(payload.get("message", "")))


def _outcome(row: RunRow) -> tuple[RecordStatus, dict[str, Any]]:
    """The journal record of a child that ended: its result, or its failure."""
    if row.status == RunStatus.COMPLETED:
        return RecordStatus.OK, {"run_id": row.run_id,
                                 "result": None if row.result is None else
                                 json.loads(row.result)}
    try:
        error = json.loads(row.error) if row.error else {}
    except ValueError:
        error = {}
    error = error if isinstance(error, dict) else {}
    return RecordStatus.ERROR, {
        "run_id": row.run_id, "status": row.status,
        "type": str(error.get("type", row.status)),
        "message": str(error.get("message", f"the child run ended {row.status}")),
    }


class Child:
    """One `run.child` call at one address, driven to the child's outcome."""

    def __init__(self, x: Execution, workflow: Target, args: Sequence[Any],
                 kwargs: Mapping[str, Any], *, task_id: str | None, name: str | None,
                 deadline: float | None) -> None:
        if not isinstance(getattr(workflow, "name", None), str) or not isinstance(
                getattr(workflow, "version", None), int):
            raise TypeError("run.child takes a registered workflow (what @app.workflow "
                            "returns)")
        if task_id is not None and (not isinstance(task_id, str) or not task_id.strip()):
            raise errors.InvalidInput(f"a child's task_id is a non-empty string, not "
                                      f"{task_id!r}")
        if deadline is not None and deadline <= 0:
            raise ValueError("a child's deadline is a positive number of seconds")
        try:  # arguments that could never start the child fail here, not in it
            inspect.signature(workflow.fn).bind(None, *args, **kwargs)
        except TypeError as exc:
            raise errors.InvalidInput(
                f"these arguments do not fit child workflow {workflow.name}@"
                f"{workflow.version}: {exc}") from None
        self.x = x
        self.workflow = workflow
        self.name = name or workflow.name
        self.task_id = task_id
        self.deadline = deadline
        self.input = codec.dumps({"args": list(args), "kwargs": dict(kwargs)},
                                 what=f"the input of child {self.name!r}")
        self.digest = codec.digest(workflow.name, workflow.version, self.input, task_id)
        self.addr = addresses.reserve()

    def _record(self, status: RecordStatus, payload: dict[str, Any]) -> Record:
        return self.x.record(self.addr, 1, RecordKind.CHILD, self.name, self.digest, status,
                             codec.dumps(payload, what=f"the outcome of child {self.name!r}"))

    def _settle(self, rec: Record) -> Any:
        payload = codec.loads(rec.payload)
        if rec.status == RecordStatus.ERROR:
            raise _failure(self.name, payload)
        return codec.convert(payload.get("result"), codec.return_type(self.workflow.fn))

    async def run(self) -> Any:
        x = self.x
        prior = x.take(self.addr, RecordKind.CHILD, self.name, self.digest)
        if len(prior) > 1 or (prior and prior[0].status == RecordStatus.ERROR):
            return self._settle(prior[-1])
        if prior:
            started = str(codec.loads(prior[0].payload)["run_id"])
        else:
            started = await self._start()
        return await self._await(started)

    async def _start(self) -> str:
        x = self.x
        x.check_live()
        new = NewRun(
            run_id=child_id(x.fence.run_id, self.addr), workflow=self.workflow.name,
            version=self.workflow.version, task_id=self.task_id, input=self.input,
            parent_id=x.fence.run_id,
            deadline=None if self.deadline is None else x.clock.now() + self.deadline,
        )
        opening = self._record(RecordStatus.OPEN, {"run_id": new.run_id})
        row, written = await x.write([opening], lambda batch, resume: x.store.start_child(
            x.fence, batch, resume, new))
        if written.status == RecordStatus.ERROR:
            self._settle(written)
        return row.run_id

    async def _await(self, run_id: str) -> Any:
        x = self.x
        while True:
            x.check_live()
            with x.busy():
                row = await x.store.get_run(run_id)
                if row.status in TERMINAL and row.result is not None:
                    # A large result comes back from the blob store; the
                    # parent's record of it goes there again.
                    row = dataclasses.replace(row, result=await x.store.resolve(row.result, run_id))
            if row.status in TERMINAL:
                status, payload = _outcome(row)
                rec = self._record(status, payload)
                await x.commit([rec])
                return self._settle(rec)
            await x.block(wake_at=None, wait_id=None, child_id=run_id)
