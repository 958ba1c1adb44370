"""What a user hands the crash matrix: `events` (what to deliver to each wait
a run opens) and `services` (the outside world of each point)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any


@dataclasses.dataclass(frozen=True)
class Waiting:
    """An open wait the matrix must answer: what an `events` hook is given.
    `run_id`, `wait_id` and `kind` name it, `bind` holds the values it is bound
    to, and `folder` is the point's folder, the worker processes' working
    directory.

    The wait's token (a wait opened with `token=True`, the default) is not
    here: stead reveals it only inside the effect that sends it (`w.link(url)`,
    `w.token.reveal()`), and the matrix does not know it either. A hook reads it
    where that effect put it, as the person it was sent to would: have your fake
    mail service keep what it sends in a file of the current directory (the
    point's folder), and read the last message from `folder`. A wait opened with
    `token=False` takes an `Event` without one."""

    run_id: str
    wait_id: str
    kind: str
    bind: dict[str, Any]
    folder: Path


@dataclasses.dataclass(frozen=True)
class Event:
    """What to deliver to a wait (`Client.deliver`): its `event_id` (each
    delivery of it after the first is a duplicate), its `payload`, the wait's
    `token` (see `Waiting` for where a hook finds it). `bind` defaults to the
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
