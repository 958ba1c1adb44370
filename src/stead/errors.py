"""Every error stead raises on purpose derives from `SteadError`, and every
one is importable from here; the common ones are also at the top of `stead`.

Messages say what happened and what to do next, because they are read by an
operator at the moment something went wrong.

By where they come from:

- the store: `StoreError`, `StoreUnavailable`, `StoreRejected`,
  `DatabaseMissing`, `CorruptRecord`, `KeysUnavailable`, `PayloadUnreadable`,
  `PayloadKeyMissing`, `RunForgotten`;
- input refused at the door: `InvalidInput`, `InvalidValue`, `EventTooLarge`,
  `TaskMismatch`, `InvalidStart`, `UnknownWorkflow`, `UnknownRun`,
  `UnknownQueue`, `InvalidSchedule`, `InvalidTenant`;
- workflows and the journal: `StaleLease`, `SerializationError`,
  `ResultTooLarge`, `SecretInJournal`, `NonDeterminism`, `StepError`,
  `StepTimeout`, `ScriptExhausted`, `StateConflict`, `StateTooLarge`, `StreamClosed`,
  `ChildFailed`, `CancelRequested`;
- runs seen from outside: `RunFailed`, `DeadlineExceeded`, `RunEnded`,
  `NotStopped`, `StatusNotReached`, `ForkRefused`;
- waits: `WaitNotOpen`, `ChildEnded`, `WaitExpired`, `WaitRevoked`,
  `WaitPolicyChanged`, `TokenHidden`;
- effects: `EffectFailed`, `EffectCompensated`, `OutcomeUncertain`,
  `InvalidCheckResult`;
- intent and authority: `InvalidIntent`, `GrantWidening`, `GrantRefused`,
  `NotAllowed`, `UnknownAction`, `RunMovedOn`, `OutsideTenant`;
- workspaces: `WorkspaceError`, `WorkspaceOutsideRoot`, `WorkspaceEscape`,
  `WorkspaceUnsafe`, `WorkspaceTooLarge`, `WorkspaceChanged`,
  `WorkspaceMismatch`;
- deploys: `MigrationRefused`;
- upgrading stead: `SchemaBehind`, `SchemaAhead`, `MigrationBlocked`;
- spend and quotas: `SpendRefused`, `QuotaExceeded`.
"""

from __future__ import annotations

from typing import Any

# Grouped in the docstring above.
__all__ = [
    "CancelRequested",
    "ChildEnded",
    "ChildFailed",
    "CorruptRecord",
    "DatabaseMissing",
    "DeadlineExceeded",
    "EffectCompensated",
    "EffectFailed",
    "EventTooLarge",
    "ForkRefused",
    "GrantRefused",
    "GrantWidening",
    "InvalidCheckResult",
    "InvalidInput",
    "InvalidIntent",
    "InvalidSchedule",
    "InvalidStart",
    "InvalidTenant",
    "InvalidValue",
    "KeysUnavailable",
    "MigrationBlocked",
    "MigrationRefused",
    "NonDeterminism",
    "NotAllowed",
    "NotStopped",
    "OutcomeUncertain",
    "OutsideTenant",
    "PayloadKeyMissing",
    "PayloadUnreadable",
    "QuotaExceeded",
    "ResultTooLarge",
    "RunEnded",
    "RunFailed",
    "RunForgotten",
    "RunMovedOn",
    "SchemaAhead",
    "SchemaBehind",
    "ScriptExhausted",
    "SecretInJournal",
    "SerializationError",
    "SpendRefused",
    "StaleLease",
    "StateConflict",
    "StateTooLarge",
    "StatusNotReached",
    "SteadError",
    "StepError",
    "StepTimeout",
    "StoreError",
    "StoreRejected",
    "StoreUnavailable",
    "StreamClosed",
    "TaskMismatch",
    "TokenHidden",
    "UnknownAction",
    "UnknownQueue",
    "UnknownRun",
    "UnknownWorkflow",
    "WaitExpired",
    "WaitNotOpen",
    "WaitPolicyChanged",
    "WaitRevoked",
    "WorkspaceChanged",
    "WorkspaceError",
    "WorkspaceEscape",
    "WorkspaceMismatch",
    "WorkspaceOutsideRoot",
    "WorkspaceTooLarge",
    "WorkspaceUnsafe",
]


class SteadError(Exception):
    """Base of every error stead raises on purpose."""


class StoreError(SteadError):
    """The store could not be opened, read or written."""


class StoreUnavailable(StoreError):
    """The database is locked, unreadable or unreachable; nothing was written."""


class StoreRejected(StoreError):
    """The database refused the write for good (a value it cannot hold, a
    number out of its range, a broken constraint): trying again cannot
    succeed, so it is never retried. A run whose write is refused fails,
    with the database's reason."""


class DatabaseMissing(StoreUnavailable):
    """The database file the store opened was deleted or replaced: what is
    written now goes to a file no one can open again. The worker stops."""


class CorruptRecord(StoreError):
    """A stored row cannot be decoded; it is left untouched for a human."""


class StaleLease(SteadError):
    """This worker no longer holds the run: another worker took it over (a newer
    epoch) or it was cancelled. The write was rejected; stop touching the run."""


class SerializationError(SteadError):
    """A value cannot be stored as JSON (stead never pickles)."""


class ResultTooLarge(SerializationError):
    """A value to journal (a step's, effect's or model call's result) is larger
    than the limit for one journaled value (`WorkerOptions.max_result_bytes`)."""


class StateTooLarge(ResultTooLarge):
    """A task's new state is larger than the hard cap for one journaled value
    (`WorkerOptions.max_result_bytes`; from outside a run, its default). A
    state over the inline limit (`STEAD_INLINE_BYTES`) but under the cap is
    kept in the blob store by reference; one over the cap is refused before
    anything is written, the state left at the version it was."""

    def __init__(self, task: str, chars: int, limit: int) -> None:
        super().__init__(
            f"task {task}: its new state is {chars} bytes as JSON, over the limit of {limit} "
            "for one value; the state was not changed. Keep large data outside the state "
            "(a step's result, a file, a bucket) and a reference to it in the state, or "
            "raise the limit (WorkerOptions.max_result_bytes)")
        self.task = task
        self.chars = chars
        self.limit = limit


class UnknownWorkflow(SteadError):
    """No workflow is registered under that name (and version)."""


class InvalidInput(SteadError):
    """The arguments do not fit the workflow's parameters or declared types."""


class InvalidValue(InvalidInput, ValueError):
    """A name, id or value holds what no store can keep (a NUL character, a
    lone surrogate), or a number (a duration, deadline, amount, version) is
    NaN, infinite, negative or out of range; nothing was stored. The message
    names the value and the range (see `stead.bounds`)."""


class EventTooLarge(InvalidInput):
    """An event (its payload and bound values) is larger than the limit the
    client accepts (`Client(max_event_bytes=...)`); nothing was stored."""


class UnknownRun(SteadError):
    """No run has that id."""


class NonDeterminism(SteadError):
    """Replayed code asked for something other than what the journal recorded.
    `addr` and `seq` say where, `expected` what the journal holds there and
    `actual` what the code does (each None when the message alone says it)."""

    def __init__(self, message: str, *, addr: str | None = None, seq: int | None = None,
                 expected: str | None = None, actual: str | None = None) -> None:
        super().__init__(message)
        self.addr = addr
        self.seq = seq
        self.expected = expected
        self.actual = actual


class WaitNotOpen(SteadError):
    """The wait is no longer open (consumed, expired or revoked)."""

    def __init__(self, wait_id: str, state: str) -> None:
        super().__init__(f"wait {wait_id} is {state}")
        self.wait_id = wait_id
        self.state = state


class WaitExpired(SteadError):
    """The wait expired before an event was accepted for it."""

    def __init__(self, kind: str, wait_id: str) -> None:
        super().__init__(
            f"wait {kind!r} ({wait_id}) expired with no accepted event; catch "
            "stead.WaitExpired in the workflow to decide what happens then (open a new "
            "wait, or give up)"
        )
        self.kind = kind
        self.wait_id = wait_id


class WaitRevoked(SteadError):
    """The wait was revoked (`client.revoke_wait`) before an event was accepted."""

    def __init__(self, kind: str, wait_id: str) -> None:
        super().__init__(
            f"wait {kind!r} ({wait_id}) was revoked before an event was accepted; catch "
            "stead.WaitRevoked in the workflow to handle it"
        )
        self.kind = kind
        self.wait_id = wait_id


class WaitPolicyChanged(SteadError):
    """The event accepted for a wait bound to its policy version reached a
    worker whose app runs another policy: the approval was given under a
    policy no longer in force."""

    def __init__(self, kind: str, wait_id: str, bound: str | None, now: str | None) -> None:
        super().__init__(
            f"wait {kind!r} ({wait_id}) was opened under policy {bound or 'none'}, and the "
            f"policy is now {now or 'none'}: the event accepted for it no longer counts. "
            "Catch stead.WaitPolicyChanged in the workflow and open a new wait to ask again "
            "under the policy in force"
        )
        self.kind = kind
        self.wait_id = wait_id
        self.bound = bound
        self.now = now


class NotStopped(SteadError):
    """A decision was given for a run that is not stopped waiting for one."""


class RunEnded(SteadError):
    """A change was asked of a run that has ended (completed, failed,
    cancelled, revalidation_failed): nothing was stored."""


class StepError(SteadError):
    """A step raised. Live and on replay the workflow sees this same error, built
    from the journal (`error_type`, `message`), so its control flow is the same."""

    def __init__(self, step: str, error_type: str, message: str, attempts: int = 1) -> None:
        super().__init__(self._describe(step, error_type, message, attempts))
        self.step = step
        self.error_type = error_type
        self.message = message
        self.attempts = attempts

    @staticmethod
    def _describe(step: str, error_type: str, message: str, attempts: int) -> str:
        return f"step {step!r} failed after {attempts} attempt(s): {error_type}: {message}"


class StepTimeout(StepError):
    """A step's attempts ran out of their `timeout=` (`error_type` stays
    "TimeoutError", as journaled): catch it to handle a slow step apart from
    one that raised."""


class EffectFailed(StepError):
    """The outside said no (a known failure), after every allowed attempt. `step`
    is the effect's name."""

    @staticmethod
    def _describe(step: str, error_type: str, message: str, attempts: int) -> str:
        return (
            f"effect {step!r} failed after {attempts} attempt(s): {error_type}: {message} "
            "(a known failure, not an unknown outcome: catch stead.EffectFailed in the "
            "workflow to handle it, or allow more attempts with retry=)"
        )


class EffectCompensated(SteadError):
    """A human reconciled the effect as compensated: it happened and was undone
    (by the effect's declared compensation, run as an effect of its own, or
    outside, when it declares none)."""

    def __init__(self, name: str, key: str, detail: Any, compensation: Any = None) -> None:
        super().__init__(
            f"effect {name!r} (key {key}) was compensated: {detail}. A person decided it "
            "happened and was to be undone; catch stead.EffectCompensated in the workflow to "
            "carry on without it"
        )
        self.name = name
        self.key = key
        self.detail = detail
        # What the effect's declared compensation returned (None without one).
        self.compensation = compensation


class OutcomeUncertain(SteadError):
    """Raise it from an effect function when you cannot tell whether the outside
    acted (a dropped connection after the request was written, say). Like a
    timeout, it makes the outcome *unknown*, never "it did not happen"."""


class InvalidCheckResult(SteadError):
    """An effect's `check` answered `Outcome.done(result)` with a result of
    another shape than the effect's own (its declared return type, or what an
    integration journals: a LangGraph node's update, an MCP `CallToolResult`).
    Nothing is recorded: the run stops as `outcome_unknown`, to be retried once
    the check is fixed, or reconciled."""


class StateConflict(SteadError):
    """The task state moved: it is not at the version the change expected."""

    def __init__(self, task: str, expected: int | None, actual: int) -> None:
        super().__init__(
            f"task {task}: state is at version {actual}, not {expected}; "
            "read it again and decide on what it says now"
        )
        self.task = task
        self.expected = expected
        self.actual = actual


class ScriptExhausted(SteadError):
    """The scripted model was asked more often than it has answers."""


class RunFailed(SteadError):
    """The run ended without a result (failed, cancelled or stopped for a human)."""

    def __init__(self, run_id: str, status: str, error: object) -> None:
        super().__init__(f"run {run_id} ended as {status}: {error}")
        self.run_id = run_id
        self.status = status
        self.error = error


class DeadlineExceeded(RunFailed):
    """The run passed the `deadline=` it was started with before it ended: it
    failed at its next call boundary (`Client.result` raises this)."""


class KeysUnavailable(StoreError):
    """No key to sign or check wait tokens (see `stead.keys` for where keys
    come from), or a key file that cannot be used. Like a store that cannot be
    reached, it is the deployment's problem, never the workflow's."""


class PayloadUnreadable(StoreError):
    """A stored payload does not open: changed since it was written, moved
    from another row, or sealed with a scheme this stead does not know.
    stead never hands such a value on."""


class PayloadKeyMissing(PayloadUnreadable):
    """The key that wraps a payload's data key is not in the keyring (see
    `stead.keys`): restore it (`STEAD_KEY_FILE`, the key file beside the
    database), or give the codec that holds it (`open_store(payloads=...)`)."""

    def __init__(self, key_id: str) -> None:
        super().__init__(
            f"payload key {key_id} is not in the keyring: restore the key file that holds it "
            "(or the codec that wraps it); stead cannot read these payloads without it")
        self.key_id = key_id


class RunForgotten(SteadError):
    """The run's task was forgotten (`stead tasks forget`): its payloads are
    gone, so it cannot be resumed, forked or read; its audit stays."""

    def __init__(self, run_id: str, task_id: str, *, by: str, why: str, at: float) -> None:
        super().__init__(
            f"run {run_id} was forgotten with task {task_id} by {by} ({why}); its payloads "
            "are gone, so it cannot be resumed or forked")
        self.run_id, self.task_id, self.by, self.why, self.at = run_id, task_id, by, why, at


class SecretInJournal(SerializationError):
    """A value about to be stored holds a live wait token in clear."""

    def __init__(self, what: str, wait_id: str) -> None:
        super().__init__(
            f"{what} holds the token of wait {wait_id} in clear; refused, nothing was "
            "stored. A token never enters the journal: pass the Token object itself "
            "(it is journaled as a reference), build the link inside the effect that "
            "sends it (w.link(base_url) or w.token.reveal()), and return nothing that "
            "contains it"
        )
        self.what = what
        self.wait_id = wait_id


class TokenHidden(SteadError):
    """A token's value was asked for where it could leak into the journal."""


class StatusNotReached(SteadError):
    """`Client.wait_for` gave up: the run did not reach one of the statuses in
    time, or it ended in another."""

    def __init__(self, run_id: str, wanted: object, status: str, why: str) -> None:
        super().__init__(f"run {run_id} did not reach {wanted}: {why} (status {status})")
        self.run_id = run_id
        self.status = status


class InvalidIntent(SteadError):
    """An intent, grant, budget or scope is malformed; nothing was stored.
    Fix the value (or the intent file) the message names and give it again."""


class GrantWidening(SteadError):
    """A renewal would widen a grant's scope. Renewals may narrow; to widen on
    purpose, pass `widen=True` (`--widen`) and say why."""


class GrantRefused(SteadError):
    """No unexpired grant covers an effect's call at the moment its intent
    would commit; nothing was sent and the run pauses for a decision."""


class ForkRefused(SteadError):
    """A fork would start past an effect whose outcome the journal prefix does
    not know (its intent is journaled, its outcome is not): the fork could
    send it a second time. Fork before the effect's intent, or after its
    outcome (decide it first with `stead reconcile`). Nothing was created."""

    def __init__(self, message: str, *, effect: str, seq: int) -> None:
        super().__init__(message)
        self.effect = effect
        self.seq = seq


class TaskMismatch(InvalidInput):
    """An event named a task that is not the task of the run it was
    delivered to; nothing was stored."""


class RunMovedOn(SteadError):
    """An operator's action was decided on a view of the run that is no
    longer true (its status or epoch changed since): it is refused, and the
    message says what the run is now."""


class NotAllowed(SteadError):
    """An operator's action needs a role the operator does not hold
    (`stead.roles`): it is refused, audited, and nothing changed."""


class OutsideTenant(SteadError):
    """A client scoped to one tenant (`Client(tenant=...)`, an operator of one
    tenant on the dashboard) was asked to act beyond it: start a run of
    another tenant, list another's runs, or use a store operation that spans
    every tenant. Nothing was read or changed. (Another tenant's run itself
    is not there for it: `UnknownRun`.)"""


class UnknownAction(SteadError):
    """An operator action that does not exist, or that does not apply to what
    it names (a wait, an effect, a grant) as the run is now."""


class MigrationRefused(SteadError):
    """A migration (or its rollback) was not applied, and nothing changed: it
    would lose an effect's record, its input does not fit the new version,
    the run is held by a worker or moved meanwhile, or something was
    journaled since the migration. The message says which."""


class SchemaBehind(StoreError):
    """The database's schema is older than this code needs, and opening it
    did not migrate it (`STEAD_MIGRATE`, or a pending migration that is not
    online and compatible): the process writes nothing. The message names
    both versions and the migrations pending; `stead db migrate` applies them."""


class SchemaAhead(StoreError):
    """The database was migrated past what this code can work with: a
    migration newer than the code is not compatible with older code. The
    process writes nothing (a worker stops claiming); the message names both
    versions and the release to upgrade to."""


class MigrationBlocked(StoreError):
    """A schema migration was not applied, and nothing of it changed: it could
    not take its locks in time (a long transaction held them), or it would
    break live workers that run older code. The message says which, and what
    to do."""


class WorkspaceError(SteadError):
    """A workspace (a directory attached to a run) cannot be saved or restored
    as asked; nothing was stored or left half-written."""


class WorkspaceOutsideRoot(WorkspaceError):
    """The directory to attach is not inside the allowed root (`root=`,
    `$STEAD_WORKSPACE_ROOT`, else the worker's current directory)."""


class WorkspaceEscape(WorkspaceError):
    """A symbolic link in the workspace leads outside it (its chain of links
    followed, as the kernel would), or a stored snapshot's entry names a path
    outside the tree it is restored into: a restore on another machine could
    not bring its target back, and writes nothing outside its destination."""


class WorkspaceUnsafe(WorkspaceError):
    """A tree holds what no restore could write as saved and keep inside its
    destination: a malformed manifest entry, a NUL, a duplicate path, an entry
    below a link or a file, a link that never resolves (a loop). A restore
    refuses it before writing anything."""


class WorkspaceTooLarge(WorkspaceError):
    """The workspace holds more bytes than its limit (`max_bytes=`)."""


class WorkspaceChanged(WorkspaceError):
    """A file changed while the workspace was being saved; save again."""


class WorkspaceMismatch(WorkspaceError):
    """A restored workspace does not hash to its recorded snapshot; the run
    stops before replay. `differences` says what differs."""

    def __init__(self, message: str, differences: list[str]) -> None:
        super().__init__(message)
        self.differences = differences


class ChildFailed(SteadError):
    """A child run (`run.child`) ended without a result: it failed, was
    cancelled or terminated. Live and on replay the parent sees this same
    error, built from its journal."""

    def __init__(self, name: str, run_id: str, status: str, error_type: str,
                 message: str) -> None:
        super().__init__(
            f"child {name!r} (run {run_id}) ended {status}: {error_type}: {message}")
        self.name = name
        self.run_id = run_id
        self.status = status
        self.error_type = error_type
        self.message = message


class ChildEnded(WaitNotOpen):
    """A child the run would suspend for has ended meanwhile: the run does not
    suspend, it reads the child's outcome."""


class CancelRequested(SteadError):
    """Someone asked to cancel the run while it was being suspended: it does
    not suspend, it ends as cancelled at its call boundary."""


class InvalidSchedule(SteadError):
    """A schedule's cron expression or missed-tick policy is not valid."""


class UnknownQueue(SteadError):
    """A run was started in a queue the app does not declare (`app.queue`)."""


class InvalidTenant(InvalidInput):
    """A tenant id is not one stead keeps (1 to 64 letters, digits and `_ . : @ -`,
    starting with a letter or a digit), or a run was given a tenant its queue or
    its parent does not have."""


class InvalidStart(InvalidInput):
    """An item of a batch start (`Client.start_many`, a line given to `stead
    start -`) is malformed or does not fit its workflow; the message names it.
    Nothing of the batch was started."""


class StreamClosed(SteadError):
    """A value was appended to a stream after it was closed (see `stead.workflow.streams`)."""


class SpendRefused(SteadError):
    """A model call's reservation would pass a spend budget (the run's or its
    tenant's, in tokens or cost): nothing was sent, and the run pauses with
    `detail` (scope, tenant, unit, used, reserved, estimate, limit) as its
    reason (see `stead.spend`)."""

    def __init__(self, message: str, detail: dict[str, Any]) -> None:
        super().__init__(message)
        self.detail = detail


class QuotaExceeded(SteadError):
    """A tenant's quota refused what was asked (a run started, a wait opened,
    a child started, bytes stored): nothing was written. Other tenants are not
    affected; `stead tenants set TENANT ...` raises the quota."""

    def __init__(self, message: str, *, tenant: str, quota: str, limit: float,
                 used: float) -> None:
        super().__init__(message)
        self.tenant = tenant
        self.quota = quota
        self.limit = limit
        self.used = used
