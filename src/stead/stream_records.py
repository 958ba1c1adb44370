"""What a durable stream holds: its entries, as stored and as a reader gets
them (see `stead.workflow.streams` for the rules and docs/architecture.md §3)."""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Any


class EntryKind(enum.StrEnum):
    """What an entry is: a value the workflow appended, the note that earlier
    entries were superseded (a call's try that died or failed; the note's value
    says which), or the stream's end."""

    VALUE = "value"
    SUPERSEDED = "superseded"
    CLOSED = "closed"


@dataclasses.dataclass(frozen=True, slots=True)
class StreamEntry:
    """One entry of run `run_id`'s stream `name`. `offset` numbers the
    stream's entries from 1 in commit order: a reader resumes after the last
    offset it saw. `superseded`: a later try of the call that appended it
    replaced it (a `SUPERSEDED` entry after it says so to a reader who saw it
    before). `text` is the value's JSON."""

    run_id: str
    name: str
    offset: int
    kind: EntryKind
    text: str
    superseded: bool
    at: float

    @property
    def value(self) -> Any:
        return json.loads(self.text)

    def to_json(self) -> dict[str, Any]:
        """The entry as a reader on the wire gets it (the SSE route's data)."""
        return {"offset": self.offset, "kind": str(self.kind), "value": self.value,
                "superseded": self.superseded, "at": self.at}


@dataclasses.dataclass(frozen=True, slots=True)
class NewEntry:
    """An entry to append. `key` is the append's identity: a replayed append
    finds it and is not appended again. `call` and `attempt_of` (the call's
    address and its `epoch.attempt`) are set for an entry appended from inside
    a live call; `first` for the first entry of that try, whose append
    supersedes the entries of the call's earlier tries."""

    key: str
    kind: EntryKind
    text: str
    at: float
    call: str | None = None
    attempt_of: str | None = None
    first: bool = False
