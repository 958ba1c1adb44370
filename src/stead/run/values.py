"""`Run.now`, `Run.uuid` and `Run.random`: values recorded, not computed
again on replay; they ride along with the next commit (see
`stead.execution`)."""

from __future__ import annotations

import datetime as dt
import random as _random
import uuid as _uuid
from collections.abc import Callable

from stead import addresses, codec
from stead.records import RecordKind, RecordStatus
from stead.run.base import Part


class Values(Part):
    """The run's recorded values."""

    # -- recorded values (synchronous; they ride along with the next commit) --
    def _value(self, kind: RecordKind, make: Callable[[], str]) -> str:
        addr = addresses.reserve()
        prior = self._x.take(addr, kind, kind, "")
        if prior:
            return prior[-1].payload
        self._x.check_live()
        payload = make()
        self._x.buffer(self._x.record(addr, 1, kind, kind, "", RecordStatus.OK, payload))
        return payload

    def now(self) -> dt.datetime:
        """The current time (UTC), recorded: replay returns the same instant."""
        payload = self._value(
            RecordKind.NOW,
            lambda: codec.dumps(
                dt.datetime.fromtimestamp(self._x.clock.now(), tz=dt.UTC).isoformat(),
                what="now",
            ),
        )
        return dt.datetime.fromisoformat(codec.loads(payload))

    def uuid(self) -> _uuid.UUID:
        """A random UUID, recorded."""
        payload = self._value(RecordKind.UUID, lambda: codec.dumps(str(_uuid.uuid4()), what="uuid"))
        return _uuid.UUID(codec.loads(payload))

    def random(self) -> float:
        """A random float in [0, 1), recorded."""
        payload = self._value(
            RecordKind.RANDOM, lambda: codec.dumps(_random.random(), what="random")
        )
        return float(codec.loads(payload))
