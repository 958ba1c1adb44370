"""Delivering events to the waits of runs, and the waits' own controls
(revoke, unlock)."""

from __future__ import annotations

from typing import Any

from stead import bounds, codec, errors, records
from stead.client.base import MAX_ID_CHARS, Base
from stead.workflow import waits


class Delivering(Base):
    """How `Client` delivers an event: checked, stored, judged in one transaction."""

    async def deliver(
        self,
        run_id: str,
        *,
        event_id: str,
        payload: Any = None,
        wait_id: str | None = None,
        kind: str | None = None,
        bind: dict[str, Any] | None = None,
        token: str | None = None,
        task_id: str | None = None,
        operator: waits.Operator | None = None,
    ) -> waits.Delivery:
        """Deliver an event to the wait `wait_id` (or the open wait of `kind`) of
        `run_id`. It is stored whatever the verdict; the check against the wait's
        resume contract and the consumption of the wait are one transaction.
        Returns `Accepted`, `Duplicate` (this event_id was delivered before:
        nothing happens twice) or `Rejected(reason, detail)`.

        A wait bound to `policy_version` is also compared with the current
        policy version of this client's app (`Rejected(policy_changed)`, naming
        both, if they differ); a client without an app cannot know it, and
        compares the event's value with the wait's copy only.

        `task_id` (the business key the sender knows the run by) must be the
        run's task: otherwise `TaskMismatch` is raised and nothing is stored.

        `operator=Operator(by, why)` delivers in place of the token (the
        dashboard, a signed webhook): every other check applies, and who and
        why are stored with the event."""
        if operator is not None and token is not None:
            raise errors.InvalidInput("an event comes with the wait's token or from an "
                                      "operator, not both")
        if not event_id or not isinstance(event_id, str):
            raise errors.SteadError("an event needs an event_id (it is what makes "
                                    "redelivery safe)")
        for what, value in (("run_id", run_id), ("event_id", event_id), ("wait_id", wait_id),
                            ("kind", kind), ("token", token), ("task_id", task_id)):
            bounds.optional_text(value, f"the event's {what}")
            if isinstance(value, str) and what != "token" and len(value) > MAX_ID_CHARS:
                raise errors.InvalidInput(
                    f"the event's {what} is {len(value)} characters long; at most "
                    f"{MAX_ID_CHARS} are accepted")
        if task_id is not None:
            await self._check_task(run_id, task_id)
        secrets = codec.Secrets()
        if token and waits.key_of(token) is not None:  # the event is stored: not its token
            secrets.add(token, wait_id or kind or "?")
        payload_text = codec.dumps(payload, what="the event payload", secrets=secrets)
        bind_text = codec.dumps(bind or {}, what="the event's bound values", secrets=secrets)
        # Refused before anything is stored: an event is a message, not a file.
        size = len(payload_text) + len(bind_text)
        if size > self.max_event_bytes:
            raise errors.EventTooLarge(
                f"event {event_id[:64]!r} for run {run_id[:64]!r} is {codec.size(size)} as "
                f"JSON, over the limit of {codec.size(self.max_event_bytes)}; nothing was "
                "stored. Send a reference to large data instead (or raise the limit: "
                "Client(max_event_bytes=...))"
            )
        bind_json = codec.loads(bind_text)
        if not isinstance(bind_json, dict):
            raise errors.SteadError("bind is a dict of the values the wait is bound to")
        refused = None if token is None else waits.token_refusal(await self.store.keyring(),
                                                                 token)
        incoming = waits.Incoming(
            run_id=run_id, event_id=event_id, wait_id=wait_id, kind=kind,
            payload=codec.loads(payload_text), bind=bind_json, token=token,
            token_refused=refused,
            lock_after=self.lock_wait_after,
            policy=None if self.app is None else waits.Known(
                None if self.app.current_policy is None else self.app.current_policy.version),
            operator=operator,
        )
        event = records.EventRow(
            run_id=run_id, event_id=event_id, wait_id=wait_id, kind=kind,
            payload=payload_text, bind=codec.dumps(bind_json, what="bind"),
            verdict=None, reason=None, detail=None, received_at=0.0,
            delivered_by=None if operator is None else operator.by,
            delivered_why=None if operator is None else operator.why,
        )
        judgement, stored = await self.store.deliver(
            event, lambda ctx: waits.judge(incoming, ctx))
        return waits.to_delivery(event_id, judgement, stored)

    async def _check_task(self, run_id: str, task_id: str) -> None:
        """Refuse an event naming another task than its run's (an unknown run
        is judged, and stored, as such)."""
        try:
            run = await self.store.get_run(run_id)
        except errors.UnknownRun:
            return
        if run.task_id != task_id:
            raise errors.TaskMismatch(
                f"the event names task {task_id[:64]!r}, but run {run_id} is "
                + ("of no task" if run.task_id is None else f"of task {run.task_id!r}")
                + "; nothing was stored. Deliver it to the run of that task")

    async def revoke_wait(self, wait_id: str) -> None:
        """Revoke an open wait: deliveries to it are rejected, and the run wakes
        to `WaitRevoked`."""
        await self.store.revoke_wait(wait_id)

    async def unlock_wait(self, wait_id: str) -> records.WaitRow:
        """Unlock a wait that too many bad tokens locked: it accepts events
        again (with the right token), and its count of bad tokens starts over."""
        return await self.store.unlock_wait(wait_id)
