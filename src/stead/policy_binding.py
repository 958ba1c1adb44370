"""A wait bound to the policy version it opened under (its bind has the
`policy_version` key): which version that is, whether the versions now in
force still include it, and the digest replay matches the wait's call with,
which leaves the version out (see docs/architecture.md §8)."""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from typing import Any

from stead import codec
from stead.records import POLICY_VERSION_KEY, Record, WaitRow


def bound(wait: WaitRow) -> str | None:
    """The policy version a wait opened under: the recorded one, or (a wait
    stored before waits recorded it) its bound value."""
    if wait.policy_version is not None:
        return wait.policy_version
    value = json.loads(wait.bind).get(POLICY_VERSION_KEY)
    return None if value is None else str(value)


def changed(wait: WaitRow, live: Collection[str | None],
            client: Sequence[str | None] = ()) -> str | None:
    """Why the policy `wait` opened under is no longer in force (None: it is,
    or nobody can tell). `live` are the versions (None: no policy) the live
    workers serving the run run; they decide, since one of them wakes it:
    mid-deploy, an event is accepted while at least one runs the wait's
    version. With none live, `client` decides: the delivering client's app's
    version, if it has an app; with neither, the wake compares."""
    version = bound(wait)
    if live:
        if version in live:
            return None
        running = ", ".join(sorted(v or "none" for v in live))
        return (f"the wait bound policy {version or 'none'}, the live workers serving the run "
                f"run policy {running}")
    for now in client:
        if now != version:
            return (f"the wait bound policy {version or 'none'}, the app's policy is now "
                    f"{now or 'none'}")
    return None


def open_digest(journaled: Record | None, kind: str, bind: dict[str, Any],
                seconds: float | None, schema: str | None, token: bool) -> str:
    """The digest replay compares a wait's call with. The bound policy version
    is not in it (it is recorded with the wait): a deploy that changes it does
    not make the replay mismatch. A wait `journaled` when it was still in the
    digest is matched with the value it journaled."""
    if POLICY_VERSION_KEY not in bind:
        return codec.digest(kind, bind, seconds, schema, token)
    unbound = {k: v for k, v in bind.items() if k != POLICY_VERSION_KEY}
    digest = codec.digest(kind, unbound, seconds, schema, token)
    if journaled is not None and journaled.digest != digest:
        opened = codec.loads(journaled.payload)
        was = opened.get("bind") if isinstance(opened, dict) else None
        if isinstance(was, dict) and POLICY_VERSION_KEY in was:
            legacy = codec.digest(kind, {**unbound, POLICY_VERSION_KEY: was[POLICY_VERSION_KEY]},
                                  seconds, schema, token)
            if legacy == journaled.digest:
                return legacy
    return digest
