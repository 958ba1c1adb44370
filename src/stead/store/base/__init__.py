"""The store: runs, journals, leases, waits, events and task state, over a
`Database` (SQLite or PostgreSQL). It knows nothing of workflows. Every state
change is one transaction, written once in `transactions`; every write by a
run's holder is fenced by its epoch and raises `StaleLease` when the fence
fails. `Store` is composed of one part per concern, a module of this package
each (`runs`, `leases`, `journal`, `waits`, `state`, `intents`, `actions`,
`migrations`, `retention`, `workspaces`, `payloads`, `conversations`, `spend`,
`stream_tokens`), over the transactions of the same name; this module holds what is
left: opening, the keyring, waiting for work.
docs/architecture.md draws the whole."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from stead import addresses, waiting
from stead.store import _holders, schema_versions
from stead.store.base.actions import Actions
from stead.store.base.blobs import LargeBlobs
from stead.store.base.conversations import Conversations
from stead.store.base.intents import Intents
from stead.store.base.journal import Journals
from stead.store.base.leases import Leases
from stead.store.base.migrations import Migrations
from stead.store.base.news import NewsWait
from stead.store.base.payloads import Payloads
from stead.store.base.retention import Retention
from stead.store.base.runs import Runs
from stead.store.base.spend import Spending
from stead.store.base.state import TaskState
from stead.store.base.stream_tokens import StreamTokens
from stead.store.base.waits import Waits
from stead.store.base.workspaces import Workspaces
from stead.store.seam import Database, WorkMark
from stead.store.transactions import common, leases
from stead.store.transactions.intents import Guard, Revise
from stead.store.transactions.state import OutsideChange, StateChange
from stead.store.transactions.waits import Judge

if TYPE_CHECKING:
    from stead import keys


def _outside_branches(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    async def call(*args: Any, **kwargs: Any) -> Any:
        with addresses.outside_branches():
            return await method(*args, **kwargs)

    call.stead_outside_branches = True  # type: ignore[attr-defined]
    return call


def run_outside_branches(cls: type) -> None:
    """Make every public coroutine of `cls` run outside branches (see `Store`)."""
    for name in dir(cls):
        member = inspect.getattr_static(cls, name)
        if (not name.startswith("_") and inspect.iscoroutinefunction(member)
                and not getattr(member, "stead_outside_branches", False)):
            setattr(cls, name, _outside_branches(member))


class Store(Runs, Leases, Journals, Waits, TaskState, Intents, Actions, Migrations, Retention,
            Workspaces, Payloads, Conversations, Spending, StreamTokens, LargeBlobs):
    """A store's public coroutines run outside the workflow's branches: a task
    a store starts while a run awaits it (a pool waiting for a free connection,
    a group commit's flusher) must not be numbered as one of the run's
    branches, or the run's next gather would get other addresses on replay,
    where that store call is not made. Subclasses get this by themselves."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self.url = database.url
        self.clock = database.clock
        self.large = None
        # Where the keys that sign wait tokens come from (see `stead.keys`): a
        # hook given to `open_store`, and the key file beside an SQLite file.
        self.key_source: keys.KeySource | None = None
        self.key_file: str | None = None
        self._legacy: bytes | None = None
        self._legacy_read = False
        self._absences = _holders.Absences()
        self._news = NewsWait(database)  # a wait that fails becomes the poll

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        run_outside_branches(cls)

    async def open(self) -> None:
        """Connect, past the schema's version gate (see `schema_versions`)."""
        await self.database.open()

    async def close(self) -> None:
        await self.database.close()

    async def check_schema(self) -> str | None:
        """Raise `SchemaAhead` if the database was migrated, since it was
        opened, past what this code can work with (a breaking migration newer
        than the code): a worker asks at each heartbeat and stops claiming.
        Inside the compatibility window, the line that says so; else None."""
        known = schema_versions.latest()
        beyond = await self.database.read(lambda: leases.schema_beyond(known))
        if not beyond:
            return None
        where = self.database.display
        schema_versions.check_beyond(beyond, known, where)
        found = schema_versions.Found(frozenset(b.version for b in beyond), tuple(beyond))
        return schema_versions.window_line(found, known, where)

    async def keyring(self) -> keys.Keyring:
        """The keys that sign and verify wait tokens (see `stead.keys`; never
        kept in this database). A database that still holds the secret it
        signed tokens with before (`stead_meta`) lends it as the `legacy` key,
        so runs that opened waits with it replay; no new secret is made here."""
        # Imported when a keyring is first asked for (a wait opened, a token
        # checked): a store that only reads runs never loads the key files.
        from stead import keys

        ring = keys.resolve(self.key_source, self.key_file)
        if ring.legacy is not None:
            return ring
        if not self._legacy_read:
            value = await self.database.read(lambda: common.read_one(
                "get_meta", {"key": "secret"}, lambda row: str(row["value"])))
            self._legacy = None if value is None else bytes.fromhex(value)
            self._legacy_read = True
        return ring.with_legacy(self._legacy)

    async def work_mark(self) -> WorkMark | None:
        """Where the store stands for idle workers, taken before a claim looks
        for runs; given to the wait after a claim that found nothing
        (`wait_for_work`'s `since`). None where the store has no such mark.
        A coroutine, as the store's whole interface is, though nothing in it
        waits: stores that wrap a store hand on its coroutines."""
        return self.database.work_mark()

    async def wait_for_work(self, timeout: float, *,
                            ring: Callable[[], None] | None = None,
                            since: WorkMark | None = None) -> None:
        """Return when a run may have become claimable, or after `timeout`
        seconds (SQLite: soon after any commit to the file; PostgreSQL: on
        NOTIFY); at once when a store of this process on the same database
        makes work claimable (`local_work`). `ring` is called, on the event
        loop, the moment such news comes, before this wait's own return
        (see `stead.waiting.Bell`). `since` (`work_mark`): news that came
        after it, before this wait began, counts too."""
        local = self.database.local
        if local is None:
            await self._news.wait(timeout, ring, since)
            return
        with local.waiting(ring) as news:
            await waiting.first(self._news.wait(timeout, ring, since), bells=(news,))

    @property
    def commits(self) -> int:
        """Transactions committed by this store's database object (for tests
        and benches)."""
        return self.database.commits


run_outside_branches(Store)

__all__ = ["Guard", "Judge", "OutsideChange", "Revise", "StateChange", "Store",
           "run_outside_branches"]
