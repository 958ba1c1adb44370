"""End-user stream tokens: a signed, expiring, read-only pass to one run's
streams (or to one of them), minted by the app for a browser that reads its
run's answer over server-sent events with no operator login.

`tokens` makes and checks the token (pure: a keyring and the time in, a
`Grant` or a `Refusal` out); `Client.stream_token` mints one for a run the
client can see, `Client.revoke_stream_token` revokes one (or every token of a
run) in the store, and the dashboard's SSE route (`web/streams.py`) takes one
as `?token=` in place of a login, for that run and stream only."""

from __future__ import annotations
