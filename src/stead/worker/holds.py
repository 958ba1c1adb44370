"""`Holds`: how long one worker's runs hold their slots, which says whether
they free them in waves (runs that end within milliseconds: a slot claimed
on its own between two waves costs a claim and commits of its own; see
`Claims._kept`), and the tenants of the runs a fair claim gave this worker
that are in flight here."""

from __future__ import annotations

import collections
import statistics
from collections.abc import Iterable

from stead.records import RunRow
from stead.tenants import NONE


class Holds:
    """The holds of the last `concurrency` runs to leave a slot here, and the
    claim time of each run in one now (monotonic seconds)."""

    def __init__(self, concurrency: int) -> None:
        self._since: dict[str, float] = {}
        self._ended: collections.deque[float] = collections.deque(maxlen=concurrency)
        self._tenants: dict[str, str] = {}  # of the runs a fair claim gave

    def claimed_fairly(self, runs: Iterable[RunRow]) -> None:
        """Runs a fair claim gave this worker (each naming its tenant)."""
        self._tenants.update((run.run_id, run.tenant or NONE) for run in runs)

    def began(self, run_id: str, now: float) -> None:
        self._since[run_id] = now

    def ended(self, run_id: str, now: float) -> None:
        self._tenants.pop(run_id, None)
        since = self._since.pop(run_id, None)
        if since is not None:
            self._ended.append(now - since)

    @property
    def in_flight(self) -> int:
        return len(self._since)

    def in_flight_within(self, seconds: float, now: float) -> int:
        """The runs in flight here claimed no more than `seconds` ago: those
        that, among quick runs, end soon (one held longer is not quick)."""
        return sum(1 for since in self._since.values() if now - since <= seconds)

    def held(self) -> dict[str, int]:
        """How many runs of each tenant a fair claim gave this worker that it
        has not seen end: slots not yet free here, whatever the store says."""
        return dict(collections.Counter(self._tenants.values()))

    def longer_than(self, seconds: float, now: float) -> bool:
        """Whether the runs here hold their slots longer than `seconds`: the
        median of the last holds and of the runs in flight so far (each a
        hold at least that long, so that runs turning long show before they
        end). With nothing to judge by, yes: the cautious answer keeps the slot."""
        held = [*self._ended, *(now - since for since in self._since.values())]
        return not held or statistics.median(held) > seconds
