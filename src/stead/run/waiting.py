"""`Run.wait` and `Run.sleep`: a durable wait for one event, and a durable
timer; a run taken over waits only for what is left."""

from __future__ import annotations

import datetime as dt
import uuid as _uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from stead import addresses, bounds, codec, records
from stead.records import RecordKind, RecordStatus
from stead.run.base import Part

# The first wait a worker's runs open imports what a wait is made of (its
# records, tokens, keys, schema): a worker whose runs never wait loads none.
if TYPE_CHECKING:
    from stead.workflow import waits

T = TypeVar("T")


def _schema_text(schema: Any) -> str:
    """A wait's schema as JSON Schema text: a dict is one already; a type (a
    pydantic model, a dataclass...) has pydantic's (draft 2020-12)."""
    from stead import schema_check

    text = codec.dumps(schema if isinstance(schema, Mapping) else codec.json_schema(schema),
                       what="the wait's schema")
    schema_check.check(text)
    return text


class Waiting(Part):
    """The run's waits and timers."""

    # -- waits, timers, task state -------------------------------------------
    async def wait(
        self,
        kind: str,
        *,
        bind: dict[str, Any] | None = None,
        expires_in: dt.timedelta | float | None = None,
        schema: type[T] | Mapping[str, Any] | None = None,
        token: bool = True,
        request: Any = None,
    ) -> waits.Wait[T]:
        """Open a durable wait for one event of `kind`. The event must carry the
        same `bind` values (a `state_version` key is also compared with the task
        state's version at delivery; a `policy_version` key binds the wait to
        the policy it opens under, see docs/architecture.md §8), arrive before
        `expires_in`, carry the
        wait's token (unless `token=False`) and fit `schema` (a type such as a
        pydantic model, or a JSON Schema as a dict). Hand `w.token` to the human
        channel (or build its link in the effect that sends it:
        `w.link(base_url)`), then `event = await w`.

        `request` (JSON) is what the wait asks a person, shown wherever it is
        decided (`stead waits ls`, `stead waits show`, the dashboard's queue
        and run page), its first `waits.REQUEST_CHARS` characters; a wait with a
        request is listed for a person to answer even without a token."""
        from stead import keys, policy_binding
        from stead.records import WaitState
        from stead.workflow import waits

        if not kind or not isinstance(kind, str):
            raise ValueError("a wait needs a kind (the event type it awaits)")
        bounds.text(kind, "a wait's kind")
        bind_json = codec.loads(codec.dumps(bind or {}, what="the bound values"))
        asked = waits.request_text(request)
        if not isinstance(bind_json, dict):
            raise TypeError("bind is a dict of the values the event must match")
        seconds = None if expires_in is None else bounds.seconds(expires_in,
                                                                 "a wait's expires_in")
        schema_json = None if schema is None else _schema_text(schema)
        addr = addresses.reserve()
        digest = policy_binding.open_digest(self._x.journal.first(addr), kind, bind_json,
                                            seconds, schema_json, token)
        prior = self._x.take(addr, RecordKind.WAIT, kind, digest)
        resolution = None
        key_id: str | None = None  # a new wait's token is signed by the current key
        label: str | None = None  # a fork's wait: its id in the journal (see `stead.client.forks`)
        policy = self._x.policy_version
        if records.POLICY_VERSION_KEY in bind_json:
            bound = bind_json[records.POLICY_VERSION_KEY]
            policy = None if bound is None else str(bound)
        if prior:
            opened = codec.loads(prior[0].payload)
            wait_id, expires_at, created_at = opened["wait_id"], opened["expires_at"], prior[0].at
            label = opened.get("journal_id")
            key_id = opened.get("key", keys.LEGACY)
            resolution = prior[1] if len(prior) > 1 else None
            # What the wait opened with, not what the code binds now (see `open_digest`).
            bind_json = opened.get("bind", bind_json)
            policy = opened.get("policy_version", policy)
            asked = None if opened.get("request") is None else codec.dumps(
                opened["request"], what="the wait's request")
        else:
            self._x.check_live()
            wait_id, created_at = _uuid.uuid4().hex, self._x.clock.now()
            expires_at = None if seconds is None else created_at + seconds
        minted, hashed = (None, None) if not token else waits.mint(
            await self._x.keyring(), key_id, self.id, wait_id, self._x.secrets, label)
        row = records.WaitRow(
            wait_id=wait_id, run_id=self.id, addr=addr, kind=kind,
            bind=codec.dumps(bind_json, what="bind"), schema=schema_json,
            token_hash=hashed,
            task_key=self._task_key, expires_at=expires_at, state=WaitState.OPEN,
            event_id=None, created_at=created_at, policy_version=policy, request=asked,
        )
        if not prior:
            opening: dict[str, Any] = {"wait_id": wait_id, "expires_at": expires_at,
                                       "bind": bind_json, "policy_version": policy}
            if minted is not None:
                opening["key"] = minted.key_id
            if asked is not None:
                opening["request"] = codec.loads(asked)
            text = codec.dumps(opening, what="the wait")
            rec = self._x.record(addr, 1, RecordKind.WAIT, kind, digest, RecordStatus.OPEN, text)
            await self._x.write([rec], lambda batch, resume: self._x.store.open_wait(
                self._x.fence, batch, resume, row))
        return waits.Wait(self._x, addr, kind, digest, row, minted, schema, resolution, label)

    async def sleep(self, duration: dt.timedelta | float) -> None:
        """Sleep durably: the wake-up time is journaled, so a run taken over
        sleeps only the remainder; a long sleep holds no worker."""
        seconds = bounds.seconds(duration, "a sleep's duration", zero=True)
        addr = addresses.reserve()
        digest = codec.digest(seconds)
        prior = self._x.take(addr, RecordKind.SLEEP, "sleep", digest)
        if prior:
            until = float(codec.loads(prior[0].payload)["until"])
        else:
            self._x.check_live()
            until = self._x.clock.now() + seconds
            await self._x.commit([self._x.record(
                addr, 1, RecordKind.SLEEP, "sleep", digest, RecordStatus.OPEN,
                codec.dumps({"until": until}, what="a timer"))])
        await self._x.sleep_until(until)
