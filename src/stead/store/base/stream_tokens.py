"""The `Store`'s part for end-user stream tokens: their revocations (the
tokens themselves are never stored: a token is checked by its signature)."""

from __future__ import annotations

from stead.store.base.part import StorePart
from stead.store.seam import Writing
from stead.store.transactions import stream_tokens as tx


class StreamTokens(StorePart):
    """Revoking end-user stream tokens, and asking whether one is revoked."""

    async def revoke_stream_token(self, token_id: str, expires_at: float) -> None:
        """Refuse the token `token_id` from now on (kept until `expires_at`,
        its own expiry, past which it is refused anyway). Twice is once."""
        now = self.clock.now()
        await self.database.write(lambda: tx.revoke(token_id, now, max(expires_at, now)),
                                  Writing())

    async def revoke_run_stream_tokens(self, run_id: str, longest: float) -> None:
        """Refuse every token of `run_id` issued until now (kept for `longest`
        seconds: no token lives longer)."""
        now = self.clock.now()
        await self.database.write(
            lambda: tx.revoke(tx.RUN_PREFIX + run_id, now, now + longest), Writing())

    async def stream_token_revoked(self, token_id: str, run_id: str, issued_at: float) -> bool:
        """Whether the token `token_id` of `run_id`, issued at `issued_at`, is
        revoked (by its id, or with every token of its run)."""
        return await self.database.read(lambda: tx.revoked(token_id, run_id, issued_at))
