"""A tenant's quotas on what it creates (see `stead.spend.Limits`): runs
started per minute and children per run, checked where a run is created;
open waits, where a wait is opened; stored bytes, at both and at each model
call's reservation (`spend.reserve`), so a runaway agent stops. Each check is
made only for a tenant with that quota, under the tenant's row lock
(`lock_tenant_spend`), so concurrent starts of one tenant are counted one
after the other; what is over raises `QuotaExceeded` and nothing is written."""

from __future__ import annotations

from stead import errors
from stead.spend import Limits
from stead.store.seam import Flow, one

MINUTE = 60.0


def _lock(tenant: str) -> Flow[None]:
    yield one("lock_tenant_spend", {"tenant": tenant})


def _refuse(tenant: str, quota: str, limit: int, used: int, what: str) -> errors.QuotaExceeded:
    return errors.QuotaExceeded(
        f"tenant {tenant!r} is at its {quota} quota ({used} of {limit}): {what} was refused, "
        f"nothing was written. Other tenants are not affected; raise it with stead tenants "
        f"set {tenant} --{quota.replace('_', '-')} N --by WHO --why WHY",
        tenant=tenant, quota=quota, limit=limit, used=used)


def run_tenant(run_id: str) -> Flow[str | None]:
    """The tenant run `run_id` serves; None for none."""
    row = yield one("run_tenant", {"run_id": run_id})
    return None if row is None or not row["tenant"] else str(row["tenant"])


def tenant_limits(tenant: str) -> Flow[Limits | None]:
    row = yield one("get_tenant_limits", {"tenant": tenant})
    return None if row is None else Limits.loads(str(row["limits"]))


def _limits(tenant: str | None) -> Flow[Limits | None]:
    if tenant is None:
        return None
    return (yield from tenant_limits(tenant))


def starts(tenant: str | None, parent_id: str | None, runs: int, now: float) -> Flow[None]:
    """Before `runs` runs of `tenant` are created (children of `parent_id`,
    if given): refuse past its runs-per-minute, children-per-run or
    stored-bytes quota."""
    limits = yield from _limits(tenant)
    if tenant is None or limits is None:
        return
    children = limits.children_per_run if parent_id is not None else None
    if limits.runs_per_minute is None and children is None and limits.stored_bytes is None:
        return
    yield from _lock(tenant)
    if limits.runs_per_minute is not None:
        row = yield one("tenant_recent_starts", {"tenant": tenant, "since": now - MINUTE})
        used = int(row["n"])
        if used + runs > limits.runs_per_minute:
            raise _refuse(tenant, "runs_per_minute", limits.runs_per_minute, used,
                          "starting a run" if runs == 1 else f"starting {runs} runs")
    if children is not None:
        row = yield one("count_children", {"run_id": parent_id})
        used = int(row["n"])
        if used + runs > children:
            raise _refuse(tenant, "children_per_run", children, used,
                          f"starting a child of run {parent_id}")
    yield from stored_bytes(tenant, limits, "starting a run")


def open_wait(run_id: str) -> Flow[None]:
    """Before run `run_id` opens a wait: refuse past its tenant's open-waits
    or stored-bytes quota."""
    tenant = yield from run_tenant(run_id)
    limits = yield from _limits(tenant)
    if tenant is None or limits is None or (
            limits.open_waits is None and limits.stored_bytes is None):
        return
    yield from _lock(tenant)
    if limits.open_waits is not None:
        row = yield one("tenant_open_waits", {"tenant": tenant})
        used = int(row["n"])
        if used + 1 > limits.open_waits:
            raise _refuse(tenant, "open_waits", limits.open_waits, used,
                          f"opening a wait of run {run_id}")
    yield from stored_bytes(tenant, limits, f"opening a wait of run {run_id}")


def stored_bytes(tenant: str, limits: Limits, what: str) -> Flow[None]:
    """Refuse `what` if `tenant` holds its stored-bytes quota or more."""
    if limits.stored_bytes is None:
        return
    row = yield one("tenant_stored_bytes", {"tenant": tenant})
    used = int(row["n"])
    if used >= limits.stored_bytes:
        raise _refuse(tenant, "stored_bytes", limits.stored_bytes, used, what)
