"""One attempt of a run, once its takeover is ready: run the workflow's body
under its tracing span and journal how it ended (completed, failed, stopped,
drained, continued or incompatible); and the run's release when nothing
more can be written."""

from __future__ import annotations

import asyncio
import json
import logging
import traceback
from collections.abc import Coroutine
from typing import Any

from stead import codec, errors, takeover, tracing
from stead.execution import Continued, Drain, Execution, Stop, exits
from stead.metrics import meters
from stead.metrics.meters import Takeover
from stead.records import Fence, RunRow, RunStatus
from stead.run import Run
from stead.store.base import Store

log = logging.getLogger("stead.worker")


def _message(exc: BaseException) -> str:
    """`exc`'s message; an exception group's names what it holds."""
    held = exits.leaves(exc)
    if held == [exc]:
        return str(exc)
    return f"{exc}: " + "; ".join(f"{type(e).__qualname__}: {e}" for e in held[:5]) + (
        f"; and {len(held) - 5} more" if len(held) > 5 else "")


def error_json(exc: BaseException) -> str:
    """A run's error as stored: the exception's type, message and traceback's end."""
    return json.dumps({
        "type": type(exc).__qualname__,
        "message": _message(exc),
        "traceback": "".join(traceback.format_exception(exc))[-4000:],
    })


async def finish_stopped(store: Store, fence: Fence, stopped: takeover.Stopped) -> None:
    """Release a run its takeover left pending, or end it as the takeover stopped it."""
    if stopped.status == RunStatus.PENDING:
        await store.release(fence)
    else:
        log.error("run %s stopped as %s: %s", fence.run_id, stopped.status, stopped.reason)
        await store.finish(
            fence, stopped.status,
            error=json.dumps({"type": stopped.error_type, "message": stopped.reason}),
            resume=stopped.resume,
        )


async def advance(store: Store, worker_id: str, row: RunRow,
                  ready: takeover.Ready) -> None:
    x = ready.execution
    with tracing.attempt(run_id=row.run_id, epoch=row.epoch, worker_id=worker_id,
                         task_id=row.task_id, workflow=row.workflow, version=row.version,
                         previous=x.journal.trace) as span:
        x.journal_trace(span.context())
        try:
            await attempt(store, row, ready)
        finally:
            span.replayed(x.journal.reused)


async def attempt(store: Store, row: RunRow, ready: takeover.Ready) -> None:
    x = ready.execution
    run = Run(x, row)
    coro: Coroutine[Any, Any, Any] = ready.workflow.fn(run, *ready.args, **ready.kwargs)
    body = x.start(coro)
    try:
        result: Any = await exits.unwrapped(body)
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if x.suspended and (current is None or not current.cancelling()):
            return  # parked on a wait or timer: the store holds it, no worker does
        raise
    except Drain:
        await release_quietly(store, x.fence)
        meters.takeover(Takeover.DRAIN)
        return
    except Continued as went_on:
        log.info("run %s continued as run %s", row.run_id, went_on.run_id)
        return
    except Stop as stop:
        log.warning("run %s stopped as %s: %s", row.run_id, stop.status,
                    stop.error.get("message"))
        # A sibling branch's effect in flight has its outcome journaled first.
        await x.effects_settled()
        await x.finish(stop.status, error=json.dumps(stop.error))
        return
    except errors.StaleLease:
        raise
    except Exception as exc:
        if x.lost is not None:
            raise x.lost from exc
        if x.store_failed is not None:
            raise x.store_failed from exc
        if isinstance(exc, errors.CorruptRecord):
            await incompatible(x, exc)
            return
        if isinstance(exc, errors.StoreError):
            raise  # the store's failure, not the workflow's
        if x.incompatible is not None:
            await incompatible(x, x.incompatible)
            return
        log.info("run %s failed: %s: %s", row.run_id, type(exc).__qualname__, _message(exc))
        await x.finish(RunStatus.FAILED, error=error_json(exc))
        return
    if x.lost is not None:
        raise x.lost
    if x.store_failed is not None:
        raise x.store_failed  # the workflow went on past a failed write
    if x.incompatible is not None:
        await incompatible(x, x.incompatible)
        return
    left = x.journal.untaken()
    if left:
        first = left[0]
        await incompatible(x, errors.NonDeterminism(
            f"run {row.run_id}: the workflow returned, but the journal holds "
            f"{len(left)} record(s) the code no longer makes, first {first.kind} "
            f"{first.name!r} at seq {first.seq}. Register the old version alongside "
            "the new one, then `stead runs retry RUN`; or cancel the run."
        ))
        return
    try:
        text = codec.dumps(result, what=f"the result of workflow {row.workflow!r}",
                           secrets=x.secrets)
    except errors.SerializationError as exc:
        await x.finish(RunStatus.FAILED, error=error_json(exc))
        return
    await x.finish(RunStatus.COMPLETED, result=text)


async def incompatible(
    x: Execution, exc: errors.NonDeterminism | errors.CorruptRecord,
) -> None:
    log.error("%s", exc)
    await x.finish(RunStatus.INCOMPATIBLE, error=json.dumps({
        "type": type(exc).__qualname__, "message": str(exc),
    }))


async def release_quietly(store: Store, fence: Fence) -> bool:
    """Give the run back, if the store lets us; False only if it could not be
    reached (the lease is still this worker's), for the caller to try again."""
    try:
        await asyncio.shield(store.release(fence))
    except errors.StoreUnavailable:
        return False
    except (errors.SteadError, asyncio.CancelledError):
        pass  # refused for good, or no longer ours: nothing to try again
    return True
