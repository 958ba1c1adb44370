"""Listing runs, newest first, or the stranded ones: what `Client.list_runs`
returns, read from a store alone, so that `stead runs ls` needs no `Client`."""

from __future__ import annotations

import dataclasses

from stead import bounds, errors, tenants
from stead.client.info import RunInfo
from stead.records import RunStatus
from stead.store.base import Store

# A runnable run no worker has served for this long is stranded (seconds).
STRANDED_AFTER = 60.0


async def list_runs(store: Store, *, status: str | None = None, workflow: str | None = None,
                    limit: int = 100, stranded: bool = False,
                    grace: float = STRANDED_AFTER, tenant: str | None = None) -> list[RunInfo]:
    """What `Client.list_runs` returns (see there), read from `store`."""
    bounds.integer(limit, "limit", least=1)
    tenants.check(tenant)
    bounds.seconds(grace, "grace", zero=True)
    if stranded:
        found = await store.stranded_runs(grace, limit, workflow)
        return [dataclasses.replace(RunInfo.from_row(s.run), stranded=True,
                                    hosted_at=s.hosted_at) for s in found
                if tenant is None or s.run.tenant == tenant]
    if status is not None:
        try:
            status = RunStatus(status)
        except ValueError:
            raise errors.SteadError(
                f"unknown status {status!r}; one of: {', '.join(RunStatus)}"
            ) from None
    rows = await store.list_runs(status=status, workflow=workflow, limit=limit, tenant=tenant)
    return [RunInfo.from_row(r) for r in rows]
