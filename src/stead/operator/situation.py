"""A run as an operator sees it now (`Situation`): what the actions are
offered on."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from stead.client import Client, RunInfo
from stead.intent import Grant, Intent
from stead.records import Record, RunStatus, WaitRow, WaitState
from stead.views import timeline


@dataclasses.dataclass(frozen=True)
class Situation:
    """A run as an operator sees it now: what actions are offered on."""

    run: RunInfo
    open_waits: tuple[WaitRow, ...]
    grants: tuple[Grant, ...]
    unknown_effects: tuple[str, ...]  # keys of effects whose outcome is not known
    now: float
    # The version the client's app can migrate the run to (None: no migration leads
    # from its version to one the app hosts), and whether its last migration can be
    # rolled back (it has one, not rolled back yet).
    migrate_to: int | None = None
    rollback: bool = False
    has_intent: bool = False  # it carries an intent, which a person may revise



def unknown_effects(journal: Sequence[Record]) -> tuple[str, ...]:
    """The keys of effects whose last phase leaves their outcome open."""
    return tuple(v.key or v.name for v in timeline.effect_views(journal)
                 if v.phase in _OPEN_PHASES)


_OPEN_PHASES = frozenset({"intent", "accepted", "unknown", "reconciled"})


async def situation(client: Client, run_id: str) -> Situation:
    info = await client.get(run_id)
    open_waits = tuple(await client.waits(run_id=run_id, state=WaitState.OPEN, limit=1000))
    intents = await client.intents(run_id)
    grants = Intent.loads(intents[-1].intent).grants if intents else ()
    unknown = (unknown_effects(await client.journal(run_id))
               if info.status == RunStatus.OUTCOME_UNKNOWN else ())
    migrate_to = None
    if client.app is not None and not info.done:
        path = client.app.migrations_path(info.workflow, info.version)
        migrate_to = path[-1].to_version if path else None
    migrations = await client.migrations(run_id)
    rollback = bool(migrations) and migrations[-1].rolled_back_at is None
    return Situation(info, open_waits, tuple(grants), unknown, client.store.clock.now(),
                     migrate_to, rollback, bool(intents))
