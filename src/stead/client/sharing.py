"""Sharing a run's streams with an end user: minting a stream token, revoking
tokens, and checking one (what the dashboard's SSE route asks before it
streams to a browser that holds no login). See `stead.stream_tokens`."""

from __future__ import annotations

from stead.client.inspecting import Inspecting
from stead.stream_tokens import tokens
from stead.stream_tokens.tokens import Refusal, StreamToken


class Sharing(Inspecting):
    """What `Client` hands out to end users, and takes back."""

    async def stream_token(self, run_id: str, *, ttl: float = tokens.DEFAULT_TTL,
                           stream: str | None = None) -> StreamToken:
        """A signed token that lets its holder read run `run_id`'s streams
        (only `stream`, if named) for `ttl` seconds and nothing else: give its
        `text` to the browser, which reads
        `/runs/RUN/streams/NAME?token=TEXT` from the dashboard with an
        `EventSource`. Signed with the keys that sign wait tokens
        (`stead.keys`); `UnknownRun` for a run this client cannot see."""
        tokens.check_ttl(ttl)
        await self.get(run_id)
        ring = await self.store.keyring()
        return tokens.mint(ring, run_id, stream, self.store.clock.now(), ttl)

    async def revoke_stream_token(self, token: StreamToken | str) -> str:
        """Refuse a token from now on: the `StreamToken`, its text, or its id
        (`StreamToken.token_id`). Returns the id revoked."""
        if isinstance(token, StreamToken):
            token_id, expires_at = token.token_id, token.expires_at
        else:
            token_id = tokens.token_id(token) or token.strip()
            expires_at = self.store.clock.now() + tokens.MAX_TTL
        if not token_id or len(token_id) > 64 or not token_id.isalnum():
            raise ValueError("a stream token's id is the 32 hex digits it names "
                             "(StreamToken.token_id)")
        await self.store.revoke_stream_token(token_id, expires_at)
        return token_id

    async def revoke_stream_tokens(self, run_id: str) -> None:
        """Refuse every stream token of run `run_id` minted until now."""
        await self.get(run_id)
        await self.store.revoke_run_stream_tokens(run_id, tokens.MAX_TTL)

    async def check_stream_token(self, text: str, run_id: str, stream: str) -> Refusal | None:
        """Whether the token `text` opens run `run_id`'s stream `stream` now
        (None: it does), and if not, the refusal to answer. Nothing of the run
        is read before the token's signature checks."""
        claims = tokens.read(await self.store.keyring(), text)
        if isinstance(claims, Refusal):
            return claims
        now = self.store.clock.now()
        if now >= claims.expires_at:
            return tokens.EXPIRED
        revoked = await self.store.stream_token_revoked(claims.token_id, claims.run_id,
                                                        claims.issued_at)
        return tokens.judge(claims, run_id, stream, now, revoked)
