"""A run's history as one JSON document: `stead runs export RUN > run.json`,
`stead runs import run.json`, and what `stead replay-check --from DIR` and
`stead.testing.check_migration` read.

It holds what replaying the run needs: the run's row (its workflow, version,
input, status), its journal, its waits (token hashes only, never a token)
and its task state. Reading one checks its shape and says what is wrong,
naming the file, rather than fail later in a replay.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from stead import errors
from stead.records import Record, RunRow, StateRow, WaitRow

FORMAT = "stead.run/1"


@dataclasses.dataclass(frozen=True)
class StoredRun:
    """A run as stored: its row, its journal in commit order, its waits and
    its task state (None if the task has none)."""

    run: RunRow
    journal: tuple[Record, ...]
    waits: tuple[WaitRow, ...] = ()
    state: StateRow | None = None

    @property
    def code(self) -> str:
        return f"{self.run.workflow}@{self.run.version}"

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "run": dataclasses.asdict(self.run),
            "journal": [dataclasses.asdict(r) for r in self.journal],
            "waits": [dataclasses.asdict(w) for w in self.waits],
            "state": None if self.state is None else dataclasses.asdict(self.state),
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, data: Any, *, source: str = "the export") -> StoredRun:
        """Read an export; `InvalidInput` naming `source` if it is not one."""
        try:
            if not isinstance(data, Mapping) or data.get("format") != FORMAT:
                raise ValueError(f"it is not a stead run export (format {FORMAT!r})")
            run = RunRow(**data["run"])
            journal = tuple(Record(**r) for r in data["journal"])
            waits = tuple(WaitRow(**w) for w in data.get("waits", []))
            state = None if data.get("state") is None else StateRow(**data["state"])
        except (KeyError, TypeError, ValueError) as exc:
            raise errors.InvalidInput(f"{source}: {exc}") from exc
        return cls(run, journal, waits, state)

    @classmethod
    def loads(cls, text: str, *, source: str = "the export") -> StoredRun:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise errors.InvalidInput(f"{source} is not JSON: {exc}") from exc
        return cls.from_json(data, source=source)
