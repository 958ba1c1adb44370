"""What a user hands the crash matrix: `events` (what to deliver to each wait
a run opens) and `services` (the outside world of each point)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any


@dataclasses.dataclass(frozen=True)
class Waiting:
    """An open wait the matrix must answer: what an `events` hook is given."""

    run_id: str
    wait_id: str
    kind: str
    bind: dict[str, Any]
    folder: Path


@dataclasses.dataclass(frozen=True)
class Event:
    """What to deliver to a wait (`Client.deliver`). `bind` defaults to the
    values the wait is bound to, as a page showing them would send back."""

    event_id: str
    payload: Any = None
    token: str | None = None
    bind: dict[str, Any] | None = None


EventSource = Callable[[Waiting], Event]


@dataclasses.dataclass(frozen=True)
class Services:
    """The outside world of a point, in its folder (the workers' cwd).

    `calls(folder)` returns, per effect key, how many send calls the outside
    received (pass `op.key` to your fake services and count by it);
    `prepare(folder)` readies the folder before the workers start; `env(folder)`
    gives the worker processes environment variables (e.g. where your fake
    services keep their files)."""

    calls: Callable[[Path], Mapping[str, int]] | None = None
    prepare: Callable[[Path], None] | None = None
    env: Callable[[Path], Mapping[str, str]] | None = None
