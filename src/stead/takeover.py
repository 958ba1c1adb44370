"""The takeover pipeline (see docs/architecture.md), one small function per stage.

    claim (worker.py) → version gate → load checkpoint → replay → resume record

`prepare` runs the stages between the claim and replay. Replay is the workflow
re-executing against the journal (`run.py`), which classifies each journaled
call as it meets it (an effect's phases in `effects.py`); the resume record,
counting those classes, rides along with the first write after it
(`execution.py`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from stead import errors, inputs
from stead.app import App, Workflow
from stead.clock import Clock
from stead.execution import Execution, ExecutionOptions
from stead.records import Fence, RunRow, RunStatus
from stead.replay import Journal
from stead.store.base import Store


@dataclasses.dataclass(frozen=True)
class Stopped:
    """The pipeline decided the run cannot continue here, and why."""

    status: RunStatus
    reason: str


@dataclasses.dataclass(frozen=True)
class Ready:
    workflow: Workflow[Any, Any]
    execution: Execution
    args: list[Any]
    kwargs: dict[str, Any]


def version_gate(app: App, row: RunRow) -> Workflow[Any, Any] | Stopped:
    """The run continues only on the exact workflow version it started on."""
    try:
        return app.get(row.workflow, row.version)
    except errors.UnknownWorkflow as exc:
        # Claims only take hosted versions, so this means the app changed
        # between claim and gate: leave the run for a worker that hosts it.
        return Stopped(RunStatus.PENDING, str(exc))


def decode_input(wf: Workflow[Any, Any], row: RunRow) -> tuple[list[Any], dict[str, Any]]:
    try:
        args, kwargs = inputs.decode(row.input)
    except (ValueError, KeyError, TypeError) as exc:
        raise errors.CorruptRecord(
            f"run {row.run_id}: its stored input is corrupt ({exc}); repair or cancel it"
        ) from exc
    try:
        # An input that does not fit the parameters would fail every attempt
        # the same way: stop the run for a human instead of retrying forever.
        return inputs.bind(wf, args, kwargs)
    except (ValueError, TypeError) as exc:
        raise errors.CorruptRecord(
            f"run {row.run_id}: its stored input does not fit the parameters of "
            f"{wf.key} ({exc}); cancel it and start it again with valid arguments"
        ) from exc


async def prepare(
    app: App, store: Store, clock: Clock, row: RunRow, worker_id: str,
    options: ExecutionOptions,
) -> Ready | Stopped:
    """Everything between the claim and the first replayed call."""
    gated = version_gate(app, row)
    if isinstance(gated, Stopped):
        return gated
    try:
        # Epoch 1 is a run's first claim ever (every claim, retry and cancel
        # bumps it): no one has journaled anything yet, so skip the round trip.
        recorded = await store.load_journal(row.run_id) if row.epoch > 1 else []
        journal = Journal(row.run_id, recorded)
        args, kwargs = decode_input(gated, row)
    except errors.CorruptRecord as exc:
        return Stopped(RunStatus.INCOMPATIBLE, str(exc))
    execution = Execution(
        store=store,
        fence=Fence(row.run_id, row.epoch, worker_id),
        journal=journal,
        clock=clock,
        code_version=gated.key,
        takeover=row.epoch > 1 or journal.length > 0,
        options=options,
    )
    return Ready(gated, execution, args, kwargs)
