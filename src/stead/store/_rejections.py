"""How many rejected events the store keeps, written once for both
databases as flows (see `seam`).

Every delivered event is stored with its verdict, and a rejected one can be
sent by anyone: a guessed token to a known run, or any id at all for a run
that does not exist. So only the newest rejected events are kept: `PER_RUN`
of each run, and `UNKNOWN_RUNS` in all of those to runs that do not exist
(an unknown run id costs a sender nothing, so a cap per run would bound
nothing). The ones trimmed are counted (`rejected_tally`: per run, and under
`UNKNOWN` for runs that do not exist), so what was refused is not forgotten
silently. Accepted events are never trimmed: a wait's consumption names its
event, and a redelivery must find it to be a duplicate.

Retention (`stead db prune`) deletes a run's rejected events and tally with
the run, and rejected events older than its cutoff on their own (`prune`),
of any run, live or not: a rejected event decides nothing later (a
redelivery of it is judged again either way).
"""

from __future__ import annotations

from stead.store.seam import Flow, count, execute, one

# The newest rejected events kept of each run.
PER_RUN = 100
# The newest events to runs that do not exist kept, in all (written in the
# query `trim_rejected_unknown` of each dialect, see there).
UNKNOWN_RUNS = 1000
# The tally's key for events to runs that do not exist (no run id is empty).
UNKNOWN = ""


def trim(run_id: str, run_exists: bool, now: float) -> Flow[int]:
    """After a rejected event of `run_id` is stored: delete the rejected
    events past the newest kept, and count them. Returns how many."""
    if run_exists:
        dropped = yield count("trim_rejected", {"run_id": run_id, "keep": PER_RUN})
        scope = run_id
    else:
        yield execute("lock_rejected_unknown")
        dropped = yield count("trim_rejected_unknown", {})
        scope = UNKNOWN
    if dropped:
        yield execute("tally_rejected", {"run_id": scope, "dropped": dropped, "now": now})
    return int(dropped)


def dropped(run_id: str) -> Flow[int]:
    """How many rejected events of `run_id` (`UNKNOWN`: to runs that do not
    exist) are no longer kept."""
    row = yield one("get_rejected_tally", {"run_id": run_id})
    return 0 if row is None else int(row["dropped"])


def prune(cutoff: float, limit: int) -> Flow[int]:
    """Delete up to `limit` rejected events received before `cutoff`, of
    any run, and the tallies last counted before it. Returns how many
    events."""
    deleted = yield count("prune_rejected", {"cutoff": cutoff, "limit": limit})
    yield execute("prune_rejected_tally", {"cutoff": cutoff})
    return int(deleted)


def prunable(cutoff: float) -> Flow[int]:
    """How many rejected events were received before `cutoff`."""
    row = yield one("count_old_rejected", {"cutoff": cutoff})
    return 0 if row is None else int(row["n"])
