"""Revoked end-user stream tokens (`stead.stream_tokens`): a revocation, and
whether a token is revoked. A token is named by its id; every token of a run
by `run:<run id>`, refused when issued at or before the revocation."""

from __future__ import annotations

from stead.store.seam import Flow, execute, one

RUN_PREFIX = "run:"


def revoke(revoked: str, now: float, expires_at: float) -> Flow[None]:
    """Keep `revoked` until `expires_at`, and forget revocations that ran out."""
    yield execute("forget_stream_revocations", {"now": now})
    yield execute("revoke_stream_token",
                  {"revoked": revoked, "now": now, "expires_at": expires_at})


def revoked(token_id: str, run_id: str, issued_at: float) -> Flow[bool]:
    row = yield one("stream_token_revoked", {"token_id": token_id,
                                             "run_key": RUN_PREFIX + run_id,
                                             "issued_at": issued_at})
    return row is not None
