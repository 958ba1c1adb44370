"""A task's "world" as a resume record and the policy's snapshots keep it:
the task state's version and a digest of each key's value (the values stay
in the task state). Apart from `stead.policy`, so that every takeover records
the world a run resumed on without loading the policy's modules."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from stead import codec

if TYPE_CHECKING:
    from stead.records import StateRow


def world(version: int, data: Mapping[str, Any]) -> dict[str, Any]:
    """The world of task state `data` at `version`: the version and, per key,
    the sha256 of the value's JSON."""
    return {"version": version,
            "keys": {str(k): hashlib.sha256(
                json.dumps(v, sort_keys=True, default=str).encode()).hexdigest()
                for k, v in data.items()}}


def of_state(state: StateRow | None) -> dict[str, Any]:
    """The world of a task's stored state: version 0 and no keys for a task
    without state."""
    return world(0 if state is None else state.version,
                 {} if state is None else codec.loads(state.data))
