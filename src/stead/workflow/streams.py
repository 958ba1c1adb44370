"""Durable streams: values a workflow appends for a screen to follow, and the
reader that tails them (`Client.read_stream`, the dashboard's SSE route).

`run.stream(name)` is a `Stream`. An append from the workflow's own code is
keyed by its call address, so a replayed append finds its entry and is not
appended again: a stream holds each value once whatever the worker crashes.
An append made from inside a live call (a model adapter's `on_text`, a
step's function) is keyed by the call's address, its try (epoch and
attempt) and its index in that try. A call's try that dies or fails is made
again; the new try's first append marks the entries of the earlier tries
superseded and appends a `superseded` entry naming their offsets, then its
own values. So a reader that reconnects from its offset sees every entry
once, in order: the partial answer, the note that it was superseded, the
new answer. A reader starting later sees the old entries flagged
`superseded`. docs/architecture.md §3 draws the whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from stead import addresses, codec, errors
from stead.payloads.envelope import What
from stead.records import TERMINAL

if TYPE_CHECKING:
    # For the annotations alone: a client reading runs need not load what
    # executes them, and a run that streams nothing need not load the
    # records of streams (imported by the first append).
    from stead.execution import Execution
    from stead.store.base import Store
    from stead.stream_records import EntryKind, StreamEntry

# A stream's name is short text: it is a key, a URL segment and a label.
MAX_NAME = 200
# How often an idle reader asks the store for new entries, at most and at
# least: it asks again at once after finding some, and backs off to the
# slowest when nothing comes.
POLL_FAST = 0.005
POLL_SLOW = 0.25

# The live call an append is made from: its address and attempt.
_live: contextvars.ContextVar[tuple[str, int] | None] = contextvars.ContextVar(
    "stead_live_call", default=None)


def live_call(addr: str, attempt: int) -> contextlib.AbstractContextManager[None]:
    """Mark the call at `addr`, attempt `attempt`, in flight: appends made
    under it belong to that try (see the module docstring)."""
    return _LiveCall((addr, attempt))


class _LiveCall:
    # A class, not a generator: entered around every step's call, where
    # `contextmanager`'s generator costs a few µs each time.
    __slots__ = ("_call", "_token")

    def __init__(self, call: tuple[str, int]) -> None:
        self._call = call

    def __enter__(self) -> None:
        self._token = _live.set(self._call)

    def __exit__(self, *exc: object) -> None:
        _live.reset(self._token)


def check_name(name: object) -> str:
    if not isinstance(name, str) or not name or len(name) > MAX_NAME \
            or not name.isprintable():
        raise errors.InvalidInput(
            f"a stream's name is printable text of 1 to {MAX_NAME} characters, not {name!r}")
    return name


class Stream:
    """Run `run`'s stream `name`, as the workflow writes it. Calling it
    appends (so a model adapter takes it as `on_text=`)."""

    def __init__(self, execution: Execution, name: str) -> None:
        self._x = execution
        self.name = check_name(name)
        # Entries appended so far by each live call's try, by (address, try).
        self._counts: dict[tuple[str, str], int] = {}

    async def append(self, value: Any) -> int | None:
        """Append `value` (anything `run.step` could return): its offset. A
        replayed append returns the offset its first append got. In a dry
        replay nothing is written (None)."""
        from stead.stream_records import EntryKind

        text = codec.dumps(value, what=f"a value of stream {self.name!r}",
                           limit=self._x.max_result_bytes)
        return await self._append(EntryKind.VALUE, text)

    async def __call__(self, value: Any) -> None:
        await self.append(value)

    async def close(self) -> None:
        """End the stream: a reader stops after this, and an append raises
        `StreamClosed`."""
        from stead.stream_records import EntryKind

        await self._append(EntryKind.CLOSED, "null")

    async def _append(self, kind: EntryKind, text: str) -> int | None:
        from stead.stream_records import NewEntry

        live = _live.get()
        now = self._x.clock.now()
        if live is None:
            addr = addresses.reserve()  # reserved in a dry replay too: addresses stay aligned
            if self._x.dry:
                return None
            self._x.check_live()
            new = NewEntry(addr, kind, text, now)
        else:  # a live call: never in a dry replay, which stops before any
            addr, attempt = live
            tried = f"{self._x.fence.epoch}.{attempt}"
            index = self._counts.get((addr, tried), 0)
            self._counts[(addr, tried)] = index + 1
            new = NewEntry(f"{addr}@{tried}#{index}", kind, text, now, call=addr,
                           attempt_of=tried, first=index == 0)
        store, fence = self._x.store, self._x.fence
        return await self._x.write_beside(lambda: store.append_stream(fence, self.name, new))


async def tail(store: Store, run_id: str, name: str, after: int = 0, *,
               poll: float = POLL_SLOW) -> AsyncIterator[StreamEntry]:
    """Every entry of the stream after offset `after`, in order, waiting for
    new ones until the stream is closed or the run has ended and nothing is
    left to read. `UnknownRun` if there is no such run."""
    from stead.stream_records import EntryKind

    check_name(name)
    if not isinstance(after, int) or isinstance(after, bool) or after < 0:
        raise errors.InvalidInput(f"after is an offset, a whole number from 0, not {after!r}")
    pause = POLL_FAST
    while True:
        # The run's status first: entries appended before it ended are then
        # all read below, before the reader stops.
        ended = (await store.get_run(run_id)).status in TERMINAL
        found = await store.read_stream(run_id, name, after)
        for entry in found:
            # A large value comes back from the blob store as it is yielded.
            text = await store.resolve(entry.text, run_id, What.STREAM)
            yield entry if text is entry.text else dataclasses.replace(entry, text=text)
            after = entry.offset
            if entry.kind == EntryKind.CLOSED:
                return
        if found:
            pause = POLL_FAST
            continue
        if ended:
            return
        await asyncio.sleep(pause)
        pause = min(pause * 2, poll)

